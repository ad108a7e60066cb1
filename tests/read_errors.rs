//! Never write what was not read, on a device that really fails: the
//! testbed returns EIO for a device range inside a file. The file is
//! refreshed except that range (narrowed to the failing blocks, reported
//! by file offset), and the device's write log shows no write into it.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};

use crate::helpers::*;
use refreshd::io::syscalls;
use testbed::{Drive, DriveOptions, Model};

#[test]
fn privileged_unreadable_range_is_reported_and_never_written() {
    if !privileged("privileged_unreadable_range_is_reported_and_never_written")
        || !std::path::Path::new("/dev/fuse").exists()
    {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let opts = DriveOptions {
        size: 512 << 20,
        model: Model::preset("none").unwrap(),
        channels: 4,
        ..DriveOptions::default()
    };
    let d = Drive::up(tmp.path(), &opts).unwrap();
    let p = d.path("victim");
    let data = pattern(16 << 20, 21);
    write_file(&p, &data);
    d.sync().unwrap();
    let mtime = std::fs::metadata(&p).unwrap().mtime();

    // A fault at file offset 5 MiB + 12 KiB.
    let bad_file_off: u64 = (5 << 20) + 12288;
    d.fault(device_offset(&d, &p, bad_file_off), 8192);
    drop_caches();

    let w0 = d.stats().write_bytes;
    let (code, reports, _) = refresh_json(&[], &[&p]);
    assert_eq!(
        code, 1,
        "a file with unreadable data is a failure: {reports:#?}"
    );
    let r = &reports[0];
    assert_eq!(r["status"], "failed", "{r}");
    let errs = r["read_errors"].as_array().unwrap();
    assert_eq!(errs.len(), 1, "{r}");
    assert_eq!(errs[0]["offset"].as_u64().unwrap(), bad_file_off);
    assert_eq!(errs[0]["len"].as_u64().unwrap(), 8192);
    assert!(
        errs[0]["error"]
            .as_str()
            .unwrap()
            .contains("Input/output error"),
        "{r}"
    );
    assert_eq!(r["bytes_refreshed"].as_u64().unwrap(), (16 << 20) - 8192);

    let s = d.stats();
    assert!(
        s.faulty_writes.is_empty(),
        "writes into the unreadable range: {:?}",
        s.faulty_writes
    );
    assert!(
        s.write_bytes - w0 >= (16 << 20) - 8192,
        "the rest was really rewritten"
    );
    // Everything readable is unchanged (O_DIRECT: readahead would run into
    // the bad range); size and mtime too.
    use std::os::unix::fs::OpenOptionsExt;
    let f = File::options()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&p)
        .unwrap();
    let mut pool = refreshd::io::buffers::BufferPool::new(1, 16 << 20);
    let tail_off = bad_file_off + 8192;
    for r in [0..bad_file_off, tail_off..16 << 20] {
        let len = (r.end - r.start) as usize;
        let buf = &mut pool.get_mut(0)[..len];
        f.read_exact_at(buf, r.start).unwrap();
        assert!(
            buf == &data[r.start as usize..r.end as usize],
            "bytes changed in {r:?}"
        );
    }
    let md = std::fs::metadata(&p).unwrap();
    assert_eq!((md.len(), md.mtime()), (16 << 20, mtime));
}

/// Relocation of an in-use file over an unreadable range: the range is
/// reported, nothing stands in for it (it still fails to read: no zeros or
/// stale bytes were remapped over it), and everything else is intact.
#[test]
fn privileged_relocation_never_replaces_unreadable_data() {
    if !privileged("privileged_relocation_never_replaces_unreadable_data") {
        return;
    }
    for kind in ["ext4", "xfs", "btrfs"] {
        let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
        let opts = DriveOptions {
            size: 512 << 20,
            fs: kind.into(),
            model: Model::preset("none").unwrap(),
            channels: 4,
            ..DriveOptions::default()
        };
        let d = Drive::up(tmp.path(), &opts).unwrap();
        let p = d.path("victim");
        let data = pattern(8 << 20, 31);
        write_file(&p, &data);
        d.sync().unwrap();
        let bad_file_off: u64 = (5 << 20) + 12288;
        d.fault(device_offset(&d, &p, bad_file_off), 4096);
        let f = File::open(&p).unwrap();
        // None of it cached: a read must reach the drive (a cached page
        // would be read and moved, and the fault never met).
        uncache(&f, 8 << 20);
        // Keep it open so that auto relocates.
        let (code, reports, _) = refresh_json(&["--relocate-chunk", "1MiB"], &[&p]);
        drop(f);
        let r = &reports[0];
        assert_eq!(code, 1, "{kind}: {r}");
        assert_eq!(r["strategy"], "relocate", "{kind}: {r}");
        assert_eq!(r["status"], "failed", "{kind}: {r}");
        let errs = r["read_errors"].as_array().unwrap();
        assert!(
            errs.iter().any(|e| {
                let (o, l) = (e["offset"].as_u64().unwrap(), e["len"].as_u64().unwrap());
                o <= bad_file_off && bad_file_off < o + l
            }),
            "{kind}: {r}"
        );
        assert!(
            r["bytes_refreshed"].as_u64().unwrap() >= 6 << 20,
            "{kind}: {r}"
        );
        drop_caches();
        use std::os::unix::fs::OpenOptionsExt;
        let f = File::options()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&p)
            .unwrap();
        let mut pool = refreshd::io::buffers::BufferPool::new(1, 1 << 20);
        let buf = &mut pool.get_mut(0)[..4096];
        let e = f
            .read_exact_at(buf, bad_file_off)
            .expect_err("still unreadable");
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{kind}");
        for mib in (0..8u64).filter(|m| *m != 5) {
            let buf = &mut pool.get_mut(0)[..1 << 20];
            f.read_exact_at(buf, mib << 20).unwrap();
            assert!(
                buf == &data[(mib << 20) as usize..((mib + 1) << 20) as usize],
                "{kind}: MiB {mib}"
            );
        }
    }
}

/// Drops `f`'s pages from the page cache until none is resident (a
/// machine under load may keep some through one drop).
fn uncache(f: &File, len: u64) {
    let fd = std::os::fd::AsFd::as_fd(f);
    for _ in 0..50 {
        let _ = rustix::fs::fadvise(fd, 0, None, rustix::fs::Advice::DontNeed);
        drop_caches();
        let cached = syscalls::resident_pages(fd, 0, len).unwrap();
        if !cached.contains(&true) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the file's pages stay in the page cache");
}
