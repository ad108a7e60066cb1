//! Judgement an operator can trust: never blind. The fresh reference is a
//! canary sized to what the filesystem can spare (not the refresh
//! watermark), else the drive's recorded baseline, else its freshest data,
//! else `expected_throughput`; with none the drive is `unjudged` and says
//! why — never silently healthy.

use std::path::Path;

use crate::daemon_harness::*;
use crate::helpers::*;

const RATIO_ONLY: &str =
    "min_free = \"1GiB\"\nmin_throughput = \"1MiB/s\"\nmin_ratio = 0.5\nsample_bytes = \"64MiB\"\n";

fn aged(dir: &Path, n: usize) -> (testbed::Drive, std::path::PathBuf) {
    let d = drive(dir, "840evo");
    let tree = d.path("index");
    stale_files(&tree, n, 16, 501);
    d.sync().unwrap();
    d.age(6.0);
    d.sync().unwrap();
    (d, tree)
}

#[test]
fn privileged_ratio_judged_with_the_default_min_free_on_a_small_drive() {
    if !privileged("privileged_ratio_judged_with_the_default_min_free_on_a_small_drive") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (_d, tree) = aged(tmp.path(), 4);
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, RATIO_ONLY);
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    // Samples every 2 s: degraded after two slow rounds, then refreshed.
    daemon.wait_for("degraded and refreshed", 30, |dm| {
        dm.status()["last_refresh"].is_i64()
    });
    let s = daemon.status();
    assert_eq!(s["last_sample"]["reference"], "canary", "{s:#}");
}

/// Fills the filesystem holding `path` until about `left` bytes are free.
fn fill(path: &Path, left: u64) -> std::path::PathBuf {
    let vfs = nix::sys::statvfs::statvfs(path).unwrap();
    let free = vfs.blocks_available() * vfs.fragment_size();
    let ballast = path.join("ballast");
    let len = free.saturating_sub(left);
    run(std::process::Command::new("fallocate")
        .args(["-l", &len.to_string()])
        .arg(&ballast));
    ballast
}

#[test]
fn privileged_nearly_full_drive_uses_its_baseline_or_says_it_cannot_judge() {
    if !privileged("privileged_nearly_full_drive_uses_its_baseline_or_says_it_cannot_judge") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (d, tree) = aged(tmp.path(), 2);
    let mnt = d.path("");
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, RATIO_ONLY);
    // With room: a canary, and the drive's baseline recorded.
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    daemon.wait_for("a sample with a canary", 30, |dm| {
        dm.status()["last_sample"]["reference"] == "canary"
    });
    drop(daemon);
    // Nearly full (no room for even a 4 MiB canary): the baseline judges.
    let ballast = fill(&mnt, 40 << 20);
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    daemon.wait_for("a sample judged from the baseline", 30, |dm| {
        dm.status()["last_sample"]["reference"] == "baseline"
    });
    // Judged degraded from the baseline, and refreshed (let the round
    // finish: a kill mid-file would leave a moved mtime behind).
    daemon.wait_for("refreshed", 60, |dm| dm.status()["last_refresh"].is_i64());
    drop(daemon);
    // A state directory without that history: unjudged, with the reason.
    let fresh_state = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let cfg = config(fresh_state.path(), &tree, port, RATIO_ONLY);
    let daemon = Daemon::start(fresh_state.path(), &cfg, port);
    daemon.wait_for("unjudged", 30, |dm| dm.status()["state"] == "unjudged");
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_secs(2));
        let s = daemon.status();
        assert_eq!(s["state"], "unjudged", "never silently healthy: {s:#}");
        let why = s["last_sample"]["unjudged"].as_str().unwrap_or("");
        assert!(why.contains("no room for a"), "{why}");
    }
    let (_, text, _) = daemon.ctl(&["status"]);
    assert!(text.contains("cannot judge:"), "{text}");
    assert!(
        daemon.log().contains("cannot judge the drive"),
        "WARN logged"
    );
    drop(daemon);
    std::fs::remove_file(ballast).unwrap();
}

#[test]
fn privileged_link_capped_drive_is_slow_and_never_rewritten() {
    if !privileged("privileged_link_capped_drive_is_slow_and_never_rewritten") {
        return;
    }
    // Fresh flash, old mtimes, a link negotiated down to 20 MB/s.
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = drive(tmp.path(), "840evo");
    let tree = d.path("index");
    stale_files(&tree, 4, 16, 601);
    d.sync().unwrap();
    d.link_cap(20_000_000);
    let port = free_port();
    let cfg = config(
        tmp.path(),
        &tree,
        port,
        "sample_interval = \"1s\"\nsample_bytes = \"8MiB\"\n",
    );
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    let mut rounds = std::collections::BTreeSet::new();
    let t = std::time::Instant::now();
    while rounds.len() < 20 {
        assert!(t.elapsed().as_secs() < 120, "only {} rounds", rounds.len());
        let s = daemon.status();
        if let Some(at) = s["last_sample"]["at"].as_i64() {
            if rounds.insert(at) && rounds.len() > 1 {
                assert_eq!(s["state"], "slow", "round {}: {s:#}", rounds.len());
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let s = daemon.status();
    let why = s["last_sample"]["slow"].as_str().unwrap_or("");
    assert!(why.contains("as slowly as old data"), "{s:#}");
    assert_eq!(refreshed_bytes(&daemon.metrics()), 0.0, "nothing rewritten");
    assert!(s["last_refresh"].is_null());
    d.link_cap(0);
}

#[test]
fn privileged_faded_drive_is_diagnosed_not_rewritten_and_trim_cures_it() {
    if !privileged("privileged_faded_drive_is_diagnosed_not_rewritten_and_trim_cures_it") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = drive(tmp.path(), "840evo");
    let tree = d.path("index");
    stale_files(&tree, 2, 16, 701);
    d.sync().unwrap();
    let port = free_port();
    let cfg = config(
        tmp.path(),
        &tree,
        port,
        "sample_interval = \"1s\"\nsample_bytes = \"16MiB\"\n",
    );
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    daemon.wait_for("healthy with a baseline", 30, |dm| {
        let s = dm.status();
        s["state"] == "healthy" && s["last_sample"]["reference"] == "canary"
    });
    // Heavy writes: garbage collection falls behind, every request slows.
    d.fade(32 << 20, 20);
    write_file(&d.path("bulk"), &pattern(48 << 20, 702));
    d.sync().unwrap();
    daemon.wait_for("slow", 60, |dm| dm.status()["state"] == "slow");
    let s = daemon.status();
    let diagnosis = s["diagnosis"].to_string();
    assert!(diagnosis.contains("written to the drive since"), "{s:#}");
    assert!(diagnosis.contains("fstrim"), "{s:#}");
    assert_eq!(refreshed_bytes(&daemon.metrics()), 0.0, "never rewritten");
    // TRIM lets it catch up.
    run(std::process::Command::new("fstrim").arg(d.path("")));
    daemon.wait_for("healthy after fstrim", 60, |dm| {
        dm.status()["state"] == "healthy"
    });
    assert_eq!(refreshed_bytes(&daemon.metrics()), 0.0);
    d.fade(0, 1);
}

#[test]
fn privileged_survey_says_slow_with_the_reason() {
    if !privileged("privileged_survey_says_slow_with_the_reason") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = drive(tmp.path(), "840evo");
    let tree = d.path("index");
    stale_files(&tree, 2, 16, 901);
    d.sync().unwrap();
    d.link_cap(20_000_000);
    let out = run(refreshd()
        .args(["survey", "--sample-bytes", "16MiB", "--min-free", "32MiB"])
        .arg(&tree));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("verdict: slow (fresh data reads as slowly as old data"),
        "{text}"
    );
    assert!(
        !text.contains("plan:"),
        "nothing planned for a slow drive: {text}"
    );
    d.link_cap(0);
}

/// A drive whose stale data cannot be read at all (here: FIEMAP refused
/// by a seccomp filter, as a sandbox may do) is `cannot_sample` with the
/// reason, never `unknown` with "no stale data".
#[test]
fn privileged_a_drive_that_cannot_be_sampled_says_so() {
    if !privileged("privileged_a_drive_that_cannot_be_sampled_says_so") {
        return;
    }
    use testbed::seccomp::{Refusal, FS_IOC_FIEMAP, SYS_IOCTL};
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let fs = LoopFs::new("ext4", 256);
    let tree = fs.path("index");
    stale_files(&tree, 2, 4, 502);
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, "");
    let refusal = Refusal {
        syscall: SYS_IOCTL,
        arg1: Some(FS_IOC_FIEMAP),
        errno: libc::EPERM,
    };
    let daemon = Daemon::start_refusing(tmp.path(), &cfg, port, refusal);
    daemon.wait_for("cannot_sample", 30, |dm| {
        dm.status()["state"] == "cannot_sample"
    });
    let s = daemon.status();
    let why = s["error"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("cannot sample: none of the stale files could be opened")
            && why.contains("Operation not permitted"),
        "{s:#}"
    );
    let m = daemon.metrics();
    assert_eq!(
        metric(
            &m,
            &format!(
                "refreshd_drive_state{{device=\"{}\",state=\"cannot_sample\"}}",
                s["device"].as_str().unwrap()
            )
        ),
        Some(1.0),
        "{m}"
    );
    let (code, out, _) = daemon.ctl(&["status"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("cannot_sample") && out.contains("cannot sample:"),
        "{out}"
    );
}
