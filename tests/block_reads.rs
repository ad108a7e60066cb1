//! Others' reads timed at the block layer (`refreshd::io::block_reads`):
//! every read of the watched drive that is not at the refresh's own
//! priorities is counted, and no other.

use std::fs::{self, File};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use refreshd::io::block_reads::ReadTimes;

use crate::helpers::*;

/// Reads completed by the drive (`/sys/block/<dev>/stat`, field 0).
fn drive_reads(name: &str) -> u64 {
    let stat = fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap();
    stat.split_whitespace().next().unwrap().parse().unwrap()
}

/// `n` O_DIRECT 4 KiB reads of the block device, from a thread at the
/// I/O priority `ioprio` (0: the default).
fn read_device(dev: &str, n: u64, ioprio: u16) {
    let dev = dev.to_string();
    std::thread::spawn(move || {
        // SAFETY: ioprio_set takes ints; 1 = a thread, 0 = this one.
        let rc = unsafe { libc::syscall(libc::SYS_ioprio_set, 1, 0, libc::c_int::from(ioprio)) };
        assert_eq!(rc, 0, "ioprio_set: {}", std::io::Error::last_os_error());
        let f = File::options()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&dev)
            .unwrap();
        let mut pool = refreshd::io::buffers::BufferPool::new(1, 4096);
        for i in 0..n {
            f.read_exact_at(pool.get_mut(0), i * 8192).unwrap();
        }
    })
    .join()
    .unwrap();
}

/// Reads that may land on either side of a snapshot, or come from
/// another process (a probe of the fresh filesystem): counted by the
/// drive and timed alike, but not always between the same two looks.
const STRAY: u64 = 2;

fn bpf_fds() -> usize {
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| fs::read_link(e.unwrap().path()).ok())
        .filter(|l| l.to_string_lossy().contains("bpf"))
        .count()
}

#[test]
fn privileged_reads_of_others_are_timed_and_ours_are_not() {
    if !privileged("privileged_reads_of_others_are_timed_and_ours_are_not") {
        return;
    }
    let _tracefs = kernel::Tracefs::new();
    let watched = LoopFs::new("ext4", 64);
    let other = LoopFs::new("ext4", 64);
    let name = Path::new(&watched.dev)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    let fds = bpf_fds();
    let times = ReadTimes::start(Path::new("/sys"), &[name.to_string()])
        .unwrap_or_else(|e| panic!("timing reads on this kernel: {e}"));
    assert!(bpf_fds() > fds, "the maps and programs are fds of ours");

    // Through a scheduler or straight to the drive: each read once.
    for scheduler in ["mq-deadline", "bfq", "none"] {
        let path = format!("/sys/block/{name}/queue/scheduler");
        // Written, not looked up first: the kernel loads a scheduler's
        // module when it is asked for by name.
        if let Err(e) = fs::write(&path, scheduler) {
            let offered = fs::read_to_string(&path).unwrap_or_default();
            // bfq is a module some kernels do not build (this machine's
            // 6.18.44): said, not failed; the other two are in every
            // kernel.
            assert!(
                scheduler == "bfq" && e.raw_os_error() == Some(libc::EINVAL),
                "{scheduler}: {e}"
            );
            skipped(
                "privileged_reads_of_others_are_timed_and_ours_are_not (its bfq part)",
                &format!("this kernel has no bfq (it offers {})", offered.trim()),
            );
            continue;
        }
        let (h0, s0) = (times.histogram(), drive_reads(name));
        read_device(&watched.dev, 300, 0);
        let (h1, s1) = (times.histogram(), drive_reads(name));
        let counted = h1.since(&h0).reads();
        assert!(s1 - s0 >= 300, "{scheduler}: the drive counted {}", s1 - s0);
        assert!(
            counted >= 300 && counted.abs_diff(s1 - s0) <= STRAY,
            "{scheduler}: every read of the drive's, timed once: {counted} of {}",
            s1 - s0
        );
        let p50 = h1.since(&h0).quantile(0.5).unwrap();
        assert!(
            p50 > std::time::Duration::from_micros(1) && p50 < std::time::Duration::from_secs(1),
            "{scheduler}: {p50:?}"
        );
    }

    // The refresh's own priorities: best-effort 7, and the idle class.
    for ioprio in [(2 << 13) | 7, 3 << 13] {
        let (h, s) = (times.histogram(), drive_reads(name));
        read_device(&watched.dev, 200, ioprio);
        assert!(drive_reads(name) - s >= 200);
        let timed = times.histogram().since(&h).reads();
        assert!(timed <= STRAY, "ioprio {ioprio:#x}: {timed} of ours timed");
    }
    // Best-effort 6 is someone else's.
    let h = times.histogram();
    read_device(&watched.dev, 50, (2 << 13) | 6);
    assert!(times.histogram().since(&h).reads() >= 50);

    // Another drive's reads are not this one's.
    let h = times.histogram();
    read_device(&other.dev, 200, 0);
    let timed = times.histogram().since(&h).reads();
    assert!(timed <= STRAY, "{timed} of another drive's timed");

    drop(times);
    assert_eq!(
        bpf_fds(),
        fds,
        "dropped: the programs detached, the maps freed"
    );
}

#[test]
fn a_drive_without_sysfs_entry_is_refused_with_its_path() {
    let root = tempfile::tempdir().unwrap();
    let e = ReadTimes::start(root.path(), &["sdz".to_string()]).unwrap_err();
    assert!(e.why.contains("block/sdz/dev"), "{e}");
    let e = ReadTimes::start(root.path(), &[]).unwrap_err();
    assert!(e.why.contains("no drive"), "{e}");
}

/// Clears this thread's effective CAP_SYS_ADMIN, CAP_PERFMON and CAP_BPF
/// (capabilities are per thread; the test's other threads keep theirs).
fn drop_tracing_capabilities() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut h = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget/capset with a v3 header and two data words, both
    // ours for the call.
    unsafe {
        assert_eq!(libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()), 0);
        d[0].effective &= !(1 << 21);
        d[1].effective &= !((1 << (38 - 32)) | (1 << (39 - 32)));
        assert_eq!(libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()), 0);
    }
}

#[test]
fn privileged_without_the_capabilities_nothing_is_asked_of_bpf() {
    if !privileged("privileged_without_the_capabilities_nothing_is_asked_of_bpf") {
        return;
    }
    let watched = LoopFs::new("ext4", 64);
    let name = Path::new(&watched.dev)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let e = std::thread::spawn(move || {
        drop_tracing_capabilities();
        ReadTimes::start(Path::new("/sys"), &[name]).unwrap_err()
    })
    .join()
    .unwrap();
    // Refused by the check before any `bpf` call (a refused `bpf` says
    // what it was creating).
    assert!(e.why.contains("which this process does not have"), "{e}");
}
