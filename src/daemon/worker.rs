//! One worker thread per drive: scan its trees, sample it, judge it, and
//! refresh its plan when it is degraded (or when asked), throttled, inside
//! the window, one drive at a time up to `max_active_drives`, pausable,
//! checkpointed. Blocking work lives here, never on tokio's threads.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Settings;
use crate::inventory::{self, FileRecord, Store};
use crate::policy::{self, HealthState, Thresholds};
use crate::protocol::state::Waiting;
use crate::sampler::{self, SampleOptions};

use super::shared::{DriveCell, RoundSummary, SampleRecord, Shared};
use super::step::{self, next_step, Request, Step, View, CONFIRM};

fn settings_for(shared: &Shared, cell: &DriveCell) -> Settings {
    let cfg = shared.config();
    cfg.paths
        .iter()
        .find(|p| cell.roots.first() == Some(&p.path))
        .map_or_else(|| cfg.defaults.clone(), |p| p.settings.clone())
}

/// What the loop remembers between steps.
struct Loop {
    next_scan: Instant,
    next_sample: Instant,
    /// Files just refreshed: the next sample measures them (did it help?),
    /// and whether the budget left others for another day.
    verify: Option<(Vec<FileRecord>, bool)>,
    /// How far the waiting `now` request got, and what its rounds did.
    req: Request,
    req_round: Option<RoundSummary>,
    refresh_not_before: Instant,
    /// The daily budget is spent until then.
    budget_until: Option<Instant>,
    /// Its fleet slot (with `[coordination]`).
    slot: super::slot::SlotKeeper,
}

/// What a `refreshctl now` did, in one line (shown by `--wait`): the
/// round's real counts; "nothing to refresh" only when nothing was planned.
fn request_outcome(
    st: &super::shared::DriveStatus,
    r: Request,
    round: Option<&RoundSummary>,
) -> String {
    let state = st.health.state.name();
    if let Some(sm) = round.filter(|sm| r.refreshed && sm.planned > 0) {
        let mut line = format!(
            "refreshed {} file(s), {}",
            sm.refreshed,
            crate::units::format_size(sm.bytes)
        );
        let others: Vec<String> = [
            (sm.skipped, "skipped"),
            (sm.interrupted, "interrupted"),
            (sm.failed, "FAILED"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, w)| format!("{n} {w}"))
        .collect();
        if !others.is_empty() {
            line.push_str(&format!(
                " of {} planned; {}",
                sm.planned,
                others.join(", ")
            ));
        }
        for f in &sm.failures {
            line.push_str(&format!("; failed {}: {}", f.path, f.reason));
        }
        if let Some(why) = sm.stopped.as_deref().filter(|_| !sm.finished) {
            line.push_str(&format!("; stopped: {why}"));
        }
        return format!("{line}; verified: {state}");
    }
    if r.refreshed {
        let p = &st.plan;
        let why = if p.deferred_budget > 0 {
            "the daily budget is spent"
        } else if p.skipped_recent > 0 {
            "every stale file was refreshed within min_interval"
        } else {
            "no stale data"
        };
        return format!("nothing to refresh: {why}; the drive is {state}");
    }
    match st.health.state {
        HealthState::Suspect => {
            format!(
                "suspect: one slow round, not confirmed in {CONFIRM} samples; nothing refreshed"
            )
        }
        HealthState::Degraded => format!(
            "degraded: the refresh waits ({})",
            st.waiting.map_or("see status", Waiting::sentence)
        ),
        _ => format!("{state}: nothing to refresh"),
    }
}

/// The start of the next UTC day (when the daily budget resets).
fn next_utc_day() -> Instant {
    let now = inventory::now_secs();
    let left = 86_400 - now.rem_euclid(86_400);
    Instant::now() + Duration::from_secs(left as u64)
}

/// The worker's loop; returns at shutdown.
pub fn run(shared: Arc<Shared>, cell: Arc<DriveCell>) {
    let span = tracing::info_span!("drive", device = %cell.label);
    let _e = span.enter();
    // Every series of the drive from the first scrape (counters at 0), so
    // that increase() alerts see the first event.
    shared.metrics.init_drive(&cell.label);
    let Some(mut store) = open_store(&shared, &cell) else {
        return; // stopping
    };
    let now = Instant::now();
    let mut l = Loop {
        next_scan: now,
        next_sample: now,
        verify: None,
        req: Request::default(),
        req_round: None,
        refresh_not_before: now,
        budget_until: None,
        slot: super::slot::SlotKeeper::default(),
    };
    loop {
        let s = settings_for(&shared, &cell);
        let (request, wants_refresh, only, suspect) = {
            let st = cell.lock();
            let request = st.pending.as_ref().map(|r| Request {
                force: r.force,
                ..l.req
            });
            let only = st.pending.as_ref().and_then(|r| r.path.clone());
            let suspect = st.health.state == HealthState::Suspect;
            (request, st.health.wants_refresh(), only, suspect)
        };
        // An operator's `now --force` starts at once: a pause after a
        // round that could not start does not hold it (the budget does).
        if request.is_some_and(|r| r.force) && l.budget_until.is_none() {
            l.refresh_not_before = Instant::now().min(l.refresh_not_before);
        }
        let in_window = s.window.contains(crate::clock::local_minute());
        let paused = cell.paused.load(Ordering::Relaxed);
        let budget_spent = l.budget_until.is_some_and(|t| Instant::now() < t);
        let forced = request.is_some_and(|r| r.force);
        let wanted = (wants_refresh || forced)
            && in_window
            && !paused
            && !budget_spent
            && Instant::now() >= l.refresh_not_before;
        let mut view = View {
            now: Instant::now(),
            stopping: shared.stopping(),
            next_scan: l.next_scan,
            next_sample: l.next_sample,
            verify_pending: l.verify.is_some(),
            request,
            wants_refresh,
            suspect,
            paused,
            in_window,
            refresh_not_before: l.refresh_not_before,
            budget_spent,
            slot_wait: None,
        };
        let next = matches!(next_step(&view), Step::Refresh { .. });
        let slot_wait = l.slot.wait_reason(&shared, &cell, wanted, next);
        view.slot_wait = slot_wait;
        cell.lock().waiting = (wants_refresh || forced)
            .then(|| step::waiting(&view))
            .flatten();
        let step = next_step(&view);
        match step {
            Step::Stop => return,
            Step::Scan => {
                if request.is_some() {
                    l.req.rescanned = true;
                }
                scan(&shared, &mut store, &cell, &s);
                // The plan `refreshctl plan` shows: what a round would
                // rewrite now, from the same rows the stale count is from.
                let (plan, _) = super::round::plan(&cell, &store, &s, false, None);
                cell.lock().plan = plan;
                let stale = cell.lock().stale_bytes;
                shared.metrics.set_stale_bytes(&cell.label, stale);
                l.next_scan = Instant::now() + s.scan_interval;
            }
            Step::Sample { verify } => {
                let state = match l.verify.take().filter(|_| verify) {
                    // Rewritten data counts as stale here: it is what is judged.
                    Some((done, partial)) => {
                        let all_stale = Settings {
                            stale_after: Duration::ZERO,
                            ..s.clone()
                        };
                        let src = Source::Rewritten(done, partial);
                        sample(&shared, &cell, &store, src, &all_stale)
                    }
                    None => sample(&shared, &cell, &store, Source::Inventory, &s),
                };
                if request.is_some() && !verify {
                    l.req.samples += 1;
                }
                l.next_sample = Instant::now()
                    + if state == HealthState::Suspect {
                        // Confirm soon instead of in hours.
                        (s.sample_interval / 6).max(Duration::from_secs(1))
                    } else {
                        s.sample_interval
                    };
            }
            Step::Refresh { forced } => {
                let ticket = l.slot.ticket();
                let r =
                    super::round::run(&shared, &cell, &store, &s, forced, only.as_deref(), ticket);
                if let Some(why) = r.gate_failed.clone() {
                    l.slot.gate_failed(&shared, &cell, why);
                } else {
                    // Done, paused, or stopped: the slot goes back now;
                    // a round that must go on queues again.
                    l.slot.release(&cell);
                }
                if request.is_some() {
                    l.req_round
                        .get_or_insert_with(RoundSummary::default)
                        .absorb(&r.summary);
                }
                if r.finished {
                    if request.is_some() {
                        l.req.refreshed = true;
                    }
                    // Verify at once what was really rewritten: rescan
                    // (ages), then measure those files. An empty round
                    // rewrote nothing and verifies nothing.
                    if !r.refreshed.is_empty() {
                        l.verify = Some((r.refreshed, r.budget_cut));
                    }
                    l.next_scan = Instant::now();
                    if r.budget_cut {
                        // Degraded (budget): the rest the next UTC day.
                        let t = next_utc_day();
                        l.budget_until = Some(t);
                        l.refresh_not_before = t;
                        tracing::info!(
                            "daily budget spent: the rest of the plan continues the next UTC day"
                        );
                    }
                } else if r.rescan {
                    l.next_scan = Instant::now();
                } else if r.slot_lost || r.gate_failed.is_some() || r.left_window || r.host_busy {
                    // It waits for the slot, the gate or the window again.
                } else if !shared.stopping() && !cell.paused.load(Ordering::Relaxed) {
                    // It could not start (the error is in the status).
                    l.refresh_not_before = Instant::now() + Duration::from_secs(30);
                }
            }
            Step::Answer => {
                let mut st = cell.lock();
                st.last_request = Some(request_outcome(&st, l.req, l.req_round.as_ref()));
                st.last_request_round = l.req_round.take();
                st.pending = None;
                st.completed = st.requests;
                l.req = Request::default();
            }
            Step::Wait { at_most, .. } => {
                let st = cell.lock();
                let _ = cell.wake.wait_timeout(st, at_most);
            }
        }
    }
}

/// When a file under the drive's trees was last refreshed, from the
/// database (the status after a restart).
fn last_refresh(store: &Store, cell: &DriveCell) -> Option<i64> {
    cell.roots
        .iter()
        .filter_map(|root| store.last_refresh_under(root).ok().flatten())
        .max()
}

/// Opens the state database, retrying with backoff (1 s doubling to 60 s)
/// while it fails: the drive shows the error in `refreshctl status` and
/// `refreshd_store_up{device} 0` until it opens. `None` when stopping.
fn open_store(shared: &Shared, cell: &DriveCell) -> Option<Store> {
    let mut backoff = Duration::from_secs(1);
    let up = shared.metrics.store_up.get_or_create(&super::metrics::Dev {
        device: cell.label.clone(),
    });
    loop {
        match Store::open(&shared.config().state_dir) {
            Ok(s) => {
                up.set(1);
                let last = last_refresh(&s, cell);
                let mut st = cell.lock();
                if st.last_refresh.is_none() {
                    // After a restart: what the database remembers.
                    st.last_refresh = last;
                }
                if st
                    .error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("state database"))
                {
                    st.error = None;
                }
                return Some(s);
            }
            Err(e) => {
                up.set(0);
                tracing::error!("{e}; retrying in {backoff:?}");
                let mut st = cell.lock();
                st.error = Some(format!("state database: {e} (retrying in {backoff:?})"));
                let (_st, _) = cell
                    .wake
                    .wait_timeout(st, backoff)
                    .unwrap_or_else(|e| e.into_inner());
            }
        }
        if shared.stopping() {
            return None;
        }
        backoff = (backoff * 2).min(Duration::from_secs(60));
    }
}

/// Rescans the drive's trees and counts what is stale, streaming the
/// inventory (no list of files is kept).
fn scan(shared: &Shared, store: &mut Store, cell: &DriveCell, s: &Settings) {
    let mut error = None;
    let mut unreadable = 0;
    for root in &cell.roots {
        match store.scan(root) {
            Ok(stats) => {
                unreadable += stats.unreadable;
                if stats.unreadable > 0 {
                    tracing::warn!(
                        root = %crate::pathtext::Log(root),
                        unreadable = stats.unreadable,
                        "the scan could not read some directories: their files keep their records"
                    );
                }
                tracing::debug!(
                    files = stats.files,
                    seconds = stats.seconds,
                    root = %crate::pathtext::Log(root),
                    "scanned"
                );
                for p in stats.problems.iter().take(20) {
                    tracing::warn!("{p}");
                }
            }
            Err(e) => {
                tracing::error!("{e}");
                error = Some(e.to_string());
            }
        }
    }
    shared
        .metrics
        .scan_unreadable
        .get_or_create(&super::metrics::Dev {
            device: cell.label.clone(),
        })
        .set(i64::try_from(unreadable).unwrap_or(i64::MAX));
    let now = inventory::now_secs();
    let (mut files, mut stale_files, mut stale_bytes) = (0u64, 0u64, 0u64);
    let mut wrong_clock = 0u64;
    for root in &cell.roots {
        let counted = store.for_each_file(root, &mut |f| {
            files += 1;
            wrong_clock += u64::from(f.from_a_wrong_clock(now));
            if f.data_age(now) >= s.stale_after {
                stale_files += 1;
                stale_bytes += f.data_bytes();
            }
        });
        if let Err(e) = counted {
            error = Some(e.to_string());
        }
    }
    if wrong_clock > 0 {
        tracing::warn!(
            files = wrong_clock,
            "timestamps in the future (mtime or last refresh more than {} s ahead: a clock \
             that was wrong): those files count as of unknown age, so they are due; they \
             are never taken for fresh",
            crate::clock::FUTURE_TOLERANCE
        );
    }
    let mut st = cell.lock();
    st.files = files;
    st.stale_files = stale_files;
    st.stale_bytes = stale_bytes;
    st.last_scan = Some(now);
    st.error = error;
}

/// What a sampling round draws from: the inventory, streamed, or the
/// files just refreshed (to see whether it helped).
enum Source {
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

/// The drive's identity for its baseline (the first member's: wwid, or
/// model and serial).
fn drive_identity(cell: &DriveCell) -> String {
    cell.drives
        .first()
        .map_or_else(|| cell.label.clone(), |d| d.id.clone())
}

fn sample(
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
        min_free: s.min_free,
        seed: now as u64,
        now,
    };
    let th = Thresholds {
        min_throughput: s.min_throughput,
        min_ratio: s.min_ratio,
    };
    let mut buckets = sampler::Buckets::new(now, opts.stale_after, opts.seed);
    let verification = match &source {
        Source::Rewritten(_, partial) => Some(*partial),
        Source::Inventory => None,
    };
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
    match sampler::sample_buckets(buckets, &opts) {
        Ok(sample) => {
            let id = drive_identity(cell);
            let fallbacks = policy::Fallbacks {
                baseline_bps: store.baseline(&id).ok().flatten().map(|(b, _)| b),
                expected_bps: s.expected_throughput.map(|e| e.0 as f64),
            };
            let j = policy::judge_sample(&sample, th, fallbacks);
            // A slow drive's canary is not what fresh data reads at on it.
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
            shared.metrics.sampled(&cell.label, &sample, now);
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
                Some(partial) => st.health.verified(&j, partial),
                None => st.health.observe(&j),
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
                    None => {
                        tracing::warn!(reference = ?j.reference, "the drive can be judged again")
                    }
                }
            }
            tracing::info!(
                state = state.name(),
                stale_mbps = j.stale_bps.map(|b| b / 1e6),
                fresh_mbps = j.fresh_bps.map(|b| b / 1e6),
                "sampled"
            );
            shared.metrics.set_state(&cell.label, state);
            st.last_sample = Some(SampleRecord {
                at: now,
                sample,
                judgement: j,
            });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn shared_with_state_dir(
        dir: std::path::PathBuf,
        journal: &std::path::Path,
    ) -> (Arc<Shared>, Arc<DriveCell>) {
        let cfg = Config {
            state_dir: dir,
            ..Config::default()
        };
        let cell = Arc::new(DriveCell::new("test0".into(), vec![], vec![]));
        let shared = super::super::Shared::for_tests(cfg, vec![cell.clone()], journal);
        (shared, cell)
    }

    #[test]
    fn a_store_that_fails_to_open_is_retried_shown_and_then_served() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let state = tmp.path().join("state");
        // A plain file where the state directory should be: open fails.
        std::fs::write(&state, b"not a directory").unwrap_or_else(|e| panic!("{e}"));
        let (shared, cell) = shared_with_state_dir(state.clone(), &tmp.path().join("j"));
        let (s2, c2) = (shared.clone(), cell.clone());
        let worker = std::thread::spawn(move || open_store(&s2, &c2).is_some());
        let t = Instant::now();
        while cell.lock().error.is_none() {
            assert!(t.elapsed() < Duration::from_secs(10), "no error shown");
            std::thread::sleep(Duration::from_millis(20));
        }
        let err = cell.lock().error.clone().unwrap_or_default();
        assert!(err.starts_with("state database"), "{err}");
        assert!(shared
            .metrics
            .encode()
            .contains("refreshd_store_up{device=\"test0\"} 0"));
        // The operator fixes it; the next attempt opens the store.
        std::fs::remove_file(&state).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir(&state).unwrap_or_else(|e| panic!("{e}"));
        assert!(worker.join().unwrap_or(false), "the store opened");
        assert_eq!(cell.lock().error, None, "the error is cleared");
        assert!(shared
            .metrics
            .encode()
            .contains("refreshd_store_up{device=\"test0\"} 1"));
    }
}
