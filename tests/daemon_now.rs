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
    // Nothing stale any more: a forced request says so.
    let (code, out, err) = daemon.ctl(&["now", "--force", "--wait"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("nothing to refresh: no stale data"), "{out}");
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
    for series in [
        format!("refreshd_stale_bytes{{device=\"{dev}\"}} {}", 4 << 20),
        format!("refreshd_refreshed_bytes_total{{device=\"{dev}\"}} 0"),
        format!("refreshd_read_errors_total{{device=\"{dev}\"}} 0"),
        format!("refreshd_lease_exposed_bytes_total{{device=\"{dev}\"}} 0"),
        format!(
            "refreshd_refresh_files_total{{device=\"{dev}\",outcome=\"failed\",reason=\"\"}} 0"
        ),
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
