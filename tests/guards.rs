//! Each layout and space guard, switched off, breaks the invariant it
//! protects; switched on (the default), the invariant holds. Plus the
//! pread/pwrite fallback when io_uring is refused.

use std::fs::{self, File};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use crate::helpers::*;
use refreshd::engine::report::FailKind;
use refreshd::engine::{
    Engine, EngineConfig, FileReport, Outcome, SkipReason, Target, UnsafeSwitches,
};

fn refresh_with(p: &Path, cfg: EngineConfig) -> FileReport {
    Engine::start(cfg)
        .unwrap()
        .refresh(Target::for_path(p).unwrap(), None)
}

fn with_switches(s: UnsafeSwitches) -> EngineConfig {
    EngineConfig {
        unsafe_switches: s,
        ..EngineConfig::default()
    }
}

#[test]
fn privileged_timestamps_restored_only_with_the_guard() {
    if !privileged("privileged_timestamps_restored_only_with_the_guard") {
        return;
    }
    let fs = LoopFs::new("ext4", 128);
    let p = fs.path("f");
    write_file(&p, &pattern(1 << 20, 1));
    set_mtime(&p, 1_400_000_000, 5);
    let mtime = |p: &Path| fs::metadata(p).unwrap().mtime();
    let r = refresh_with(&p, EngineConfig::default());
    assert_eq!(r.outcome, Outcome::Refreshed);
    assert_eq!(mtime(&p), 1_400_000_000);
    let r = refresh_with(
        &p,
        with_switches(UnsafeSwitches {
            no_time_restore: true,
            ..Default::default()
        }),
    );
    assert_eq!(r.outcome, Outcome::Refreshed);
    assert_ne!(
        mtime(&p),
        1_400_000_000,
        "without the guard the write moves mtime"
    );
}

#[test]
fn privileged_holes_stay_holes_only_with_the_guard() {
    if !privileged("privileged_holes_stay_holes_only_with_the_guard") {
        return;
    }
    let fs = LoopFs::new("ext4", 128);
    let p = fs.path("sparse");
    {
        let f = File::create(&p).unwrap();
        f.write_all_at(&pattern(8192, 2), 0).unwrap();
        f.write_all_at(&pattern(8192, 3), 4 << 20).unwrap();
        f.sync_all().unwrap();
    }
    let before = fingerprint(&p);
    let r = refresh_with(&p, EngineConfig::default());
    assert_eq!(r.outcome, Outcome::Refreshed);
    assert_eq!(fingerprint(&p), before);
    let r = refresh_with(
        &p,
        with_switches(UnsafeSwitches {
            write_holes: true,
            ..Default::default()
        }),
    );
    let after = fingerprint(&p);
    assert_eq!(after.hash, before.hash, "content is the same either way");
    assert!(
        after.blocks > before.blocks,
        "writing holes allocates: {} -> {}",
        before.blocks,
        after.blocks
    );
    assert!(
        matches!(r.outcome, Outcome::Failed { ref reason, kind: FailKind::LayoutChanged } if reason.contains("allocation changed")),
        "{r:?}"
    );
}

#[test]
fn privileged_tail_written_exactly_only_with_the_guard() {
    if !privileged("privileged_tail_written_exactly_only_with_the_guard") {
        return;
    }
    let fs = LoopFs::new("ext4", 128);
    let p = fs.path("tail");
    write_file(&p, &pattern(10_000, 4));
    let r = refresh_with(&p, EngineConfig::default());
    assert_eq!(r.outcome, Outcome::Refreshed);
    assert_eq!(fs::metadata(&p).unwrap().len(), 10_000);
    // A full-block direct read of the tail comes back short (EOF) and so is
    // already caught by "never write what was not read": that guard must be
    // off too for the full block to be written.
    let r = refresh_with(
        &p,
        with_switches(UnsafeSwitches {
            direct_tail: true,
            ..Default::default()
        }),
    );
    assert!(
        matches!(r.outcome, Outcome::Failed { .. }),
        "the short tail read is refused: {r:?}"
    );
    assert_eq!(fs::metadata(&p).unwrap().len(), 10_000);
    let s = UnsafeSwitches {
        direct_tail: true,
        write_failed_reads: true,
        ..Default::default()
    };
    let _ = refresh_with(&p, with_switches(s));
    assert_ne!(
        fs::metadata(&p).unwrap().len(),
        10_000,
        "a full-block tail write grows the file"
    );
}

/// Fills the filesystem until `keep` bytes are free.
fn fill_to(dir: &Path, keep: u64) {
    let s = rustix::fs::statvfs(dir).unwrap();
    let free = s.f_bavail * s.f_frsize;
    let f = File::create(dir.join("filler")).unwrap();
    let chunk = vec![0xa5u8; 1 << 20];
    let mut left = free.saturating_sub(keep);
    let mut off = 0;
    while left >= chunk.len() as u64 {
        if f.write_all_at(&chunk, off).is_err() {
            break;
        }
        off += chunk.len() as u64;
        left -= chunk.len() as u64;
    }
    f.sync_all().unwrap();
}

#[test]
fn privileged_btrfs_space_watermark() {
    if !privileged("privileged_btrfs_space_watermark") {
        return;
    }
    let fs = LoopFs::new("btrfs", 512);
    let p = fs.path("big");
    write_file(&p, &pattern(64 << 20, 5));
    fill_to(&fs.mnt, 96 << 20);
    fs.sync();
    let before = fingerprint(&p);
    let w0 = fs.bytes_written();
    // Keep 200 MiB free: refused before any write.
    let cfg = EngineConfig {
        min_free: Some(refreshd::units::ByteSize(200 << 20)),
        ..EngineConfig::default()
    };
    let r = refresh_with(&p, cfg);
    match &r.outcome {
        Outcome::Skipped {
            reason: SkipReason::LowSpace,
            detail,
        } => assert!(detail.contains("watermark"), "{detail}"),
        other => panic!("expected a low-space skip, got {other:?}"),
    }
    assert_eq!(r.bytes_refreshed, 0);
    fs.sync();
    assert_eq!(fingerprint(&p), before);
    assert!(
        fs.bytes_written() - w0 < 1 << 20,
        "nothing but metadata may be written"
    );

    // The guard off: the same refresh writes below the watermark.
    let cfg = EngineConfig {
        min_free: Some(refreshd::units::ByteSize(200 << 20)),
        unsafe_switches: UnsafeSwitches {
            no_space_check: true,
            ..Default::default()
        },
        ..EngineConfig::default()
    };
    let r = refresh_with(&p, cfg);
    assert!(
        r.bytes_refreshed > 0,
        "without the guard it writes below the watermark: {r:?}"
    );
    assert_eq!(fingerprint(&p).hash, before.hash);
}

#[test]
fn privileged_sync_backend_refreshes() {
    if !privileged("privileged_sync_backend_refreshes") {
        return;
    }
    let fs = LoopFs::new("xfs", 512);
    let p = fs.path("f");
    write_file(&p, &pattern((3 << 20) + 17, 6));
    fs.sync();
    let before = fingerprint(&p);
    let w0 = fs.bytes_written();
    let (code, reports, summary) = refresh_json(&["--io-backend", "sync"], &[&p]);
    assert_eq!(code, 0);
    assert_eq!(reports[0]["status"], "refreshed");
    assert_eq!(reports[0]["backend"], "sync");
    assert_eq!(summary["backend"], "pread/pwrite");
    fs.sync();
    assert_eq!(fingerprint(&p), before);
    assert!(fs.bytes_written() - w0 >= (3 << 20) + 17);
}

/// `io_uring_setup` (the same number on every Linux architecture).
const SYS_IO_URING_SETUP: u32 = 425;

/// io_uring refused in the refreshing process alone (a seccomp filter,
/// not the `kernel.io_uring_disabled` sysctl, which would turn it off for
/// every test running beside this one):
/// the one-shot says so, falls back to pread/pwrite, and refreshes.
#[test]
fn privileged_falls_back_when_io_uring_is_refused() {
    if !privileged("privileged_falls_back_when_io_uring_is_refused") {
        return;
    }
    // ENOSYS as systemd's seccomp answers, EPERM as the sysctl does.
    for errno in [libc::ENOSYS, libc::EPERM] {
        let fs = LoopFs::new("ext4", 128);
        let p = fs.path("f");
        write_file(&p, &pattern(2 << 20, 7));
        set_mtime(&p, 1_000_000_000, 0);
        let before = fingerprint(&p);
        let mut cmd = refreshd();
        cmd.args(["refresh", "--no-progress"]).arg(&p);
        let out = testbed::seccomp::command_refusing(&mut cmd, SYS_IO_URING_SETUP, errno)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "errno {errno}: {stdout}{stderr}");
        assert!(stdout.contains("via pread/pwrite"), "{stdout}");
        assert!(
            stdout.contains("io_uring unavailable"),
            "the result says why: {stdout}"
        );
        assert!(
            stderr.contains("io_uring unavailable"),
            "the log says why: {stderr}"
        );
        fs.sync();
        assert_eq!(fingerprint(&p), before);
        assert!(stdout.contains("refreshed"), "{stdout}");
    }
}
