//! One truth per question: after each of the daemon's transitions,
//! `status`, `plan`, the metrics, the log and `refreshd survey` (reading
//! the daemon's record) tell the same story.

use std::time::Duration;

use crate::daemon_harness::*;
use crate::helpers::*;
use serde_json::Value;

/// `refreshd survey --json` of `tree`, aged by the daemon's record.
fn survey(tree: &std::path::Path, state: &std::path::Path) -> Value {
    let out = refreshd()
        .args([
            "survey",
            "--json",
            "--stale-after",
            "30d",
            "--sample-bytes",
            "16MiB",
        ])
        .args(["--min-free", "16MiB", "--state-dir"])
        .arg(state)
        .arg(tree)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (stale files, stale bytes) by status, plan, metrics and survey.
fn stories(dm: &Daemon, tree: &std::path::Path) -> [(u64, u64); 4] {
    let st = &dm.status();
    let (_, plan, _) = dm.ctl(&["--json", "plan"]);
    let plan: Value = serde_json::from_str(&plan).unwrap();
    let plan = &plan[0]["plan"];
    let m = dm.metrics();
    let series = format!(
        "refreshd_stale_bytes{{device=\"{}\"}}",
        st["device"].as_str().unwrap()
    );
    let metric_bytes = metric(&m, &series).expect("refreshd_stale_bytes is exported") as u64;
    let sv = survey(tree, &dm.dir.join("state"));
    let sp = &sv["drives"][0]["plan"];
    [
        (
            st["stale_files"].as_u64().unwrap(),
            st["stale_bytes"].as_u64().unwrap(),
        ),
        (
            plan["files"].as_array().unwrap().len() as u64,
            plan["bytes"].as_u64().unwrap(),
        ),
        (st["stale_files"].as_u64().unwrap(), metric_bytes),
        (
            sp["files"].as_array().unwrap().len() as u64,
            sp["bytes"].as_u64().unwrap(),
        ),
    ]
}

/// The last "refresh ends" line's `bytes=` in the log.
fn logged_bytes(log: &str) -> Option<u64> {
    let line = log.lines().rev().find(|l| l.contains("refresh ends"))?;
    let at = line.find("bytes=")? + "bytes=".len();
    line[at..].split_whitespace().next()?.parse().ok()
}

#[test]
fn privileged_every_command_tells_the_same_story() {
    if !privileged("privileged_every_command_tells_the_same_story") {
        return;
    }
    let sc = scene(
        "none",
        4,
        32,
        21,
        "rate = \"16MiB/s\"\nsample_interval = \"1h\"\n",
    );
    // Dropped before the scene (the drive, then its directory).
    let daemon = sc.daemon;
    let (files, before, tree) = (sc.files.clone(), sc.before.clone(), sc.tree.clone());
    daemon.wait_for("the first scan", 30, |dm| dm.status()["last_scan"].is_i64());

    // Scanned: four stale files, 128 MiB, by every account.
    let all = (4, 128 << 20);
    assert_eq!(stories(&daemon, &tree), [all; 4], "after the scan");

    // Paused mid-round: what the round did, counted once, everywhere.
    let (code, out, err) = daemon.ctl(&["now", "--force"]);
    assert_eq!(code, 0, "{out}{err}");
    daemon.wait_for("the refresh to be under way", 30, |dm| {
        dm.status()["refresh"]["bytes_done"].as_u64().unwrap_or(0) >= 40 << 20
    });
    assert_eq!(daemon.ctl(&["pause"]).0, 0);
    daemon.wait_for("the round to stop", 15, |dm| {
        dm.status()["last_round"]["stopped"].is_string()
    });
    let st = daemon.status();
    let round = &st["last_round"];
    assert_eq!(round["stopped"], "paused", "{round:#}");
    let done = round["bytes"].as_u64().unwrap();
    assert!((40 << 20..128 << 20).contains(&done), "{round:#}");
    assert_eq!(refreshed_bytes(&daemon.metrics()) as u64, done, "metrics");
    daemon.wait_for("the log's round end", 10, |dm| {
        logged_bytes(&dm.log()).is_some()
    });
    assert_eq!(
        logged_bytes(&daemon.log()),
        Some(done),
        "the log's bytes are the real ones"
    );
    let (_, text, _) = daemon.ctl(&["status"]);
    let n = round["refreshed"].as_u64().unwrap() + round["skipped"].as_u64().unwrap();
    assert!(
        text.contains(&format!("stopped (paused) after {n}/4 files")),
        "status says where the round stopped: {text}"
    );

    // Resumed and done: nothing stale left, by every account.
    assert_eq!(daemon.ctl(&["resume"]).0, 0);
    let (code, out, err) = daemon.ctl(&["now", "--force", "--wait"]);
    assert_eq!(code, 0, "{out}{err}");
    daemon.wait_for("the rescan after the round", 30, |dm| {
        dm.status()["stale_files"] == 0
    });
    assert_eq!(stories(&daemon, &tree), [(0, 0); 4], "after the refresh");
    drop(daemon);
    let after: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    assert_eq!(before, after);
    std::thread::sleep(Duration::from_millis(10));
}
