//! Time is bounded: any date `statx` can return is kept to the
//! nanosecond (2300-01-01 overflowed i64 nanoseconds: the recovery journal
//! held 1715 and recovery set the mtime to 1901-12-13), and a clock that
//! was wrong never exempts data from refreshing (a refresh with the clock
//! 40 years ahead stored a last_refresh in 2066: 0 of 5 stale files were
//! due afterwards).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::daemon_harness::*;
use crate::helpers::*;

/// 2300-01-01T00:00:00.5Z, and 1960-06-01.
const FAR: (i64, i64) = (10_413_792_000, 500_000_000);
const PAST: (i64, i64) = (-302_918_400, 123);

fn mtime(p: &Path) -> (i64, i64) {
    let m = std::fs::metadata(p).unwrap();
    (m.mtime(), m.mtime_nsec())
}

#[test]
fn privileged_times_beyond_2262_and_before_1970_are_kept_and_recovered() {
    if !privileged("privileged_times_beyond_2262_and_before_1970_are_kept_and_recovered") {
        return;
    }
    for kind in ["ext4", "xfs", "btrfs"] {
        let fs = LoopFs::new(kind, 320);
        let far = fs.path("far");
        let past = fs.path("past");
        write_file(&far, &pattern(64 << 20, 1));
        write_file(&past, &pattern(1 << 20, 2));
        set_mtime(&far, FAR.0, FAR.1);
        set_mtime(&past, PAST.0, PAST.1);
        assert_eq!(mtime(&far), FAR, "{kind} stores 2300");
        let prints = [fingerprint(&far), fingerprint(&past)];
        let (code, files, _) = refresh_json(&[], &[&far, &past]);
        assert_eq!(code, 0, "{kind}: {files:#?}");
        assert_eq!([fingerprint(&far), fingerprint(&past)], prints, "{kind}");
        // Killed mid-file: the next run puts back 2300 to the nanosecond.
        let state = fs.dir.path().join("state");
        killed_oneshot(&state, &far);
        let (code, _, _) = refresh_json(&["--state-dir", state.to_str().unwrap()], &[&past]);
        assert_eq!(code, 0);
        assert_eq!(mtime(&far), FAR, "{kind}: recovered exactly");
    }
}

/// A slow one-shot of `file`, killed at a moment its record vouches for
/// the file (retried when a punted write landed during the teardown).
fn killed_oneshot(state: &Path, file: &Path) {
    let before = mtime(file);
    for _ in 0..5 {
        let mut child = refreshd()
            .args([
                "refresh",
                "--no-progress",
                "--rate",
                "8MiB/s",
                "--state-dir",
            ])
            .arg(state)
            .arg(file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let t = std::time::Instant::now();
        while mtime(file) == before {
            assert!(t.elapsed() < Duration::from_secs(20), "never written");
            std::thread::sleep(Duration::from_millis(20));
        }
        kill_when_recoverable(child.id(), state, file);
        child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        if record_vouches(state, file) {
            return;
        }
        set_mtime(file, before.0, before.1);
    }
    panic!("no kill left a record that vouches for the file in 5 attempts");
}

fn libfaketime() -> PathBuf {
    std::fs::read_dir("/usr/lib")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("faketime/libfaketimeMT.so.1"))
        .find(|p| p.exists())
        .expect("libfaketime (Debian package faketime) is needed")
}

fn faked(dir: &Path, tree: &Path, offset: &str) -> Daemon {
    let port = free_port();
    let cfg = config(
        dir,
        tree,
        port,
        "scan_interval = \"1h\"\nsample_interval = \"1h\"\n",
    );
    let preload = libfaketime();
    Daemon::start_with(
        dir,
        &cfg,
        port,
        &[
            ("LD_PRELOAD", preload.to_str().unwrap()),
            ("FAKETIME", offset),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    )
}

#[test]
fn privileged_a_clock_40_years_off_never_exempts_data() {
    if !privileged("privileged_a_clock_40_years_off_never_exempts_data") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let tree = fs.path("tree");
    let stale = stale_files(&tree.join("old"), 5, 1, 901);
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    // 40 years ahead: everything is refreshed, last_refresh lands in 2066.
    let d = faked(tmp.path(), &tree, "+14610d");
    let (code, out, err) = d.ctl(&["now", "--force", "--wait"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("refreshed 5 file(s)"), "{out}");
    drop(d);
    // The clock right again: the data is due, not exempt until 2066.
    let port = free_port();
    let cfg = config(
        tmp.path(),
        &tree,
        port,
        "scan_interval = \"1h\"\nsample_interval = \"1h\"\n",
    );
    let d = Daemon::start(tmp.path(), &cfg, port);
    d.wait_for("the scan", 30, |dm| dm.status()["last_scan"].is_i64());
    assert_eq!(d.status()["stale_files"], 5, "{:#}", d.status());
    assert!(d.log().contains("timestamps in the future"), "{}", d.log());
    let (_, plan, _) = d.ctl(&["--json", "plan"]);
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(
        plan[0]["plan"]["files"].as_array().unwrap().len(),
        5,
        "{plan:#}"
    );
    drop(d);
    // 40 years behind: files written "in the future" are not taken for
    // new either (their age is unknown: due).
    let fresh = tree.join("fresh");
    write_file(&fresh, &pattern(1 << 20, 902));
    let d = faked(tmp.path(), &tree, "-14610d");
    d.wait_for("the scan", 30, |dm| dm.status()["last_scan"].is_i64());
    assert_eq!(
        d.status()["stale_files"],
        6,
        "every file's mtime is ahead of this clock: {:#}",
        d.status()
    );
    drop(d);
    for p in stale.iter().chain([&fresh]) {
        assert!(std::fs::read(p).is_ok());
    }
}
