//! The daemon's recovery never hides another process's change. Each
//! scenario interrupts a refresh, lets someone else change the file, then
//! restarts the daemon: the other process's mtime must stay. (Before the
//! recovery journal, all three had the mtime set back to an old value.)

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::daemon_harness::*;
use crate::helpers::*;

fn mtime(path: &Path) -> (i64, i64) {
    let m = std::fs::metadata(path).unwrap();
    (m.mtime(), m.mtime_nsec())
}

const SLOW: &str = "rate = \"8MiB/s\"\nsample_interval = \"1h\"\nscan_interval = \"1h\"\n";

/// A daemon on a fresh testbed drive with one stale 64 MiB file, asked to
/// refresh it now; returns once `mib` MiB are done.
fn refreshing(dir: &Path, mib: u64) -> (testbed::Drive, PathBuf, Daemon) {
    let d = drive(dir, "none");
    let tree = d.path("index");
    let file = stale_files(&tree, 1, 64, 81).remove(0);
    d.sync().unwrap();
    let port = free_port();
    let cfg = config(dir, &tree, port, SLOW);
    let daemon = Daemon::start(dir, &cfg, port);
    let (code, _, err) = daemon.ctl(&["now", "--force"]);
    assert_eq!(code, 0, "{err}");
    daemon.wait_for("the refresh under way", 30, |dm| {
        dm.status()["refresh"]["bytes_done"].as_u64().unwrap_or(0) >= mib << 20
    });
    (d, file, daemon)
}

fn restart(dir: &Path, tree: &Path) -> Daemon {
    let port = free_port();
    let cfg = config(dir, tree, port, SLOW);
    Daemon::start(dir, &cfg, port)
}

#[test]
fn privileged_modified_after_the_scan_then_sigterm_keeps_the_new_mtime() {
    if !privileged("privileged_modified_after_the_scan_then_sigterm_keeps_the_new_mtime") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = drive(tmp.path(), "none");
    let tree = d.path("index");
    let file = stale_files(&tree, 1, 64, 82).remove(0);
    d.sync().unwrap();
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, SLOW);
    let mut daemon = Daemon::start(tmp.path(), &cfg, port);
    daemon.wait_for("the first scan", 30, |dm| {
        dm.status()["files"].as_u64() == Some(1)
    });
    // Someone changes the file after the scan (still stale, another mtime).
    let theirs = (1_700_000_000, 42);
    set_mtime(&file, theirs.0, theirs.1);
    let (code, _, err) = daemon.ctl(&["now", "--force"]);
    assert_eq!(code, 0, "{err}");
    daemon.wait_for("the refresh under way", 30, |dm| {
        dm.status()["refresh"]["bytes_done"].as_u64().unwrap_or(0) >= 8 << 20
    });
    signal(&daemon, nix::sys::signal::Signal::SIGTERM);
    daemon.child.wait().unwrap();
    drop(daemon);
    assert_eq!(
        mtime(&file),
        theirs,
        "SIGTERM: the engine put back the time it found"
    );
    let daemon = restart(tmp.path(), &tree);
    std::thread::sleep(Duration::from_millis(500));
    drop(daemon);
    assert_eq!(
        mtime(&file),
        theirs,
        "the restart did not set the scan's mtime back"
    );
}

#[test]
fn privileged_written_during_relocation_then_kill_9_keeps_the_writers_mtime() {
    if !privileged("privileged_written_during_relocation_then_kill_9_keeps_the_writers_mtime") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = drive(tmp.path(), "none");
    let tree = d.path("index");
    let file = stale_files(&tree, 1, 64, 83).remove(0);
    d.sync().unwrap();
    // The application keeps the file open: the daemon relocates it.
    let app = File::options().read(true).write(true).open(&file).unwrap();
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, SLOW);
    let mut daemon = Daemon::start(tmp.path(), &cfg, port);
    let (code, _, err) = daemon.ctl(&["now", "--force"]);
    assert_eq!(code, 0, "{err}");
    daemon.wait_for("the relocation under way", 30, |dm| {
        dm.status()["refresh"]["bytes_done"].as_u64().unwrap_or(0) >= 8 << 20
    });
    app.write_all_at(b"the application's update", 40 << 20)
        .unwrap();
    app.sync_all().unwrap();
    let theirs = mtime(&file);
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    drop(daemon);
    let daemon = restart(tmp.path(), &tree);
    std::thread::sleep(Duration::from_millis(500));
    drop(daemon);
    drop(app);
    assert_eq!(mtime(&file), theirs, "the writer's mtime stays");
    let mut buf = [0u8; 24];
    File::open(&file)
        .unwrap()
        .read_exact_at(&mut buf, 40 << 20)
        .unwrap();
    assert_eq!(&buf, b"the application's update");
}

#[test]
fn privileged_writer_breaking_the_lease_and_keeping_it_open_keeps_its_mtime() {
    if !privileged("privileged_writer_breaking_the_lease_and_keeping_it_open_keeps_its_mtime") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (d, file, mut daemon) = refreshing(tmp.path(), 8);
    // Opening breaks the lease; the daemon lets go at once.
    let app = File::options().write(true).open(&file).unwrap();
    app.write_all_at(b"the application's update", 1 << 20)
        .unwrap();
    app.sync_all().unwrap();
    let theirs = mtime(&file);
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    drop(daemon);
    let daemon = restart(tmp.path(), &d.path("index"));
    std::thread::sleep(Duration::from_millis(500));
    // Still open by the application across the restart.
    assert_eq!(mtime(&file), theirs, "the writer's mtime stays");
    drop(daemon);
    drop(app);
    assert_eq!(mtime(&file), theirs);
}

/// The `not_recovering` loop, fixed at its root: a daily budget that cuts
/// the plan leaves the drive `degraded (budget)`: the part refreshed is
/// verified, the rest waits for the next UTC day, and the drive never
/// falls into `not_recovering` (which only a verification of data actually
/// rewritten and still slow may enter).
#[test]
fn privileged_spent_daily_budget_is_degraded_budget_never_not_recovering() {
    if !privileged("privileged_spent_daily_budget_is_degraded_budget_never_not_recovering") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = drive(tmp.path(), "840evo");
    let tree = d.path("index");
    stale_files(&tree, 4, 16, 7);
    d.sync().unwrap();
    d.age(6.0);
    d.sync().unwrap();
    let port = free_port();
    // The ratio floor judges: a verifying round on an emulator starved of
    // CPU (rewritten data read at 95 MB/s, under the default 100 MiB/s
    // floor, seen in a loaded full run) would call the refresh useless
    // ("not_recovering"), which is not what this test is about.
    let cfg = config(
        tmp.path(),
        &tree,
        port,
        "daily_budget = \"20MiB\"\nmin_throughput = \"1MiB/s\"\n",
    );
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    daemon.wait_for("a budget-cut refresh", 90, |dm| {
        let s = dm.status();
        s["waiting"].as_str() == Some("budget") && s["last_refresh"].is_i64()
    });
    // Several more sampling rounds (every 2 s): still degraded, waiting.
    for _ in 0..5 {
        std::thread::sleep(std::time::Duration::from_secs(2));
        let s = daemon.status();
        assert_eq!(s["state"], "degraded", "{s:#}");
        assert_eq!(s["waiting"], "budget", "{s:#}");
    }
    let m = daemon.metrics();
    let refreshed: f64 = m
        .lines()
        .find(|l| l.starts_with("refreshd_refreshed_bytes_total{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert_eq!(
        refreshed,
        (16 << 20) as f64,
        "one 16 MiB file within 20 MiB"
    );
    let (code, text, _) = daemon.ctl(&["status"]);
    assert_eq!(code, 0);
    assert!(text.contains("degraded (budget)"), "{text}");
    assert!(!daemon.log().contains("not_recovering"), "{}", daemon.log());
}

/// The rest of a budget-cut plan is refreshed when the budget renews: the
/// daemon runs under libfaketime, starting 25 s before a UTC midnight (the
/// monotonic clock stays real), with a budget of two of its four files.
#[test]
fn privileged_budget_cut_plan_continues_the_next_utc_day() {
    if !privileged("privileged_budget_cut_plan_continues_the_next_utc_day") {
        return;
    }
    let preload = std::fs::read_dir("/usr/lib")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("faketime/libfaketimeMT.so.1"))
        .find(|p| p.exists())
        .expect("libfaketime (Debian package faketime) is needed");
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = drive(tmp.path(), "840evo");
    let tree = d.path("index");
    stale_files(&tree, 4, 16, 801);
    d.sync().unwrap();
    d.age(6.0);
    d.sync().unwrap();
    let today = String::from_utf8(
        std::process::Command::new("date")
            .args(["-u", "+%Y-%m-%d"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let start = format!("@{} 23:59:35", today.trim());
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, "daily_budget = \"40MiB\"\n");
    let daemon = Daemon::start_with(
        tmp.path(),
        &cfg,
        port,
        &[
            ("LD_PRELOAD", preload.to_str().unwrap()),
            ("FAKETIME", &start),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ("TZ", "UTC"),
        ],
    );
    let refreshed = |dm: &Daemon| refreshed_bytes(&dm.metrics()) as u64;
    daemon.wait_for("two files, then the budget", 20, |dm| {
        dm.status()["waiting"] == "budget" && refreshed(dm) == 32 << 20
    });
    assert_eq!(daemon.status()["state"], "degraded");
    // Past midnight the budget renews: the other two, then verified.
    daemon.wait_for("the rest, the next day", 90, |dm| {
        refreshed(dm) == 64 << 20 && dm.status()["state"] == "healthy"
    });
    assert!(!daemon.log().contains("not_recovering"), "{}", daemon.log());
}
