//! `max_active_per_controller`: drives behind one controller (here two
//! loop devices: "virtual") refresh one at a time under a cap of 1, and
//! together without it, with `max_active_drives = 2` either way.

use std::time::{Duration, Instant};

use crate::daemon_harness::*;
use crate::helpers::*;

fn overlap(a: &[(f64, f64)], b: &[(f64, f64)]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.0 < y.1 && y.0 < x.1))
}

/// Two drives, both asked to refresh 2 × 16 MiB at 8 MiB/s; whether
/// their refreshes overlapped.
fn two_drives_overlap(per_controller: usize) -> bool {
    let fs = [LoopFs::new("ext4", 128), LoopFs::new("ext4", 128)];
    let trees: Vec<_> = fs.iter().map(|f| f.path("tree")).collect();
    let files: Vec<_> = trees
        .iter()
        .enumerate()
        .flat_map(|(i, t)| stale_files(t, 2, 16, 900 + 10 * i as u64))
        .collect();
    fs.iter().for_each(LoopFs::sync);
    let before: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let tree_refs: Vec<&std::path::Path> = trees.iter().map(|t| t.as_path()).collect();
    let cfg = config_trees(
        tmp.path(),
        &tree_refs,
        port,
        "rate = \"8MiB/s\"\nsample_interval = \"1h\"\nyield = \"off\"\n",
    );
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        format!("max_active_drives = 2\nmax_active_per_controller = {per_controller}\n{text}"),
    )
    .unwrap();
    let d = Daemon::start(tmp.path(), &cfg, port);
    let (code, drives, _) = d.ctl(&["drives"]);
    assert_eq!(code, 0);
    assert_eq!(drives.matches("controller: virtual").count(), 2, "{drives}");
    let (code, _, err) = d.ctl(&["now", "--force"]);
    assert_eq!(code, 0, "{err}");
    let t = Instant::now();
    while refreshed_total(&d.metrics()) < (64 << 20) as f64 {
        assert!(t.elapsed() < Duration::from_secs(60), "{}", d.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(500));
    let log = d.log();
    let devs: Vec<String> = fs
        .iter()
        .map(|f| f.dev.trim_start_matches("/dev/").to_string())
        .collect();
    let (a, b) = (
        refresh_intervals(&log, Some(&devs[0])),
        refresh_intervals(&log, Some(&devs[1])),
    );
    assert!(!a.is_empty() && !b.is_empty(), "{log}");
    drop(d);
    let now: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    assert_eq!(before, now, "contents, layout and times unchanged");
    overlap(&a, &b)
}

#[test]
fn privileged_drives_behind_one_controller_are_capped_together() {
    if !privileged("privileged_drives_behind_one_controller_are_capped_together") {
        return;
    }
    assert!(
        !two_drives_overlap(1),
        "one at a time behind one controller"
    );
    // The cap is what keeps them apart: without it they run together.
    assert!(
        two_drives_overlap(2),
        "two at once when the controller allows it"
    );
}
