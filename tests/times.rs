//! Another process's time change during a refresh wins, end to end: a
//! `utimensat` (which breaks no lease) or `touch -m -d` in the middle of a
//! one-shot's or the daemon's in-place refresh is left as it made it, and
//! after a kill -9 recovery leaves it too (the record said so, synced).
//! Regression: all four scenarios had the other process's mtime replaced
//! by refreshd's saved original.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::daemon_harness::*;
use crate::helpers::*;

const THEIRS: (i64, i64) = (1_234_567_890, 42);

fn mtime(p: &Path) -> (i64, i64) {
    let m = std::fs::metadata(p).unwrap();
    (m.mtime(), m.mtime_nsec())
}

/// `touch -m -d` by another process: the mtime only.
fn touch_m_d(p: &Path) {
    let t = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: THEIRS.0,
            tv_nsec: THEIRS.1,
        },
    };
    rustix::fs::utimensat(rustix::fs::CWD, p, &t, rustix::fs::AtFlags::empty()).unwrap();
}

/// `touch_m_d` now; returns when (whole seconds, rounded down).
fn touch_m_d_at(p: &Path) -> i64 {
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    touch_m_d(p);
    at
}

/// After `touch_m_d_at` returned `at`: the file has the other process's
/// mtime, or a later one — when a write of refreshd's in flight stored
/// its own time over theirs (attrwatch's rule 0 sees that change, but
/// theirs is gone), the file keeps that write's. Never the times
/// refreshd took the file with, which a stress run caught it putting back.
fn assert_theirs_or_later(p: &Path, at: i64, what: &str) {
    let m = mtime(p);
    assert!(
        m == THEIRS || m.0 >= at,
        "{what}: mtime {m:?}; the other process set {THEIRS:?} at {at}"
    );
}

/// Waits until refreshd has written `p` (its mtime moved from `was`).
fn until_written(p: &Path, was: (i64, i64)) {
    let t = Instant::now();
    while mtime(p) == was {
        assert!(t.elapsed() < Duration::from_secs(20), "never written");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The one record under `state` says another process changed the file.
fn record_says_changed(state: &Path) -> bool {
    journal_records(state).iter().any(|r| {
        refreshd::engine::safety::journal::read_record(r).is_ok_and(|e| e.changed_by_another)
    })
}

#[test]
fn privileged_a_time_change_mid_file_wins_over_the_one_shot() {
    if !privileged("privileged_a_time_change_mid_file_wins_over_the_one_shot") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let f = fs.path("f");
    write_file(&f, &pattern(32 << 20, 1));
    set_mtime(&f, 1_500_000_000, 0);
    let was = mtime(&f);
    let state = fs.dir.path().join("state");
    let child = refreshd()
        .args([
            "refresh",
            "--json",
            "--strategy",
            "inplace",
            "--rate",
            "8MiB/s",
        ])
        .arg("--state-dir")
        .arg(&state)
        .arg(&f)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    until_written(&f, was);
    let at = touch_m_d_at(&f);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("\"times_left\""), "said so: {text}");
    assert_theirs_or_later(&f, at, "the other process's mtime stays");
}

#[test]
fn privileged_a_time_change_then_kill_9_is_kept_by_recovery() {
    if !privileged("privileged_a_time_change_then_kill_9_is_kept_by_recovery") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let f = fs.path("f");
    write_file(&f, &pattern(32 << 20, 2));
    set_mtime(&f, 1_500_000_000, 0);
    let was = mtime(&f);
    let state = fs.dir.path().join("state");
    let mut child = refreshd()
        .args([
            "refresh",
            "--no-progress",
            "--rate",
            "4MiB/s",
            "--state-dir",
        ])
        .arg(&state)
        .arg(&f)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    until_written(&f, was);
    touch_m_d(&f);
    // The engine's next look marks the record (synced) before the kill.
    let t = Instant::now();
    while !record_says_changed(&state) {
        assert!(t.elapsed() < Duration::from_secs(10), "record not marked");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let theirs_or_later = mtime(&f);
    let other = fs.path("other");
    write_file(&other, b"x");
    let (code, _, _) = refresh_json(&["--state-dir", state.to_str().unwrap()], &[&other]);
    assert_eq!(code, 0);
    assert_eq!(mtime(&f), theirs_or_later, "recovery left it");
    assert!(journal_records(&state).is_empty(), "the record is settled");
}

#[test]
fn privileged_a_time_change_wins_over_the_daemon_and_its_recovery() {
    if !privileged("privileged_a_time_change_wins_over_the_daemon_and_its_recovery") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let tree = fs.path("tree");
    let f = stale_files(&tree, 1, 32, 3).remove(0);
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let cfg = config(
        tmp.path(),
        &tree,
        port,
        "rate = \"4MiB/s\"\nscan_interval = \"1h\"\nsample_interval = \"1h\"\nstrategy = \"inplace\"\n",
    );
    // Mid-file, the daemon running on: the change stays.
    let d = Daemon::start(tmp.path(), &cfg, port);
    let was = mtime(&f);
    d.ctl(&["now", "--force"]);
    until_written(&f, was);
    let at = touch_m_d_at(&f);
    d.wait_for("the round", 60, |dm| dm.status()["last_refresh"].is_i64());
    assert_theirs_or_later(&f, at, "the daemon left it");
    drop(d);
    // Then a change and a kill -9: recovery at the next start leaves it
    // (another state directory: the file is stale again there).
    set_mtime(&f, 1_500_000_000, 0);
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let cfg = config(
        tmp.path(),
        &tree,
        port,
        "rate = \"4MiB/s\"\nscan_interval = \"1h\"\nsample_interval = \"1h\"\nstrategy = \"inplace\"\n",
    );
    let mut d = Daemon::start(tmp.path(), &cfg, port);
    let was = mtime(&f);
    d.ctl(&["now", "--force"]);
    until_written(&f, was);
    touch_m_d(&f);
    let state = tmp.path().join("state");
    let t = Instant::now();
    while !record_says_changed(&state) {
        assert!(t.elapsed() < Duration::from_secs(10), "record not marked");
        std::thread::sleep(Duration::from_millis(20));
    }
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    drop(d);
    std::thread::sleep(Duration::from_millis(300));
    let left = mtime(&f);
    let d = Daemon::start(tmp.path(), &cfg, port);
    drop(d);
    assert_eq!(mtime(&f), left, "recovery left it");
}
