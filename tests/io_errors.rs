//! Error paths of the I/O layer, injected for real: a quota (btrfs qgroup)
//! that the temp copy of a relocation runs into while reads are in flight,
//! then an in-place refresh of another file in the same engine; a lease
//! the kernel revokes while refreshd's writes are held back by a block-I/O
//! cgroup limit; the relocation unit at a low rate. Every file's bytes and
//! times are checked afterwards, not only the one that failed.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::helpers::kernel::{unlimited_procs, Sysctl, WriteLimit};
use crate::helpers::*;
use refreshd::engine::{Engine, EngineConfig, Outcome, Target, UnsafeSwitches};

const MIB: usize = 1 << 20;
const OLD: i64 = 1_600_000_000;

fn mtime(path: &Path) -> (i64, i64) {
    let m = std::fs::metadata(path).unwrap();
    (m.mtime(), m.mtime_nsec())
}

#[test]
fn privileged_quota_in_relocation_then_in_place_next_file() {
    if !privileged("privileged_quota_in_relocation_then_in_place_next_file") {
        return;
    }
    // A quota the free-space watermark cannot see: a btrfs qgroup limit on
    // the subvolume holding `a` (this kernel has no XFS quota support, and
    // btrfs relocates through the same temp copy + FIDEDUPERANGE path).
    let fs = LoopFs::new("btrfs", 512);
    let q = fs.path("q");
    run(Command::new("btrfs")
        .args(["-q", "subvolume", "create"])
        .arg(&q));
    let a = q.join("a");
    let b = fs.path("b");
    let (da, db) = (pattern(32 * MIB, 1), pattern(32 * MIB, 2));
    write_file(&a, &da);
    write_file(&b, &db);
    set_mtime(&a, OLD, 111);
    set_mtime(&b, OLD, 222);
    fs.sync();
    run(Command::new("btrfs").args(["quota", "enable"]).arg(&fs.mnt));
    run(Command::new("btrfs")
        .args(["quota", "rescan", "-w"])
        .arg(&fs.mnt));
    // 32 MiB referenced, 40 MiB limit: the temp copy (created in `q`, so
    // charged to it) hits EDQUOT after about 8 MiB, with reads in flight.
    run(Command::new("btrfs")
        .args(["qgroup", "limit", "40M"])
        .arg(&q));
    // Someone keeps `a` open: no lease, so auto relocates it.
    let holder = File::open(&a).unwrap();
    let (code, files, _) = refresh_json(&["--min-free", "1MiB"], &[&a, &b]);
    drop(holder);
    let ra = status_of(&files, &a);
    let rb = status_of(&files, &b);
    assert_eq!(ra["status"], "failed", "{ra:#}");
    assert_eq!(ra["strategy"], "relocate", "{ra:#}");
    let why = ra["reason"].as_str().unwrap();
    assert!(why.contains("quota") || why.contains("space"), "{why}");
    assert_eq!(rb["status"], "refreshed", "{rb:#}");
    assert_eq!(rb["strategy"], "inplace", "{rb:#}");
    assert_eq!(code, 1, "exit 1: a file failed");
    assert!(std::fs::read(&a).unwrap() == da, "a's bytes changed");
    assert!(std::fs::read(&b).unwrap() == db, "b holds other bytes");
    assert_eq!(mtime(&a), (OLD, 111));
    assert_eq!(mtime(&b), (OLD, 222));
}

#[test]
fn privileged_relocation_unit_follows_a_low_rate() {
    if !privileged("privileged_relocation_unit_follows_a_low_rate") {
        return;
    }
    let fs = LoopFs::new("ext4j", 256);
    let f = fs.path("live");
    let data = pattern(48 * MIB, 3);
    write_file(&f, &data);
    fs.sync();
    let holder = File::open(&f).unwrap();
    let (code, files, _) = refresh_json(&["--rate", "24MiB/s"], &[&f]);
    drop(holder);
    let r = status_of(&files, &f);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["strategy"], "relocate", "{r:#}");
    let unit = r["largest_unit"].as_u64().unwrap();
    assert!(
        unit <= 16 << 20,
        "a relocation unit of {unit} bytes at 24 MiB/s"
    );
    assert!(
        unit >= 4 << 20,
        "unit {unit}: about half a second of the rate"
    );
    assert!(std::fs::read(&f).unwrap() == data);
}

const LIVE: usize = 16 * MIB;
const BLOCK: usize = 4096;

fn stamped(version: u32) -> Vec<u8> {
    let mut out = pattern(LIVE, 500 + u64::from(version));
    for (i, block) in out.chunks_mut(BLOCK).enumerate() {
        let stamp = format!("v{version} block {i:08}");
        block[..stamp.len()].copy_from_slice(stamp.as_bytes());
    }
    out
}

/// Another process, outside the write limit, opens the file (waiting for
/// the lease break), writes every block's v1 stamp and fsyncs.
fn writer_outside_the_limit(dir: &Path, file: &Path) -> Duration {
    let stamps = dir.join("stamps");
    std::fs::write(&stamps, stamped(1)).unwrap();
    let procs = unlimited_procs();
    let mut dd = Command::new("dd");
    dd.arg(format!("if={}", stamps.display()))
        .arg(format!("of={}", file.display()))
        .args(["bs=1M", "conv=notrunc,fsync", "status=none"]);
    // SAFETY: the closure runs in the child between fork and exec and only
    // makes raw syscalls (open/write/close) on a path prepared before.
    unsafe {
        let procs = std::ffi::CString::new(procs.to_str().unwrap()).unwrap();
        dd.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let rc = libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
            if rc != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let t = Instant::now();
    run(&mut dd);
    t.elapsed()
}

fn lost_stamps(file: &Path) -> usize {
    let now = std::fs::read(file).unwrap();
    let want = stamped(1);
    now.chunks(BLOCK)
        .zip(want.chunks(BLOCK))
        .filter(|(a, b)| a != b)
        .count()
}

/// A refresh whose writes the device serves at 2 MiB/s, with the lease
/// break time at 1 s, and a writer who breaks the lease mid-refresh.
/// Returns (report, stamps lost, mtime after).
fn revoked_lease_run(
    switches: UnsafeSwitches,
) -> (refreshd::engine::FileReport, usize, (i64, i64)) {
    let fs = LoopFs::new("ext4", 256);
    let file = fs.path("live");
    write_file(&file, &stamped(0));
    set_mtime(&file, OLD, 0);
    fs.sync();
    let _break_time = Sysctl::set("fs.lease-break-time", "1");
    let limit = WriteLimit::new(&fs.dev_numbers(), 2 << 20);
    let cfg = EngineConfig {
        chunk: 1 << 20,
        depth: 8,
        unsafe_switches: switches,
        ..EngineConfig::default()
    };
    let engine = Engine::start(cfg).unwrap();
    let rx = engine.submit(Target::for_path(&file).unwrap(), None);
    std::thread::sleep(Duration::from_millis(1500));
    let waited = writer_outside_the_limit(fs.dir.path(), &file);
    let report = rx.recv().unwrap();
    drop(engine);
    drop(limit);
    eprintln!("writer waited {waited:?}; {:?}", report.outcome);
    // Let every write still queued in the throttle land before looking.
    std::thread::sleep(Duration::from_millis(500));
    fs.sync();
    (report, lost_stamps(&file), mtime(&file))
}

#[test]
fn privileged_revoked_lease_never_lets_a_write_land_on_a_writer() {
    if !privileged("privileged_revoked_lease_never_lets_a_write_land_on_a_writer") {
        return;
    }
    let (report, lost, mtime) = revoked_lease_run(UnsafeSwitches::default());
    assert_eq!(
        lost, 0,
        "the writer lost {lost} blocks: {:?}",
        report.outcome
    );
    assert!(
        report.lease_exposed.is_empty(),
        "{:?}",
        report.lease_exposed
    );
    assert_ne!(report.outcome, Outcome::Refreshed);
    assert_ne!(
        mtime.0, OLD,
        "the writer's mtime was replaced by the old one"
    );

    // The write window switched off: 8 MiB of writes in flight need 4 s at
    // 2 MiB/s, the kernel lets the writer in after 1 s, and refreshd's old
    // bytes land on top of the writer's fsynced data. refreshd notices
    // (writes completed after the deadline), reports the file failed with
    // the ranges, and leaves the mtime alone.
    let (report, lost, mtime) = revoked_lease_run(UnsafeSwitches {
        unbounded_writes: true,
        ..UnsafeSwitches::default()
    });
    assert!(lost > 0, "expected lost updates without the write window");
    assert!(!report.lease_exposed.is_empty(), "exposure not detected");
    match &report.outcome {
        Outcome::Failed { reason } => assert!(reason.contains("revoked"), "{reason}"),
        other => panic!("expected failed, got {other:?}"),
    }
    assert_ne!(mtime.0, OLD, "mtime restored over the writer's");
}
