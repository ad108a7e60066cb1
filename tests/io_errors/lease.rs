//! A lease the kernel revokes mid-refresh: a writer throttled outside
//! refreshd's limit must never lose a write (and with the write window
//! switched off, it does).

use super::*;

const LIVE: usize = 16 * MIB;
fn stamped(version: u32) -> Vec<u8> {
    crate::helpers::stamps::stamped(LIVE, 500, version)
}

/// Another process, outside the write limit, opens the file (waiting for
/// the lease break), writes every block's v1 stamp and fsyncs. `may_collide`:
/// refreshd's direct writes may still land after the break (the write
/// window switched off); the kernel then fails to drop the writer's cached
/// pages ("Page cache invalidation failure on direct I/O … collision with
/// buffered I/O!" in the kernel log) and the writer's fsync says EIO.
fn writer_outside_the_limit(dir: &Path, file: &Path, may_collide: bool) -> Duration {
    let stamps = dir.join("stamps");
    std::fs::write(&stamps, stamped(1)).unwrap();
    let procs = unlimited_procs();
    let mut dd = Command::new("dd");
    dd.arg(format!("if={}", stamps.display()))
        .arg(format!("of={}", file.display()))
        .args(["bs=1M", "conv=notrunc,fsync", "status=none"])
        // Its messages in the C locale: the failure is recognised by text.
        .env("LC_ALL", "C");
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
    let out = dd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || (may_collide && err.contains("fsync failed")),
        "the writer failed: {err}"
    );
    if !out.status.success() {
        eprintln!("the writer's fsync failed (a direct write collided): {err}");
    }
    t.elapsed()
}

fn lost_stamps(file: &Path) -> usize {
    crate::helpers::stamps::lost(file, &stamped(1))
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
    let may_collide = switches.unbounded_writes;
    let waited = writer_outside_the_limit(fs.dir.path(), &file, may_collide);
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
        Outcome::Failed { reason, kind } => {
            assert_eq!(*kind, FailKind::LeaseRevoked);
            assert!(reason.contains("revoked"), "{reason}");
        }
        other => panic!("expected failed, got {other:?}"),
    }
    assert_ne!(mtime.0, OLD, "mtime restored over the writer's");
}
