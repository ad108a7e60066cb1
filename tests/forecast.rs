//! The drive's forecast against what happens: data on the aging testbed
//! grows older step by step (the flash and the files' mtimes alike), a
//! step per `sample_interval` (6 h), as the daemon samples; each step is
//! a sampling round judged as the daemon judges one (the same functions:
//! `sampler::sample`, `policy::judge_sample`, `Health`, the forecast over
//! the rounds of the last `forecast::FIT_WINDOW`; a suspect round is
//! sampled again at once, as the daemon re-samples within
//! `sample_interval`/6). Every forecast made 6 to 12 days before the drive
//! is declared degraded is within ±25 % of when it was. The 25 forecasts
//! of a run came out −20..−14 % on a quiet machine, −12..−10 % and
//! −17..−14 % with two runs side by side (2026-11-27; docs/DESIGN.md,
//! "Forecast"): early, the model's lean (below). Beside `.ci/stress` it
//! passed in two runs of three and failed the third at −25.6 % (its 25
//! forecasts −26..−18 %, the drive declared degraded at 1.585 months as
//! in quiet runs, 2026-11-27): the lean leaves 5 points of margin, and
//! a loaded host's rounds can take them.
//!
//! The drive is one channel of 50 MB/s ([`slow_channel`]): on the
//! default 8 channels of 400 MB/s, a testbed starved of CPU (the suite
//! side by side, `.ci/stress`) capped the fresh canary's reads more than
//! the stale data's, the ratio stayed above the floor for days of age
//! past the model's crossing, and the test judged the forecast against a
//! declaration the load had moved (forecasts up to 52 % early, one run in
//! nine 78 % late). Before the test stepped by the daemon's 6 h it stepped
//! 18 h with the last 16 rounds kept and asserted ±50 %: beside
//! `.ci/stress` its forecasts were −10..−16 %, −13..−21 % and −26 %.
//!
//! A burst of load on the testbed lasts many rounds and slows a round's
//! stale data and its canary alike: against the median canary alone it
//! read as age, and a `.ci/stress` run failed at +27 % (2026-11-28).
//! Each round's points were then measured against the median moved
//! toward the round's own canary by the share of the canaries' spread
//! successive rounds could not tell from noise; a quiet run after it came
//! out −14..−12 %. `tools/forecast-replay.py` replays a run's
//! printed rounds under each reference.
//!
//! Beside `.ci/stress` on that code (2026-11-28) it failed two runs of
//! three, early both times (−13..−25.4 % and −16..−27 %, declared at
//! 1.585–1.589 months as in quiet runs). Replayed, those rounds' canary
//! deviations did not move with their stale data's: the canary, read
//! last in a round, met other moments of the load than the stale reads.
//! The sampler now reads it in step with them, and the reference follows
//! a round's own canary by the share of its moves the stale reads share
//! (`History::shared_share`). One run beside `stress-ng --cpu 2 --io 2`
//! after it: −18..+24 %, each round's own canary within a few % of the
//! model's excess at every age where the median was off by up to +62 %.
//!
//! What is left besides is the model's lean: a power of age fitted on the rise
//! extrapolates past the testbed's curve as it levels off, a warning a
//! day or two early. `tools/forecast-sim.py` judges the same fit on eight
//! other decay shapes: a curve that levels off just past the floor has it
//! 39 % early and an accelerating one 68 % late (docs/DESIGN.md,
//! "Forecast"). When Sen's range of the slope holds 0 the forecast says
//! nothing rather than "not degraded within 3 years", which this test
//! counts as a failure.
use std::path::{Path, PathBuf};

use crate::helpers::*;
use refreshd::config::Settings;
use refreshd::inventory::{now_secs, Store};
use refreshd::policy::{self, forecast, HealthState, Thresholds};
use refreshd::sampler::{self, SampleOptions, MONTH};
use refreshd::units::ByteSize;
use testbed::{Drive, DriveOptions};

/// Data ages by the daemon's `sample_interval` (6 h) per step: a round
/// per interval, as the daemon takes them, so its history holds what the
/// daemon's would (the rounds of the last `forecast::FIT_WINDOW`).
fn step() -> std::time::Duration {
    Settings::default().sample_interval
}

fn shift_mtimes(files: &[PathBuf], months: f64) {
    for p in files {
        let m = std::fs::metadata(p).unwrap();
        let t = std::os::unix::fs::MetadataExt::mtime(&m) - (months * MONTH) as i64;
        set_mtime(p, t, 0);
    }
}

/// The `840evo` decay on one channel of 50 MB/s: a 1 MiB read takes the
/// same 21 ms as on each of the default drive's 8 channels, but the drive
/// reads 50 MB/s, not 400. The testbed's reads cost it CPU besides the
/// model's time; starved of CPU (the suite's tests side by side,
/// `.ci/stress`) it serves 175–260 MB/s whatever the model says, and
/// ~80 MB/s at worst. On the default drive that cap slowed the fresh
/// canary more than the stale data and pulled their ratio toward 1: a run
/// under `.ci/stress` read 0.52–0.59 of fresh for six days of age where
/// the model reads 0.43–0.5, the drive was declared degraded a week late,
/// and the forecasts made before came out −26 to −52 %. Here both stay
/// below any such cap. (100 MB/s would halve the test's time, but reads
/// its rounds noisier: −24..−8 % in one quiet run, and the canary would
/// meet the worst cap.)
fn slow_channel() -> testbed::model::Model {
    testbed::model::Model {
        fresh_bandwidth: 50e6,
        ..testbed::model::Model::preset("840evo").unwrap()
    }
}

/// One round on the drive's files as they are now.
fn round(root: &Path, seed: u64) -> sampler::DriveSample {
    let mut store = Store::memory().unwrap();
    store.scan(root).unwrap();
    let files = store.files(root).unwrap();
    let s = Settings::default();
    let opts = SampleOptions {
        // The daemon's default budget (256 MiB): a round's noise is most
        // of a forecast's error, and more regions read make less of it.
        budget: s.sample_bytes,
        stale_after: s.stale_after,
        canary_dir: Some(root.to_path_buf()),
        canary_reserve: ByteSize(32 << 20),
        seed,
        now: now_secs(),
    };
    sampler::sample(&files, &opts).unwrap()
}

#[test]
fn privileged_the_forecast_says_when_the_drive_degrades() {
    if !privileged("privileged_the_forecast_says_when_the_drive_degrades") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = Drive::up(
        tmp.path(),
        &DriveOptions {
            size: 1 << 30,
            model: slow_channel(),
            channels: 1,
            ..DriveOptions::default()
        },
    )
    .unwrap();
    let root = d.path("index");
    std::fs::create_dir_all(&root).unwrap();
    let files: Vec<PathBuf> = (0..8)
        .map(|i| {
            let p = root.join(format!("seg{i}"));
            write_file(&p, &pattern(8 << 20, 700 + i));
            p
        })
        .collect();
    d.sync().unwrap();
    // Start at 0.85 months: younger data reads within 5 % of fresh on
    // this model (no point, `forecast::MIN_EXCESS`).
    d.age(0.85);
    shift_mtimes(&files, 0.85);

    let s = Settings::default();
    // The ratio floor is what the decay crosses; the absolute one would
    // call a testbed starved of CPU (everything at ~80 MB/s) "slow".
    let th = Thresholds {
        min_throughput: refreshd::units::Rate(1 << 20),
        min_ratio: s.min_ratio,
    };
    let mut health = policy::Health::default();
    let mut history = forecast::History::default();
    let step_months = step().as_secs_f64() / MONTH;
    // The rounds' times, a step apart: the clock the history keeps them by.
    let (started, mut steps) = (now_secs(), 0i64);
    // (age in months, forecast seconds) per step, until degraded.
    let mut said: Vec<(f64, Option<f64>)> = vec![];
    let mut age = 0.85;
    let degraded_at = loop {
        assert!(age < 4.0, "never degraded: {said:?}");
        let mut state = HealthState::Unknown;
        for again in 0..3 {
            let sample = round(&root, (age * 1000.0) as u64 + again);
            let j = policy::judge_sample(&sample, th, policy::Fallbacks::default());
            state = health.observe(&j);
            if again == 0 {
                let fresh = j.fresh_bps.expect("a canary on the testbed");
                history.add(&sample, fresh, started + steps * step().as_secs() as i64);
                let f = forecast::forecast(&history, &sample, &j, s.stale_after, th);
                // The canary and the emulator's overruns so far: a host
                // too loaded to serve the model shows here.
                let st = d.stats();
                eprintln!(
                    "age {age:.3} months: ratio {:?}, fresh {:.1} MB/s, {}, forecast {:?} \
                     (testbed overruns {}, {} ms)",
                    j.ratio,
                    fresh / 1e6,
                    state.name(),
                    f.map(|f| (f.words(), f.basis())),
                    st.overruns,
                    st.overrun_us / 1000
                );
                said.push((age, f.and_then(|f| f.seconds_until_degraded)));
            }
            if state != HealthState::Suspect {
                break;
            }
        }
        if state == HealthState::Degraded {
            break age;
        }
        d.age(step_months);
        shift_mtimes(&files, step_months);
        age += step_months;
        steps += 1;
    };
    // It was declared within the last step: its middle is when.
    let degraded_at = degraded_at - step_months / 2.0;
    // The forecasts made 6–12 days ahead.
    let judged: Vec<(f64, f64, f64)> = said
        .iter()
        .filter(|(at, _)| (0.2..0.4).contains(&(degraded_at - at)))
        .map(|&(at, f)| {
            let actual = (degraded_at - at) * MONTH;
            let f = f.unwrap_or_else(|| panic!("no forecast at {at:.1} months: {said:?}"));
            (at, f / 86_400.0, actual / 86_400.0)
        })
        .collect();
    assert!(judged.len() >= 2, "{said:?}");
    for (at, f, actual) in &judged {
        assert!(
            (f / actual - 1.0).abs() <= 0.25,
            "at {at:.1} months the forecast said {f:.1} days, it took {actual:.1}: {judged:?}"
        );
    }
    let errors = judged.iter().map(|(_, f, actual)| f / actual - 1.0);
    let (lo, hi) = errors.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), e| {
        (lo.min(e), hi.max(e))
    });
    eprintln!(
        "degraded at {degraded_at:.3} months; {} forecasts 6-12 days ahead, {:+.0}..{:+.0} %; \
         (age, said days, took days): {judged:?}",
        judged.len(),
        lo * 100.0,
        hi * 100.0
    );
}

/// The daemon shows its forecast: status (JSON and table), the metric.
#[test]
fn privileged_the_daemon_shows_its_forecast() {
    if !privileged("privileged_the_daemon_shows_its_forecast") {
        return;
    }
    use crate::daemon_harness::*;
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = drive(tmp.path(), "840evo");
    let tree = d.path("index");
    two_ages(&d, &tree, 4, 800);
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, SETTINGS);
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    // On a timeout the drive's own counters go with the status and log:
    // the mean request size and the ages of its blocks tell a canary read
    // in pieces or a clock gone wrong from a slow round.
    let t = std::time::Instant::now();
    // A forecast with a date within four months (the data crosses in
    // weeks): the first fits, from a few rounds, may still be far off.
    let dated = |st: &serde_json::Value| {
        st["last_sample"]["forecast"]["seconds_until_degraded"]
            .as_f64()
            .is_some_and(|s| s > 0.0 && s < 120.0 * 86_400.0)
    };
    while !dated(&daemon.status()) {
        // A round on a loaded host can read its younger bucket as fast
        // as fresh (no point, no slope yet): up to 3 min, rounds every 2 s.
        assert!(
            t.elapsed() < std::time::Duration::from_secs(180),
            "no forecast within 120 days in 180 s\nstatus: {:#}\ndrive: {:?}\nlog:\n{}",
            daemon.status(),
            d.stats(),
            daemon.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Status (JSON and table) and the metric of one round with a date.
    let (s, text, m) = daemon.one_round_seen("a round with a date, seen whole", 60, dated);
    let secs = s["last_sample"]["forecast"]["seconds_until_degraded"]
        .as_f64()
        .unwrap();
    assert!(secs > 0.0 && secs < 120.0 * 86_400.0, "{s:#}");
    // "degraded in ~N days", or "degraded within the hour" where the
    // fit alone puts the data at its floors already.
    assert!(text.contains("forecast: degraded "), "{text}");
    let dev = s["device"].as_str().unwrap();
    let exported = metric(
        &m,
        &format!("refreshd_drive_seconds_until_degraded{{device=\"{dev}\"}}"),
    )
    .unwrap();
    assert!((exported / secs - 1.0).abs() < 1e-6, "{exported} vs {secs}");
    daemon.wait_for("a forecast on 5 points (at least 3 rounds)", 120, |d| {
        forecast_points(&d.status()).is_some_and(|p| p >= 5)
    });
    drop(daemon); // killed
    a_restart_keeps_the_rounds(Daemon::start(tmp.path(), &cfg, port));
}

/// A drive whose data does not slow as it ages (written data reads 1.3×
/// fresh at every age): the daemon says "not degraded within 3 years"
/// only from [`forecast::REASSURING_POINTS`] points on (no forecast
/// before: a few points warn, never reassure), in status and as +Inf in
/// the metric.
#[test]
fn privileged_a_drive_that_does_not_age_is_reassured_only_from_enough_points() {
    if !privileged("privileged_a_drive_that_does_not_age_is_reassured_only_from_enough_points") {
        return;
    }
    use crate::daemon_harness::*;
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    // Half its slowdown at 0.01 months: all of it at any age the test
    // gives its data, none on the canary written seconds before its read.
    // One channel of 50 MB/s, below what a testbed starved of CPU serves
    // ([`slow_channel`]): on the default 8 channels a `.ci/stress` run
    // read canary and stale data alike at that cap, fitted a slope to
    // the noise on 202 points ("degraded in ~734 days") and never
    // reassured.
    let flat = testbed::model::Model {
        tau_months: 0.01,
        bulk_gain: 0.3,
        latency_gain: 0.3,
        ..slow_channel()
    };
    let opts = DriveOptions {
        size: 1 << 30,
        model: flat,
        channels: 1,
        ..DriveOptions::default()
    };
    let d = Drive::up(tmp.path(), &opts).unwrap();
    let tree = d.path("index");
    // Two points a round (two buckets): a round's points come in pairs,
    // and the rule is checked at 6 and 8 points.
    two_ages(&d, &tree, 2, 1600);
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, SETTINGS);
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    // Every round's forecast, by the round's time. The test takes 21 s
    // on a quiet host, 24 and 36 s beside `stress-ng --cpu 2 --io 2`.
    let mut seen: Vec<(i64, serde_json::Value)> = vec![];
    daemon.wait_for("not degraded within 3 years", 300, |d| {
        let st = d.status();
        let Some(at) = st["last_sample"]["at"].as_i64() else {
            return false;
        };
        if seen.last().map(|(t, _)| *t) != Some(at) {
            seen.push((at, st["last_sample"]["forecast"].clone()));
        }
        reassures(&st)
    });
    let enough = forecast::REASSURING_POINTS as u64;
    for (at, f) in &seen {
        if is_reassurance(f) {
            let points = f["points"].as_u64().unwrap();
            assert!(
                points >= enough,
                "round at {at} reassured from {points} points (fewer than {enough}): {seen:?}"
            );
        }
    }
    // Rounds before it were seen without one (at 2 s a round, polled
    // every 200 ms), and the points grew to it.
    assert!(seen.len() >= 2, "{seen:?}");
    // Status (table) and the metric of one round that reassured (a later
    // round may say nothing again).
    let (st, text, m) = daemon.one_round_seen("a reassuring round, seen whole", 60, reassures);
    assert!(text.contains("not degraded within 3 years"), "{text}");
    let dev = st["device"].as_str().unwrap();
    let series = format!("refreshd_drive_seconds_until_degraded{{device=\"{dev}\"}}");
    let exported = metric(&m, &series).unwrap_or_else(|| panic!("no {series} in\n{m}"));
    assert!(
        exported.is_infinite() && exported > 0.0,
        "{series} {exported}"
    );
}

/// A floor low enough that a canary read slowly beside another test
/// never makes the drive "slow" (no forecast then), and rounds of 64 MiB.
const SETTINGS: &str =
    "min_free = \"64MiB\"\nsample_bytes = \"64MiB\"\nmin_throughput = \"1MiB/s\"\n";

/// A forecast that says "not degraded within 3 years" (no date).
fn is_reassurance(forecast: &serde_json::Value) -> bool {
    forecast.is_object() && forecast["seconds_until_degraded"].is_null()
}

/// The last round's forecast is a reassurance.
fn reassures(st: &serde_json::Value) -> bool {
    is_reassurance(&st["last_sample"]["forecast"])
}

/// Data of two ages in two buckets under `tree`, `n` files of 8 MiB
/// each, both slower than fresh and the drive still healthy: 1.35 months
/// (stale) and 0.95 (not yet: 29 days).
fn two_ages(d: &Drive, tree: &Path, n: u64, seed: u64) {
    std::fs::create_dir_all(tree).unwrap();
    let write = |name: &str, seed: u64| -> Vec<PathBuf> {
        (0..n)
            .map(|i| {
                let p = tree.join(format!("{name}{i}"));
                write_file(&p, &pattern(8 << 20, seed + i));
                p
            })
            .collect()
    };
    let old = write("old", seed);
    d.sync().unwrap();
    d.age(0.4);
    let new = write("new", seed + 100);
    d.sync().unwrap();
    d.age(0.95);
    shift_mtimes(&old, 1.35);
    shift_mtimes(&new, 0.95);
}

/// The forecast's points (age buckets × rounds) in the last round's
/// forecast, if it has one.
fn forecast_points(st: &serde_json::Value) -> Option<u64> {
    st["last_sample"]["forecast"]["points"].as_u64()
}

/// A restart (an upgrade, a reboot) keeps the drive's rounds: the first
/// forecast of the new daemon (`daemon`) rests on more points than the
/// rounds it sampled itself give (two buckets: at most two a round).
fn a_restart_keeps_the_rounds(daemon: crate::daemon_harness::Daemon) {
    let (points, rounds) = first_forecast_after_restart(&daemon);
    assert!(
        points > 2 * rounds,
        "the first forecast after a restart rests on {points} points, {rounds} rounds of its \
         own: the rounds before it are lost\nstatus: {:#}\nlog:\n{}",
        daemon.status(),
        daemon.log()
    );
}

/// The first forecast of a restarted daemon: its points, and the rounds
/// the new daemon had sampled when it was read (at least those it rests
/// on). Not the first round's: on a host starved of CPU a round can read
/// both buckets alike and withhold its forecast (the slope's range
/// holds 0), which once left a daemon sampling hourly without one.
fn first_forecast_after_restart(daemon: &crate::daemon_harness::Daemon) -> (u64, u64) {
    let mut seen = None;
    daemon.wait_for("a forecast from a round after the restart", 120, |d| {
        let points = forecast_points(&d.status());
        let log = d.log();
        let since = log
            .rfind("refreshd running")
            .map_or(&log[..], |i| &log[i..]);
        let rounds = since.matches("sampled state=").count() as u64;
        seen = points.map(|p| (p, rounds));
        seen.is_some()
    });
    seen.unwrap()
}

/// A state directory that fills up: the write of a drive's rounds fails
/// with the database's "full", and the rounds kept before are still
/// there, whole; once there is room the next write keeps the new ones.
/// (The daemon's side, logging the failure, forecasting on and writing
/// every round it holds once there is room:
/// `privileged_a_daemon_whose_state_dir_fills_forecasts_on_and_keeps_its_rounds`.)
/// One statement replaces the rounds:
/// written as a delete and an insert, the delete fits in the room left
/// and the failed insert leaves none (checked).
#[test]
fn privileged_a_full_state_dir_keeps_the_rounds_it_had() {
    if !privileged("privileged_a_full_state_dir_keeps_the_rounds_it_had") {
        return;
    }
    let fs = LoopFs::new("ext4", 16);
    let state = fs.path("state");
    let rounds = |n: i64| {
        let mut h = forecast::History::default();
        for i in 0..n {
            let buckets = (0..8)
                .map(|b| (0.9 + 0.05 * b as f64, 3e8 - b as f64))
                .collect();
            h.add_readings(5e8, buckets, 1_000 + i * 3_600);
        }
        h.to_json()
    };
    let (before, after) = (rounds(1), rounds(128));
    // 29 KB: more pages than the room left below (16 KiB) holds.
    assert!(after.len() > 16 << 10, "{}", after.len());
    let store = Store::open(&state).unwrap();
    store.keep_forecast_rounds("wwn-a", &before).unwrap();
    // Every block the filesystem has left, root's reserve included.
    let filler = fs.path("filler");
    fill_up(&filler);
    // Room for a few pages, not for the rounds.
    let len = std::fs::metadata(&filler).unwrap().len();
    std::fs::File::options()
        .write(true)
        .open(&filler)
        .unwrap()
        .set_len(len - (16 << 10))
        .unwrap();
    let err = store.keep_forecast_rounds("wwn-a", &after).unwrap_err();
    assert!(err.to_string().contains("full"), "{err}");
    let kept = store.forecast_rounds("wwn-a").unwrap();
    assert_eq!(kept.as_deref(), Some(before.as_str()), "the rounds before");
    std::fs::remove_file(&filler).unwrap();
    store.keep_forecast_rounds("wwn-a", &after).unwrap();
    drop(store);
    let store = Store::open(&state).unwrap();
    let kept = store.forecast_rounds("wwn-a").unwrap();
    assert_eq!(kept.as_deref(), Some(after.as_str()), "the rounds after");
}

/// The daemon's side of a full state directory: a round whose rounds
/// cannot be written is logged and forecast on from the rounds held in
/// memory (status shows the forecast, not an error); once there is room
/// the next round writes them all, so a restart after it keeps the
/// rounds of the time the disk was full.
#[test]
fn privileged_a_daemon_whose_state_dir_fills_forecasts_on_and_keeps_its_rounds() {
    if !privileged("privileged_a_daemon_whose_state_dir_fills_forecasts_on_and_keeps_its_rounds") {
        return;
    }
    use crate::daemon_harness::*;
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = drive(tmp.path(), "840evo");
    let tree = d.path("index");
    // Two points a round.
    two_ages(&d, &tree, 2, 1200);
    let fs = LoopFs::new("ext4", 32);
    let state = fs.path("state");
    let port = free_port();
    let settings = format!("{SETTINGS}state_dir = \"{}\"\n", state.display());
    // The drive's files are only read (the drive is healthy): a full
    // state dir changes none of them.
    let files: Vec<PathBuf> = std::fs::read_dir(&tree)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 4, "{files:?}");
    let prints: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    let cfg = config(tmp.path(), &tree, port, &settings);
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    daemon.wait_for("a forecast", 180, |d| {
        forecast_points(&d.status()).is_some()
    });
    let before = forecast_points(&daemon.status()).unwrap();
    let filler = fs.path("filler");
    fill_up(&filler);
    let warning = "keeping the forecast's rounds";
    daemon.wait_for("the warning that the rounds were not kept", 120, |d| {
        d.log().contains(warning)
    });
    // Forecasting on, from more rounds than were written: rounds come
    // every 2 s; wait for two more.
    let at = |st: &serde_json::Value| st["last_sample"]["at"].as_i64();
    let first = at(&daemon.status());
    daemon.wait_for("two rounds on a full state dir", 60, |d| {
        let st = d.status();
        at(&st) > first.map(|t| t + 2) && forecast_points(&st).is_some()
    });
    let st = daemon.status();
    assert!(st["error"].is_null(), "{st:#}");
    let points_while_full = forecast_points(&st).unwrap();
    assert!(
        points_while_full > before,
        "the forecast on a full state dir rests on {points_while_full} points, before on \
         {before}: the rounds not written are not held\nlog:\n{}",
        daemon.log()
    );
    let failed = daemon.log().matches(warning).count();
    assert!(failed >= 2, "{failed} failed writes\n{}", daemon.log());
    std::fs::remove_file(&filler).unwrap();
    // The next round that adds one writes them all. Status shows a round
    // before its rounds are written, so the kill must come after a second
    // round: had it caught the first one's write, every round of the full
    // disk would be lost with it, not one (CI saw that: 6 points after
    // the restart, 7 held).
    let now = at(&daemon.status());
    // A round writes its rounds when it adds points: the first that does
    // once there is room writes the backlog.
    let mut written = None;
    daemon.wait_for(
        "a round that adds points after the room came back",
        60,
        |d| {
            let st = d.status();
            let adds = forecast_points(&st).is_some_and(|p| p > points_while_full);
            if at(&st) > now.map(|t| t + 2) && adds {
                written = at(&st);
            }
            written.is_some()
        },
    );
    let mut held = 0;
    daemon.wait_for("a second round after the room came back", 60, |d| {
        let st = d.status();
        held = forecast_points(&st).unwrap_or(0);
        at(&st) > written.map(|t| t + 2) && held > 0
    });
    drop(daemon); // killed
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    let (points, rounds) = first_forecast_after_restart(&daemon);
    // Every round held before the kill, less one (2 points) the kill may
    // have caught unwritten: had the rounds of the full disk been lost,
    // fewer (they are at least three rounds).
    let kept = points.saturating_sub(2 * rounds);
    assert!(
        kept + 2 >= held,
        "the first forecast after the restart rests on {points} points, {rounds} rounds of its \
         own; the daemon before held {held} ({points_while_full} while the state dir was full): \
         rounds are lost\nlog:\n{}",
        daemon.log()
    );
    drop(daemon);
    for (p, before) in files.iter().zip(&prints) {
        assert_eq!(&fingerprint(p), before, "{}", p.display());
    }
}

/// Writes `path` until its filesystem has no block left: written data is
/// synced before it is tried again, since the space held for data not yet
/// written back makes a write fail early.
fn fill_up(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 4096];
    let mut refused = 0;
    while refused < 2 {
        match f.write_all(&block) {
            Ok(()) => refused = 0,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                refused += 1;
                f.sync_all().unwrap_or_else(|e| panic!("{e}"));
            }
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
}
