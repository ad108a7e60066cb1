//! `refreshd survey` on the testbed: an aged drive is found degraded and its
//! plan lists the stale files, the age buckets order by speed as the decay
//! model predicts, a refresh of the plan makes it healthy; a fresh drive is
//! healthy round after round; sampling stays within its read budget and
//! leaves nothing in the page cache.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::helpers::*;
use refreshd::drive::disk_stats;
use refreshd::inventory::now_secs;
use refreshd::sampler::MONTH;
use serde_json::Value;
use testbed::{Drive, DriveOptions, Model};

fn survey(args: &[&str], path: &Path) -> Value {
    let out = run(refreshd()
        .args(["survey", "--json", "--min-free", "32MiB"])
        .args(args)
        .arg(path));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["drives"].as_array().unwrap().len(), 1, "{v}");
    v["drives"][0].clone()
}

fn months_ago(m: f64) -> i64 {
    now_secs() - (m * MONTH) as i64
}

/// Writes `n` files of `mib` MiB under `dir`, mtime `age` months ago.
fn files(d: &Drive, dir: &str, n: usize, mib: usize, age: f64, seed: u64) -> Vec<PathBuf> {
    std::fs::create_dir_all(d.path(dir)).unwrap();
    (0..n)
        .map(|i| {
            let p = d.path(&format!("{dir}/seg{i}"));
            write_file(&p, &pattern(mib << 20, seed + i as u64));
            set_mtime(&p, months_ago(age), 0);
            p
        })
        .collect()
}

fn bucket<'a>(r: &'a Value, label: &str) -> &'a Value {
    r["sample"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["label"] == label)
        .unwrap_or_else(|| panic!("no bucket {label}: {r:#}"))
}

fn mbps(b: &Value) -> f64 {
    b["measured"]["throughput"]["p50"].as_f64().unwrap() / 1e6
}

/// The mean of the middle two of four measurements (one per file).
fn middle_of_four(mut v: Vec<f64>) -> f64 {
    assert_eq!(v.len(), 4, "one measurement per file of a group of four");
    v.sort_by(f64::total_cmp);
    (v[1] + v[2]) / 2.0
}

#[test]
fn privileged_survey_finds_aged_drive_degraded_plans_and_recovers() {
    if !privileged("privileged_survey_finds_aged_drive_degraded_plans_and_recovers") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    // A request's fixed cost of 2 ms (the preset's is 0.25): the latency
    // the age adds (to 3.1, 8 and 11.4 ms at 1.2, 2.5 and 6 months) is
    // then far above what a CPU-starved emulator adds to every read
    // (under `.ci/stress`, with 0.25 ms, one survey's p50s were 0.5, 2.8,
    // 2.4 and 2.9 ms, out of order by noise).
    let base = DriveOptions::default();
    let opts = DriveOptions {
        size: 1 << 30,
        model: Model {
            fresh_latency: std::time::Duration::from_millis(2),
            ..base.model
        },
        ..base
    };
    let model = opts.model;
    let d = Drive::up(tmp.path(), &opts).unwrap();
    // Data of three ages by time travel: 6, 2.5 and 1.2 months; then fresh.
    let six = files(&d, "six", 4, 8, 6.0, 100);
    d.sync().unwrap();
    d.age(3.5);
    let two = files(&d, "two", 4, 8, 2.5, 200);
    d.sync().unwrap();
    d.age(1.3);
    let one = files(&d, "one", 4, 8, 1.2, 300);
    d.sync().unwrap();
    d.age(1.2);
    let new = files(&d, "new", 4, 8, 0.0, 400);
    d.sync().unwrap();
    let before: Vec<Fingerprint> = six.iter().chain(&two).map(|p| fingerprint(p)).collect();

    // 45 days: six and two are stale, one is not.
    let svg = tmp.path().join("survey.svg");
    let r = survey(
        &[
            "--stale-after",
            "45d",
            "--sample-bytes",
            "96MiB",
            "--svg",
            svg.to_str().unwrap(),
        ],
        &d.mnt,
    );
    assert_eq!(r["verdict"], "degraded", "{r:#}");
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(chart.starts_with("<svg") && chart.trim_end().ends_with("</svg>"));
    assert!(chart.contains("degraded") && chart.contains("6-7") && chart.contains("fresh "));
    assert!(!r["judgement"]["reasons"].as_array().unwrap().is_empty());
    assert_eq!(r["device"], d.loop_dev.trim_start_matches("/dev/"));
    let planned: Vec<PathBuf> = r["plan"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| PathBuf::from(f["path"].as_str().unwrap()))
        .collect();
    let expected: BTreeSet<&PathBuf> = six.iter().chain(&two).collect();
    assert_eq!(planned.iter().collect::<BTreeSet<_>>(), expected, "{r:#}");
    assert!(one.iter().all(|p| !planned.contains(p)), "not stale yet");
    // Oldest first.
    assert!(planned[..4].iter().all(|p| six.contains(p)), "{planned:?}");

    // Buckets order by speed and latency as the model predicts.
    let ages = [("0-1", 0.0), ("1-2", 1.2), ("2-3", 2.5), ("6-7", 6.0)];
    let speeds: Vec<f64> = ages.iter().map(|(l, _)| mbps(bucket(&r, l))).collect();
    let latencies = |r: &serde_json::Value| -> Vec<f64> {
        ages.iter()
            .map(|(l, _)| {
                bucket(r, l)["measured"]["latency_ms"]["p50"]
                    .as_f64()
                    .unwrap()
            })
            .collect()
    };
    let lat = latencies(&r);
    // As for latency below: 0 and 1.2 months differ little in the model
    // and swap places under load on this 2-core machine (seen with a
    // benchmark running beside the tests); every pair the model separates
    // clearly is ordered.
    assert!(
        speeds[0] > speeds[2] && speeds[1] > speeds[2] && speeds[2] > speeds[3],
        "speed should fall with age: {speeds:?}"
    );
    // Small-read latency: the survey orders the buckets as a plain reader
    // of the same files, just after, sees them — every pair the reader
    // puts 1.3x apart (quiet: 0 < 2.5 < 6 months; 0 and 1.2 differ by
    // ~1.4x in the model, less with the emulator's fixed cost). Under
    // `stress-ng --cpu 2` the emulator's scheduling adds milliseconds to
    // every 4 KiB read (a survey once measured p50 2.1, 4.0, 3.7 and 2.3
    // ms at 0, 1.2, 2.5 and 6 months): what the reader still sees apart,
    // the survey must order; a survey that disagrees is run once more,
    // as for the speeds below, and the second must agree.
    let reader_p50 = |paths: &[PathBuf]| -> f64 {
        middle_of_four(
            paths
                .iter()
                .zip(1..)
                .map(|(p, seed)| testbed::measure::random_reads(p, 64, seed).unwrap().p50)
                .collect(),
        )
    };
    let read_lat: Vec<f64> = [&new, &one, &two, &six]
        .iter()
        .map(|g| reader_p50(g))
        .collect();
    let apart: Vec<(usize, usize)> = (0..4)
        .flat_map(|i| (i + 1..4).map(move |j| (i, j)))
        .filter(|&(i, j)| read_lat[j] >= 1.3 * read_lat[i])
        .collect();
    eprintln!("latency p50: survey {lat:?}, reader {read_lat:?}, apart {apart:?}");
    let ordered = |lat: &[f64]| apart.iter().all(|&(i, j)| lat[i] < lat[j]);
    let lat = if ordered(&lat) {
        lat
    } else {
        latencies(&survey(
            &["--stale-after", "45d", "--sample-bytes", "96MiB"],
            &d.mnt,
        ))
    };
    assert!(
        ordered(&lat),
        "latency should rise with age as a reader sees it: survey {lat:?}, reader {read_lat:?}"
    );
    // And by as much as a plain reader sees, side by side in the same run:
    // fresh/aged speed within 35 % of 1 MiB O_DIRECT reads, 8 at once, of
    // the same files. (Against the model's bulk factor it held on a quiet
    // machine; under `stress-ng --cpu 2` the emulator itself drifts from
    // its model, 9.9x for 5.3x at 2.5 months, and the survey must still
    // agree with what a reader measures now.)
    let plain = |paths: &[PathBuf]| -> f64 {
        middle_of_four(
            paths
                .iter()
                .map(|p| testbed::measure::bulk_read_parallel(p, 8).unwrap())
                .collect(),
        )
    };
    // Under load the emulator's speed moves between the survey and the
    // reader just after it (a survey once read 10.2x where the reader read
    // 5.1x; that was before the flash moved to memory, and a CPU-starved
    // emulator still drifts): a survey that disagrees with the reader is
    // run once more, and the second must agree.
    let fresh_plain = plain(&new);
    let mut speeds = speeds;
    let agrees =
        |speeds: &[f64], i: usize, read: f64| ((speeds[0] / speeds[i]) / read - 1.0).abs() < 0.35;
    let reads: Vec<f64> = [&two, &six]
        .iter()
        .map(|g| fresh_plain / plain(g))
        .collect();
    if !(agrees(&speeds, 2, reads[0]) && agrees(&speeds, 3, reads[1])) {
        let again = survey(&["--stale-after", "45d", "--sample-bytes", "96MiB"], &d.mnt);
        eprintln!("survey again: its ratios did not agree with a reader's");
        speeds = ages.iter().map(|(l, _)| mbps(bucket(&again, l))).collect();
    }
    for (i, read) in [(2, reads[0]), (3, reads[1])] {
        let (_, age) = ages[i];
        let measured = speeds[0] / speeds[i];
        eprintln!(
            "age {age}: fresh/aged {measured:.2} by survey, {read:.2} by a reader, model {:.2}",
            model.bulk_factor(age)
        );
        assert!(
            (measured / read - 1.0).abs() < 0.35,
            "age {age}: fresh/aged {measured:.2} by survey, {read:.2} by a reader"
        );
    }

    // Refresh the plan; the next survey finds the drive healthy.
    let plan_args: Vec<&Path> = planned.iter().map(PathBuf::as_path).collect();
    let (code, reports, _) = refresh_json(&[], &plan_args);
    assert_eq!(code, 0, "{reports:#?}");
    let after = survey(&["--stale-after", "45d", "--sample-bytes", "96MiB"], &d.mnt);
    assert_eq!(after["verdict"], "healthy", "{after:#}");
    let now: Vec<Fingerprint> = six.iter().chain(&two).map(|p| fingerprint(p)).collect();
    assert_eq!(before, now, "contents and times unchanged");
    // The survey never wrote into user files; mtimes still say 6 months.
    assert!(six.iter().all(|p| {
        let m = std::fs::metadata(p).unwrap();
        std::os::unix::fs::MetadataExt::mtime(&m) < months_ago(5.9)
    }));
}

fn resident_bytes(p: &Path) -> u64 {
    let out = run(Command::new("fincore")
        .args(["-b", "-n", "-r", "-o", "RES"])
        .arg(p));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn privileged_fresh_drive_is_healthy_round_after_round_within_budget() {
    if !privileged("privileged_fresh_drive_is_healthy_round_after_round_within_budget") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let opts = DriveOptions {
        size: 1 << 30,
        model: Model::preset("840evo").unwrap(),
        ..DriveOptions::default()
    };
    let d = Drive::up(tmp.path(), &opts).unwrap();
    // Old by mtime, but the flash holds it freshly: not slow, not degraded.
    let all = files(&d, "idx", 8, 16, 6.0, 7);
    d.sync().unwrap();
    let dev = d.loop_dev.trim_start_matches("/dev/").to_string();
    let budget: u64 = 32 << 20;
    let mut ratios = vec![];
    for round in 0..20 {
        drop_caches();
        let s0 = disk_stats(&dev).unwrap();
        let seed = round.to_string();
        // The ratio floor judges; the absolute one would call a testbed
        // starved of CPU (fresh and old alike at 80 MB/s) "slow".
        let r = survey(
            &[
                "--sample-bytes",
                "32MiB",
                "--seed",
                &seed,
                "--min-throughput",
                "1MiB/s",
            ],
            &d.mnt,
        );
        let s1 = disk_stats(&dev).unwrap();
        assert_eq!(r["verdict"], "healthy", "round {round}: {r:#}");
        ratios.push(r["judgement"]["ratio"].as_f64().unwrap());
        // Reads stay within the budget (plus a little filesystem metadata).
        let read = s1.read_bytes - s0.read_bytes;
        assert!(
            read <= budget + (1 << 20),
            "round {round}: read {read} bytes"
        );
        assert!(r["sample"]["bytes_read"].as_u64().unwrap() <= budget);
        // Nothing sampled stays in the page cache.
        for p in &all {
            assert_eq!(
                resident_bytes(p),
                0,
                "round {round}: {} cached",
                p.display()
            );
        }
    }
    // Fresh reads as fresh: every round healthy (above), and the rounds'
    // median near 1. One round alone is noise under load: beside
    // `stress-ng` (`.ci/stress`) one of 20 measured 0.61.
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    assert!(median > 0.8, "stale/fresh per round: {ratios:?}");
}
