//! `refreshctl now` does what an operator means: it rescans first (a file
//! added since the last scan counts), samples, refreshes, verifies, and
//! `--wait` says what happened — also when there is nothing to do.

use crate::daemon_harness::*;
use crate::helpers::*;

#[test]
fn privileged_now_rescans_refreshes_verifies_and_says_what_it_did() {
    if !privileged("privileged_now_rescans_refreshes_verifies_and_says_what_it_did") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let tree = fs.path("tree");
    std::fs::create_dir(&tree).unwrap();
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let cfg = config(
        tmp.path(),
        &tree,
        port,
        "scan_interval = \"1h\"\nsample_interval = \"1h\"\nsample_bytes = \"16MiB\"\n",
    );
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    daemon.wait_for("the first scan", 30, |dm| dm.status()["last_scan"].is_i64());
    // Added after the scan, stale: only a rescan can see it.
    stale_files(&tree, 1, 4, 401);
    fs.sync();
    let (code, out, err) = daemon.ctl(&["now", "--force", "--wait"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("refreshed 1 file(s), 4.00 MiB; verified:"),
        "{out}"
    );
    // The plan shown is the current one: the refreshed file is not in it.
    let (_, plan, _) = daemon.ctl(&["--json", "plan"]);
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(
        plan[0]["plan"]["files"].as_array().unwrap().len(),
        0,
        "{plan}"
    );
    // Nothing stale any more: a forced request says so.
    let (code, out, err) = daemon.ctl(&["now", "--force", "--wait"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("nothing to refresh: no stale data"), "{out}");
    // After a restart, "last refresh" comes from the database.
    let last = daemon.status()["last_refresh"].as_i64().expect("set");
    drop(daemon);
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    daemon.wait_for("the database read", 30, |dm| {
        dm.status()["last_refresh"].as_i64().is_some()
    });
    let again = daemon.status()["last_refresh"].as_i64().unwrap();
    assert!((again - last).abs() <= 2, "{again} vs {last}");
    // Errors with --json are JSON.
    let (code, out, _) = daemon.ctl(&["--json", "pause", "--drive", "nope"]);
    assert_eq!(code, 1);
    let e: serde_json::Value = serde_json::from_str(&out).expect("JSON on stdout");
    assert_eq!(e["ok"], false);
    assert!(
        e["error"].as_str().unwrap().contains("no such drive"),
        "{e}"
    );
}

#[test]
fn privileged_every_series_from_the_first_scrape_and_private_state() {
    if !privileged("privileged_every_series_from_the_first_scrape_and_private_state") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let fs = LoopFs::new("ext4", 256);
    let tree = fs.path("tree");
    stale_files(&tree, 1, 4, 411);
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, "sample_interval = \"1h\"\n");
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    daemon.wait_for("the first scan", 30, |dm| {
        dm.status()["files"].as_u64() == Some(1)
    });
    let dev = daemon.status()["device"].as_str().unwrap().to_string();
    let m = daemon.metrics();
    // Every metric the dashboard and the alert rules use is in the scrape.
    let scraped: Vec<&str> = m
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    for name in crate::packaging::metric_names_used() {
        // `up` and other series of Prometheus itself are not ours.
        assert!(
            scraped.contains(&name.as_str()),
            "{name} is not exported\n{m}"
        );
    }
    for series in [
        format!("refreshd_stale_bytes{{device=\"{dev}\"}} {}", 4 << 20),
        format!("refreshd_refreshed_bytes_total{{device=\"{dev}\"}} 0"),
        format!("refreshd_read_errors_total{{device=\"{dev}\"}} 0"),
        format!("refreshd_lease_exposed_bytes_total{{device=\"{dev}\"}} 0"),
        format!(
            "refreshd_refresh_files_total{{device=\"{dev}\",outcome=\"failed\",reason=\"io\"}} 0"
        ),
        format!("refreshd_yield_seconds_total{{device=\"{dev}\"}} 0.0"),
        format!("refreshd_yielding{{device=\"{dev}\"}} 0"),
        "refreshd_unwatched_trees 0".to_string(),
        format!("refreshd_refresh_in_progress{{device=\"{dev}\"}} 0"),
        format!("refreshd_store_up{{device=\"{dev}\"}} 1"),
    ] {
        assert!(m.lines().any(|l| l == series), "missing {series}\n{m}");
    }
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&tmp.path().join("state")), 0o700);
    assert_eq!(mode(&tmp.path().join("state/state.db")), 0o600);
    assert_eq!(mode(&tmp.path().join("state/journal")), 0o700);
}

/// A configured tree that is missing, a symlink, or on tmpfs: check-config
/// names each at its line and column and exits 1; the daemon runs with
/// the trees it can use, lists the others in status, drives and a metric,
/// and stays up (no restart loop) when it can use none.
#[test]
fn privileged_trees_that_cannot_be_watched_are_reported_not_fatal() {
    if !privileged("privileged_trees_that_cannot_be_watched_are_reported_not_fatal") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let good = fs.path("tree");
    stale_files(&good, 1, 1, 421);
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let missing = tmp.path().join("missing");
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let port = free_port();
    let cfg = config_trees(tmp.path(), &[&good, &missing, &link, shm.path()], port, "");
    let (code, _, err) = check_config(&cfg);
    assert_eq!(code, 1, "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    let at = format!("{}:", cfg.display());
    assert!(
        lines.iter().all(|l| l.starts_with(&at)),
        "file:line:col: {err}"
    );
    assert!(lines[0].contains("does not exist"), "{err}");
    assert!(lines[1].contains("is a symlink"), "{err}");
    assert!(
        lines[2].contains("tmpfs") || lines[2].contains("does not rewrite"),
        "{err}"
    );

    let daemon = Daemon::start(tmp.path(), &cfg, port);
    let (_, out, _) = daemon.ctl(&["--json", "status"]);
    let st: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        st["drives"].as_array().unwrap().len(),
        1,
        "the usable tree is watched"
    );
    assert_eq!(st["unwatched"].as_array().unwrap().len(), 3, "{st}");
    let (_, text, _) = daemon.ctl(&["status"]);
    assert_eq!(text.matches("not watched:").count(), 3, "{text}");
    let (_, drives, _) = daemon.ctl(&["drives"]);
    assert!(
        drives.contains(&format!("not watched: {}", missing.display())),
        "{drives}"
    );
    assert_eq!(
        metric(&daemon.metrics(), "refreshd_unwatched_trees"),
        Some(3.0)
    );
    drop(daemon);

    // None usable: up anyway, and says so.
    let tmp2 = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let cfg = config_trees(tmp2.path(), &[&missing], port, "");
    let daemon = Daemon::start(tmp2.path(), &cfg, port);
    let (_, text, _) = daemon.ctl(&["status"]);
    assert!(text.contains("no configured tree can be watched"), "{text}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(daemon_alive(&daemon), "the daemon must stay up");
}

fn daemon_alive(d: &Daemon) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(d.child.id() as i32), None).is_ok()
        && d.ctl(&["status"]).0 == 0
}

/// `now --wait` tells the truth: a round in which a file failed (here an
/// unreadable range on the testbed) exits 1 and names the file and the
/// reason; `status` shows the last round's counts afterwards. Regression:
/// it printed "nothing to refresh" and exited 0 while every file failed.
#[test]
fn privileged_now_wait_exits_1_and_names_the_files_that_failed() {
    if !privileged("privileged_now_wait_exits_1_and_names_the_files_that_failed") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let opts = testbed::DriveOptions {
        size: 512 << 20,
        model: testbed::Model::preset("none").unwrap(),
        ..testbed::DriveOptions::default()
    };
    let d = testbed::Drive::up(tmp.path(), &opts).unwrap();
    let tree = d.path("tree");
    let files = stale_files(&tree, 3, 4, 421);
    d.sync().unwrap();
    let bad = &files[1];
    d.fault(device_offset(&d, bad, 8192), 4096);
    drop_caches();
    let port = free_port();
    let cfg = config(
        tmp.path(),
        &tree,
        port,
        "scan_interval = \"1h\"\nsample_interval = \"1h\"\nsample_bytes = \"4MiB\"\n",
    );
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    let (code, out, err) = daemon.ctl(&["now", "--force", "--wait"]);
    assert_eq!(code, 1, "a failed file fails the request: {out}{err}");
    assert!(
        out.contains("refreshed 2 file(s)") && out.contains("1 FAILED"),
        "{out}"
    );
    let name = bad.to_str().unwrap();
    assert!(
        out.contains(&format!("failed {name}: 1 unreadable range(s)")),
        "{out}"
    );
    let s = daemon.status();
    let round = &s["last_round"];
    assert_eq!(
        (round["planned"].as_u64(), round["failed"].as_u64()),
        (Some(3), Some(1)),
        "{s:#}"
    );
    assert_eq!(round["failures"][0]["path"], name, "{s:#}");
    let (_, table, _) = daemon.ctl(&["status"]);
    assert!(
        table.contains("last round") && table.contains("2 refreshed, 1 failed"),
        "{table}"
    );
    // JSON: the same exit code.
    let (code, _, _) = daemon.ctl(&["--json", "now", "--force", "--wait"]);
    assert_eq!(code, 1);
}
