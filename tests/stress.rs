//! Other processes' actions are outcomes, not errors: while an fsx-like
//! exerciser (random writes, truncates, hole punches, mmap writes, each
//! checked against its model; one keeping the file open, one reopening it
//! for every operation) and `fio --verify` work on files, one-shot
//! refreshes run over and over on them. No byte is lost (the exerciser
//! and fio verify everything) and no run ends `failed`: a file that
//! changed under refreshd is interrupted or skipped, with the reason.
//! Regression: 1,041 of 22,400 such runs failed ("MOVE_EXT made no
//! progress", "allocation changed", "unreadable range … file shorter than
//! planned", SEEK_DATA answering ENXIO).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::helpers::*;
use testbed::mutator::{self, Holding};

/// How long each filesystem is exercised (`REFRESHD_STRESS_SECONDS`
/// lengthens a soak run by hand).
fn run_time() -> Duration {
    let s = std::env::var("REFRESHD_STRESS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok());
    Duration::from_secs(s.unwrap_or(12))
}
const SIZE: u64 = 8 << 20;

fn fio(file: &Path) -> std::process::Child {
    Command::new("fio")
        .args([
            "--name=verify",
            "--rw=randwrite",
            "--bs=4k",
            "--size=8M",
            "--ioengine=psync",
            "--verify=crc32c",
            "--verify_backlog=64",
            "--verify_fatal=1",
            "--time_based",
            // fio saves its verify state in its working directory by
            // default; nothing of a test may land in the checkout.
            "--verify_state_save=0",
        ])
        .arg(format!("--runtime={}", run_time().as_secs()))
        .arg(format!("--filename={}", file.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// One `refreshd refresh --json` run: exit code, per-file records, stderr.
fn refresh_once(state: &Path, paths: &[&Path]) -> (i32, Vec<serde_json::Value>, String) {
    let out = refreshd()
        .args(["refresh", "--json", "--state-dir"])
        .arg(state)
        .args(paths)
        .output()
        .unwrap();
    let files = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("summary").is_none())
        .collect();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), files, stderr)
}

fn under_load(kind: &'static str) -> BTreeMap<String, u64> {
    let fs = LoopFs::new(kind, 320);
    let (a, b, c) = (fs.path("kept-open"), fs.path("reopened"), fs.path("fio"));
    let state = fs.dir.path().join("state");
    let movers = [
        (a.clone(), Holding::KeptOpen, 1),
        (b.clone(), Holding::PerOperation, 2),
    ]
    .map(|(p, h, seed)| std::thread::spawn(move || mutator::run(&p, SIZE, run_time(), h, seed)));
    std::thread::sleep(Duration::from_millis(200));
    let fio = fio(&c);
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let t = Instant::now();
    // The writers' time, and at least three rounds over all three files
    // however slowly a loaded machine runs them (the last may then see
    // the files at rest: still no failure allowed).
    let mut whole_rounds = 0;
    while t.elapsed() < run_time() || (whole_rounds < 3 && t.elapsed() < run_time() * 10) {
        let existing: Vec<&Path> = [&a, &b, &c]
            .into_iter()
            .filter(|p| p.exists())
            .map(|p| p.as_path())
            .collect();
        if existing.is_empty() {
            // The writers have not made their files yet.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let (code, files, stderr) = refresh_once(&state, &existing);
        if code == 2 && files.is_empty() && stderr.contains("No such file or directory") {
            // fio lays its file out again (unlink, create) when it starts:
            // a path named on the command line vanished before the run
            // began, which is a usage error that touches nothing.
            *outcomes
                .entry("vanished before the run".into())
                .or_default() += 1;
            continue;
        }
        for f in &files {
            let status = f["status"].as_str().unwrap_or("?");
            let why = f["failure"]
                .as_str()
                .or(f["cause"].as_str())
                .or(f["reason"].as_str())
                .unwrap_or("");
            *outcomes.entry(format!("{status}:{why}")).or_default() += 1;
            assert_ne!(status, "failed", "{kind}: {f:#}");
        }
        assert_eq!(code, 0, "{kind}: {files:#?}\n{stderr}");
        whole_rounds += u32::from(files.len() == 3);
    }
    for m in movers {
        let ran = m
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("{kind}: data lost: {e}"));
        assert!(ran.operations > 50, "{kind}: {ran:?}");
    }
    let out = fio.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{kind}: fio verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    outcomes
}

#[test]
fn privileged_files_changing_under_refreshd_are_outcomes_not_failures() {
    if !privileged("privileged_files_changing_under_refreshd_are_outcomes_not_failures") {
        return;
    }
    if Command::new("fio").arg("--version").output().is_err() {
        if std::env::var("REFRESHD_REQUIRE_PRIVILEGED_TESTS").as_deref() == Ok("1") {
            panic!("fio is not installed");
        }
        skipped(
            "privileged_files_changing_under_refreshd_are_outcomes_not_failures",
            "fio is not installed",
        );
        return;
    }
    for kind in ["ext4", "xfs", "btrfs"] {
        let outcomes = under_load(kind);
        eprintln!("{kind}: {outcomes:?}");
        let runs: u64 = outcomes.values().sum();
        assert!(runs >= 9, "{kind}: {outcomes:?}");
    }
}
