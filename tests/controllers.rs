//! `max_active_per_controller`: drives behind one controller (here two
//! loop devices: "virtual") refresh one at a time under a cap of 1, and
//! together without it, with `max_active_drives = 2` either way.

use std::time::{Duration, Instant};

use crate::daemon_harness::*;
use crate::helpers::*;

/// Refresh intervals (start, end) of `device` in seconds of the day.
fn intervals(log: &str, device: &str) -> Vec<(f64, f64)> {
    let tag = format!("device={device}");
    let secs = |l: &str| -> Option<f64> {
        let hms = l
            .split_whitespace()
            .next()?
            .split('T')
            .nth(1)?
            .trim_end_matches('Z');
        let v: Vec<f64> = hms.split(':').filter_map(|x| x.parse().ok()).collect();
        (v.len() == 3).then(|| v[0] * 3600.0 + v[1] * 60.0 + v[2])
    };
    let mut out = vec![];
    let mut open = None;
    for l in log.lines().filter(|l| l.contains(&tag)) {
        if l.contains("refresh starts") {
            open = secs(l);
        } else if l.contains("refresh ends") {
            if let (Some(a), Some(b)) = (open.take(), secs(l)) {
                out.push((a, b));
            }
        }
    }
    out
}

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
    let (a, b) = (intervals(&log, &devs[0]), intervals(&log, &devs[1]));
    assert!(!a.is_empty() && !b.is_empty(), "{log}");
    drop(d);
    let now: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    assert_eq!(before, now, "contents, layout and times unchanged");
    overlap(&a, &b)
}

/// Bytes refreshed over every drive.
fn refreshed_total(m: &str) -> f64 {
    m.lines()
        .filter(|l| l.starts_with("refreshd_refreshed_bytes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
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
