//! A sampling round on the drive, and what its verdict changes.

use crate::config::Settings;
use crate::inventory::{self, FileRecord, Store};
use crate::policy::{self, forecast, HealthState, Thresholds};
use crate::sampler::{self, SampleOptions};

use super::super::shared::{DriveCell, SampleRecord, Shared};

/// What a sampling round draws from: the inventory, streamed, or the
/// files just refreshed (to see whether it helped).
pub(super) enum Source {
    Inventory,
    /// The files a round just rewrote: a verification (and whether the
    /// round was cut by the budget).
    Rewritten(Vec<FileRecord>, bool),
}

/// Bytes written to the drive's members so far (diskstats, since boot).
fn written_bytes(cell: &DriveCell) -> Option<u64> {
    cell.drives
        .iter()
        .map(|d| {
            crate::drive::disk_stats(&d.name)
                .ok()
                .map(|s| s.write_bytes)
        })
        .sum()
}

/// The key of the drive's forecast rounds in the state database: every
/// member's identity, so two groups sharing a member (md over partitions)
/// keep their own. None where a member is known only by its kernel name
/// (no wwid, serial or backing file): names can swap at a reboot, and the
/// rounds would come back on another drive.
pub(super) fn forecast_key(cell: &DriveCell) -> Option<String> {
    if cell.drives.is_empty() || cell.drives.iter().any(|d| d.id == d.name) {
        return None;
    }
    let mut ids: Vec<&str> = cell.drives.iter().map(|d| d.id.as_str()).collect();
    ids.sort_unstable();
    Some(ids.join("+"))
}

/// The drive's identity for its baseline (the first member's: wwid, or
/// model and serial).
fn drive_identity(cell: &DriveCell) -> String {
    cell.drives
        .first()
        .map_or_else(|| cell.label.clone(), |d| d.id.clone())
}

pub(super) fn sample(
    shared: &Shared,
    cell: &DriveCell,
    store: &Store,
    source: Source,
    s: &Settings,
) -> HealthState {
    let now = inventory::now_secs();
    let opts = SampleOptions {
        budget: s.sample_bytes,
        stale_after: s.stale_after,
        canary_dir: cell.roots.first().cloned(),
        canary_reserve: crate::units::ByteSize(s.min_free.0.min(sampler::CANARY_RESERVE)),
        seed: now as u64,
        now,
    };
    let verification = match &source {
        Source::Rewritten(_, partial) => Some(*partial),
        Source::Inventory => None,
    };
    let buckets = candidates(cell, store, source, &opts);
    match sampler::sample_buckets(buckets, &opts) {
        Ok(sample) => {
            let (j, since_baseline) = judge(cell, store, s, &sample, now);
            shared.metrics.sampled(&cell.label, &sample, now);
            let state = take_verdict(cell, &j, verification, since_baseline, now);
            shared.metrics.set_state(&cell.label, state);
            let mut st = cell.lock();
            let (forecast, added) = match verification {
                // The rewritten files alone are not the drive's mix.
                Some(_) => (st.last_sample.as_ref().and_then(|r| r.forecast), false),
                None => look_ahead(&mut st.ages, &sample, &j, s, now),
            };
            shared.metrics.forecast(&cell.label, forecast.as_ref());
            st.last_sample = Some(SampleRecord {
                at: now,
                sample,
                judgement: j,
                forecast,
            });
            let kept = st.rounds_to_keep(added);
            drop(st);
            if let (Some(json), Some(key)) = (kept, forecast_key(cell)) {
                if let Err(e) = store.keep_forecast_rounds(&key, &json) {
                    tracing::warn!("keeping the forecast's rounds: {e}");
                }
            }
            state
        }
        Err(e) => {
            // Not "unknown" nor "no stale data": what the drive reads at
            // is not known, and status says why.
            let why = format!("cannot sample: {e}");
            let mut st = cell.lock();
            if st.error.as_deref() != Some(why.as_str()) {
                tracing::error!("{why}");
            }
            st.error = Some(why);
            let state = st.health.cannot_sample();
            shared.metrics.set_state(&cell.label, state);
            state
        }
    }
}

/// Adds the round's age-vs-speed points (taken `now`) to the drive's
/// history and forecasts when its stale data will cross a floor; whether
/// the round was added (not from a slow drive or without a reference).
fn look_ahead(
    ages: &mut forecast::History,
    sample: &sampler::DriveSample,
    j: &policy::Judgement,
    s: &Settings,
    now: i64,
) -> (Option<forecast::Forecast>, bool) {
    let Some(fresh) = j.fresh_bps.filter(|_| j.slow.is_none()) else {
        return (None, false);
    };
    ages.add(sample, fresh, now);
    let th = Thresholds {
        min_throughput: s.min_throughput,
        min_ratio: s.min_ratio,
    };
    (forecast::forecast(ages, sample, j, s.stale_after, th), true)
}

/// The files the round draws from, bucket by bucket.
fn candidates(
    cell: &DriveCell,
    store: &Store,
    source: Source,
    opts: &SampleOptions,
) -> sampler::Buckets {
    let mut buckets = sampler::Buckets::new(opts.now, opts.stale_after, opts.seed);
    match source {
        Source::Rewritten(files, _) => files.into_iter().for_each(|f| buckets.add(f)),
        Source::Inventory => {
            for root in &cell.roots {
                if let Err(e) = store.for_each_file(root, &mut |f| buckets.add(f)) {
                    tracing::warn!("{e}");
                }
            }
        }
    }
    buckets
}

/// The round's verdict against the references; records the drive's
/// baseline (not from a slow drive's canary). Also when the baseline was
/// recorded and the bytes written since (for a diagnosis).
fn judge(
    cell: &DriveCell,
    store: &Store,
    s: &Settings,
    sample: &sampler::DriveSample,
    now: i64,
) -> (policy::Judgement, Option<(i64, u64)>) {
    let id = drive_identity(cell);
    let th = Thresholds {
        min_throughput: s.min_throughput,
        min_ratio: s.min_ratio,
    };
    let fallbacks = policy::Fallbacks {
        baseline_bps: store.baseline(&id).ok().flatten().map(|(b, _)| b),
        expected_bps: s.expected_throughput.map(|e| e.0 as f64),
    };
    let j = policy::judge_sample(sample, th, fallbacks);
    let written = written_bytes(cell);
    if let Some(b) = sample.fresh.as_ref().and_then(|f| f.median_bps()) {
        if j.slow.is_none() {
            if let Err(e) = store.record_baseline(&id, b, now, written) {
                tracing::warn!("recording the drive's baseline: {e}");
            }
        }
    }
    let since_baseline = store
        .baseline_written(&id)
        .ok()
        .flatten()
        .and_then(|(_, at, w)| Some((at, written?.checked_sub(w?)?)));
    (j, since_baseline)
}

/// The drive's new state from the verdict, with what the operator is
/// told (a diagnosis of a slow drive, a drive that cannot be judged).
fn take_verdict(
    cell: &DriveCell,
    j: &policy::Judgement,
    verification: Option<bool>,
    since_baseline: Option<(i64, u64)>,
    now: i64,
) -> HealthState {
    let mut st = cell.lock();
    if st
        .error
        .as_deref()
        .is_some_and(|e| e.starts_with("cannot sample"))
    {
        st.error = None;
    }
    let was = st.health.state;
    let state = match verification {
        Some(partial) => st.health.verified(j, partial),
        None => st.health.observe(j),
    };
    if state == HealthState::Slow && was != HealthState::Slow {
        st.diagnosis = cell
            .drives
            .iter()
            .flat_map(|d| crate::diagnose::diagnose(std::path::Path::new("/sys"), &d.name))
            .collect();
        if let Some((at, bytes)) = since_baseline {
            st.diagnosis
                .push(crate::diagnose::written_since(bytes, now - at));
        }
        tracing::warn!(
            diagnosis = ?st.diagnosis,
            "every byte of the drive is slow; not refreshing: {}",
            j.slow.as_deref().unwrap_or("")
        );
    } else if state != HealthState::Slow {
        st.diagnosis.clear();
    }
    if state != was && (state == HealthState::Unjudged || was == HealthState::Unjudged) {
        match &j.unjudged {
            Some(why) => tracing::warn!("cannot judge the drive: {why}"),
            None => tracing::warn!(reference = ?j.reference, "the drive can be judged again"),
        }
    }
    tracing::info!(
        state = state.name(),
        stale_mbps = j.stale_bps.map(|b| (b / 1e4).round() / 100.0),
        fresh_mbps = j.fresh_bps.map(|b| (b / 1e4).round() / 100.0),
        "sampled"
    );
    state
}
