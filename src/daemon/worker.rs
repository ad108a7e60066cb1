//! One worker thread per drive: scan its trees, sample it, judge it, and
//! refresh its plan when it is degraded (or when asked), throttled, inside
//! the window, one drive at a time up to `max_active_drives`, pausable,
//! checkpointed. Blocking work lives here, never on tokio's threads.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Settings;
use crate::inventory::{self, FileRecord, Store};
use crate::policy::HealthState;
use crate::protocol::state::Waiting;

use super::shared::{DriveCell, RoundSummary, Shared};
use super::step::{self, next_step, Request, Step, View, CONFIRM};

#[cfg(test)]
mod loop_tests;
mod sample;
mod scan;
mod store;

use sample::{sample, Source};
use scan::scan;
use store::open_store;

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
    /// The last round rewrote nothing, and no sample came since
    /// ([`super::step::View::nothing_left`]).
    nothing_left: bool,
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
        // Nothing rewritten is nothing verified: the drive's state.
        let verified = if sm.refreshed > 0 {
            "verified"
        } else {
            "the drive is"
        };
        return format!("{line}; {verified}: {state}");
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
    let mut l = Loop::new(Instant::now());
    loop {
        let s = settings_for(&shared, &cell);
        let (view, asked) = l.look(&shared, &cell, &s);
        match next_step(&view) {
            Step::Stop => return,
            Step::Scan => l.scan(&shared, &cell, &mut store, &s, asked.is_some()),
            Step::Sample { verify } => {
                l.sample(&shared, &cell, &store, &s, verify, asked.is_some())
            }
            Step::Refresh { forced } => l.refresh(&shared, &cell, &store, &s, forced, &asked),
            Step::Answer => l.answer(&cell),
            Step::Wait { at_most, .. } => {
                let st = cell.lock();
                let _ = cell.wake.wait_timeout(st, at_most);
            }
        }
    }
}

/// A `refreshctl now` being answered, and the path it names.
struct Asked {
    only: Option<std::path::PathBuf>,
}

/// How soon a drive whose state is in question is sampled again: one
/// slow round (suspect), or a degraded one whose round found nothing to
/// rewrite.
fn resample_soon(s: &Settings) -> Duration {
    (s.sample_interval / 6).max(Duration::from_secs(1))
}

impl Loop {
    /// A drive's loop at its start: scan and sample at once.
    fn new(now: Instant) -> Loop {
        Loop {
            next_scan: now,
            next_sample: now,
            verify: None,
            req: Request::default(),
            req_round: None,
            refresh_not_before: now,
            budget_until: None,
            nothing_left: false,
            slot: super::slot::SlotKeeper::default(),
        }
    }

    /// What the drive's state allows now (and why a wanted refresh waits,
    /// shown in `status`).
    fn look(&mut self, shared: &Shared, cell: &DriveCell, s: &Settings) -> (View, Option<Asked>) {
        let (request, wants_refresh, only, suspect) = {
            let st = cell.lock();
            let request = st.pending.as_ref().map(|r| Request {
                force: r.force,
                ..self.req
            });
            let only = st.pending.as_ref().and_then(|r| r.path.clone());
            let suspect = st.health.state == HealthState::Suspect;
            (request, st.health.wants_refresh(), only, suspect)
        };
        // An operator's `now --force` starts at once: a pause after a
        // round that could not start does not hold it (the budget does).
        if request.is_some_and(|r| r.force) && self.budget_until.is_none() {
            self.refresh_not_before = Instant::now().min(self.refresh_not_before);
        }
        let in_window = s.window.contains(crate::clock::local_minute());
        let paused = cell.paused.load(Ordering::Relaxed);
        let budget_spent = self.budget_until.is_some_and(|t| Instant::now() < t);
        let forced = request.is_some_and(|r| r.force);
        let mut view = View {
            now: Instant::now(),
            stopping: shared.stopping(),
            next_scan: self.next_scan,
            next_sample: self.next_sample,
            verify_pending: self.verify.is_some(),
            request,
            wants_refresh,
            nothing_left: self.nothing_left,
            suspect,
            paused,
            in_window,
            refresh_not_before: self.refresh_not_before,
            budget_spent,
            slot_wait: None,
        };
        // What the step decides on too (`View::degraded_with_work`).
        let asks = view.degraded_with_work() || forced;
        let wanted =
            asks && in_window && !paused && !budget_spent && view.now >= self.refresh_not_before;
        let next = matches!(next_step(&view), Step::Refresh { .. });
        view.slot_wait = self.slot.wait_reason(shared, cell, wanted, next);
        // A degraded drive with nothing left says so too.
        let says = view.wants_refresh || forced;
        cell.lock().waiting = says.then(|| step::waiting(&view)).flatten();
        (view, request.map(|_| Asked { only }))
    }

    fn scan(
        &mut self,
        shared: &Shared,
        cell: &DriveCell,
        store: &mut Store,
        s: &Settings,
        asked: bool,
    ) {
        if asked {
            self.req.rescanned = true;
        }
        scan(shared, store, cell, s);
        self.next_scan = Instant::now() + s.scan_interval;
    }

    fn sample(
        &mut self,
        shared: &Shared,
        cell: &DriveCell,
        store: &Store,
        s: &Settings,
        verify: bool,
        asked: bool,
    ) {
        let state = match self.verify.take().filter(|_| verify) {
            // Rewritten data counts as stale here: it is what is judged.
            Some((done, partial)) => {
                let all_stale = Settings {
                    stale_after: Duration::ZERO,
                    ..s.clone()
                };
                let src = Source::Rewritten(done, partial);
                sample(shared, cell, store, src, &all_stale)
            }
            None => sample(shared, cell, store, Source::Inventory, s),
        };
        if asked && !verify {
            self.req.samples += 1;
        }
        self.sampled(state, s, Instant::now());
    }

    /// A sample was taken (`state` its verdict): new evidence, so a
    /// degraded verdict may send a round again; the next one is soon
    /// for a suspect drive (confirm instead of in hours).
    fn sampled(&mut self, state: HealthState, s: &Settings, now: Instant) {
        self.nothing_left = false;
        self.next_sample = now
            + if state == HealthState::Suspect {
                resample_soon(s)
            } else {
                s.sample_interval
            };
    }

    fn refresh(
        &mut self,
        shared: &Shared,
        cell: &DriveCell,
        store: &Store,
        s: &Settings,
        forced: bool,
        asked: &Option<Asked>,
    ) {
        let ticket = self.slot.ticket();
        let only = asked.as_ref().and_then(|a| a.only.as_deref());
        let r = super::round::run(shared, cell, store, s, forced, only, ticket);
        if let Some(why) = r.gate_failed.clone() {
            self.slot.gate_failed(shared, cell, why);
        } else {
            // Done, paused, or stopped: the slot goes back now; a round
            // that must go on queues again.
            self.slot.release(cell);
        }
        if asked.is_some() {
            self.req_round
                .get_or_insert_with(RoundSummary::default)
                .absorb(&r.summary);
        }
        if r.finished {
            self.finished(r, asked.is_some(), only.is_some(), s, Instant::now());
        } else if r.rescan {
            self.next_scan = Instant::now();
        } else if r.slot_lost || r.gate_failed.is_some() || r.left_window || r.host_busy {
            // It waits for the slot, the gate or the window again.
        } else if !shared.stopping() && !cell.paused.load(Ordering::Relaxed) {
            // It could not start (the error is in the status).
            self.refresh_not_before = Instant::now() + Duration::from_secs(30);
        }
    }

    /// A round went through its plan: verify what it rewrote at once
    /// (rescan for the ages, then measure those files); an empty round
    /// rewrote nothing and verifies nothing.
    ///
    /// A round that rewrote nothing (the plan was empty: all just
    /// refreshed or within `min_interval`; or every file failed or was
    /// in use) is not run again before a sample says the drive still
    /// needs it, and that sample comes soon (as for a suspect drive).
    /// Before, the loop rescanned and ran it again at once, every second,
    /// taking the fleet's slot each time. Not for a round the daily
    /// budget stopped (it resumes the next UTC day) nor for a round of
    /// one path (`refreshctl now --path`: the rest of the drive is not
    /// known to be done).
    fn finished(
        &mut self,
        r: super::round::RoundResult,
        asked: bool,
        one_path: bool,
        s: &Settings,
        now: Instant,
    ) {
        if asked {
            self.req.refreshed = true;
        }
        self.nothing_left = r.refreshed.is_empty() && !r.budget_cut && !one_path;
        if self.nothing_left {
            self.next_sample = self.next_sample.min(now + resample_soon(s));
        }
        if !r.refreshed.is_empty() {
            self.verify = Some((r.refreshed, r.budget_cut));
        }
        self.next_scan = now;
        if r.budget_cut {
            // Degraded (budget): the rest the next UTC day.
            let t = next_utc_day();
            self.budget_until = Some(t);
            self.refresh_not_before = t;
            tracing::info!("daily budget spent: the rest of the plan continues the next UTC day");
        }
    }

    /// The request is done: what it did, for `now --wait`.
    fn answer(&mut self, cell: &DriveCell) {
        let mut st = cell.lock();
        st.last_request = Some(request_outcome(&st, self.req, self.req_round.as_ref()));
        st.last_request_round = self.req_round.take();
        st.pending = None;
        st.completed = st.requests;
        self.req = Request::default();
    }
}
