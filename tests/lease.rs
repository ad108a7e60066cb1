//! No lost updates: during a slow refresh another process opens the file and
//! writes version-stamped blocks. With the lease every stamp survives and
//! the opener waits well under a second; with the lease switched off (test
//! switch) stamps are lost, or the kernel catches the collision and the
//! next fsync of every descriptor open then fails, the application's
//! too. Truncation mid-refresh leaves exactly the truncated file.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::helpers::stamps;
use crate::helpers::*;
use refreshd::engine::{Engine, EngineConfig, FileReport, Outcome, Target, UnsafeSwitches};

const SIZE: usize = 16 << 20;
/// Every 4 KiB block carries "v<version> block <i>" and filler.
fn stamped(version: u32) -> Vec<u8> {
    stamps::stamped(SIZE, 1000, version)
}

/// Starts a slow refresh (2 MiB/s) of `file` in-process.
fn slow_refresh(file: &Path, switches: UnsafeSwitches) -> (Engine, Receiver<FileReport>) {
    let cfg = EngineConfig {
        pace: refreshd::engine::PaceSettings {
            rate: Some(refreshd::units::Rate(2 << 20)),
            ..Default::default()
        },
        chunk: 256 << 10,
        depth: 4,
        unsafe_switches: switches,
        ..EngineConfig::default()
    };
    let engine = Engine::start(cfg).unwrap();
    let rx = engine.submit(Target::for_path(file).unwrap(), None);
    (engine, rx)
}

/// Writes the version-1 stamps over the file with another process (dd),
/// returns how long dd took (it first waits in open() for the lease).
fn write_stamps(dir: &Path, file: &Path) -> Duration {
    let stamps: PathBuf = dir.join("stamps");
    std::fs::write(&stamps, stamped(1)).unwrap();
    let t = Instant::now();
    run(Command::new("dd")
        .arg(format!("if={}", stamps.display()))
        .arg(format!("of={}", file.display()))
        .args(["bs=64K", "conv=notrunc", "status=none"]));
    t.elapsed()
}

fn lost_stamps(file: &Path) -> usize {
    stamps::lost(file, &stamped(1))
}

#[test]
fn privileged_lease_protects_a_concurrent_writer() {
    if !privileged("privileged_lease_protects_a_concurrent_writer") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let file = fs.path("live");
    write_file(&file, &stamped(0));
    fs.sync();
    let (_engine, rx) = slow_refresh(&file, UnsafeSwitches::default());
    std::thread::sleep(Duration::from_millis(1500));
    let waited = write_stamps(fs.dir.path(), &file);
    let report = rx.recv().unwrap();
    match &report.outcome {
        Outcome::Interrupted { offset, reason, .. } => {
            assert!(*offset > 0 && *offset < SIZE as u64, "offset {offset}");
            assert!(reason.contains("opened"), "{reason}");
        }
        other => panic!("expected an interrupted refresh, got {other:?}"),
    }
    // The lease is released at once (the kernel would wait 45 s).
    assert!(
        waited < Duration::from_secs(1),
        "the writer waited {waited:?} for the lease"
    );
    assert_eq!(lost_stamps(&file), 0, "stamps were lost despite the lease");
}

#[test]
fn privileged_without_the_lease_concurrent_writes_are_lost() {
    if !privileged("privileged_without_the_lease_concurrent_writes_are_lost") {
        return;
    }
    // The same scenario with the guard switched off: the engine writes back
    // chunks it read before the writer wrote them.
    let fs = LoopFs::new("ext4", 256);
    let file = fs.path("live");
    write_file(&file, &stamped(0));
    fs.sync();
    let switches = UnsafeSwitches {
        no_lease: true,
        ..UnsafeSwitches::default()
    };
    let (_engine, rx) = slow_refresh(&file, switches);
    std::thread::sleep(Duration::from_millis(1500));
    // Stands for the application: an fd open while the two writers collide.
    let application = std::fs::File::open(&file).unwrap();
    write_stamps(fs.dir.path(), &file);
    let report = rx.recv().unwrap();
    match &report.outcome {
        // The engine wrote back chunks it read before the writer wrote them.
        Outcome::Refreshed => {
            let lost = lost_stamps(&file);
            assert!(
                lost > 0,
                "expected lost updates without the lease, found none"
            );
            eprintln!("without the lease, {lost} stamped blocks were overwritten with old data");
        }
        // Or an O_DIRECT write landed on the writer's dirty pages: the kernel
        // sets the file's writeback error (and may log "Page cache
        // invalidation failure on direct I/O. Possible data corruption"),
        // so the engine's fsync fails, and so does the application's own,
        // through no fault of its own (seen in CI, 2026-12-07: one run in
        // many).
        Outcome::Failed { reason, .. } if reason.starts_with("fsync") => {
            assert!(reason.contains("Input/output error"), "{reason}");
            let err = application.sync_all().unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
            eprintln!("without the lease, the kernel saw the collision: {reason}");
        }
        other => panic!("without the lease nothing stops it, got {other:?}"),
    }
}

#[test]
fn privileged_truncate_mid_refresh_leaves_the_truncated_file() {
    if !privileged("privileged_truncate_mid_refresh_leaves_the_truncated_file") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let file = fs.path("live");
    let data = stamped(0);
    write_file(&file, &data);
    fs.sync();
    let (_engine, rx) = slow_refresh(&file, UnsafeSwitches::default());
    std::thread::sleep(Duration::from_millis(1000));
    let t = Instant::now();
    // truncate(2) by path from another process (coreutils' truncate opens
    // with O_NONBLOCK and would fail instead of waiting for the lease).
    run(Command::new("perl")
        .args(["-e", "truncate($ARGV[0], 100000) or die \"truncate: $!\""])
        .arg(&file));
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "truncate waited {:?}",
        t.elapsed()
    );
    let report = rx.recv().unwrap();
    assert!(
        matches!(report.outcome, Outcome::Interrupted { .. }),
        "{:?}",
        report.outcome
    );
    let now = std::fs::read(&file).unwrap();
    assert_eq!(now.len(), 100_000);
    assert_eq!(now, data[..100_000]);
}

#[test]
fn privileged_ctrl_c_stops_cleanly() {
    if !privileged("privileged_ctrl_c_stops_cleanly") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let file = fs.path("big");
    write_file(&file, &stamped(0));
    set_mtime(&file, 1_300_000_000, 42);
    fs.sync();
    let before = fingerprint(&file);
    let child = refreshd()
        .args(["refresh", "--json", "--rate", "4MiB/s"])
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let t = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?} to stop",
        t.elapsed()
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "a cancelled run is not a success"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(report["status"], "interrupted", "{report}");
    assert_eq!(report["reason"], "cancelled");
    let offset = report["offset"].as_u64().unwrap();
    assert!(offset > 0 && offset < SIZE as u64, "{report}");
    // Timestamps restored, nothing changed, and the lease is gone: another
    // process can open the file for writing at once.
    assert_eq!(fingerprint(&file), before);
    let t = Instant::now();
    std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    assert!(t.elapsed() < Duration::from_millis(500));
}
