//! One refresh round of a drive: plan from the database, take a permit
//! (given back on every path), start the drive's engine, and send it the
//! planned files one by one, resolved beneath their trees by identity,
//! checkpointing progress and counting outcomes.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::config::Settings;
use crate::coordination::Ticket;
use crate::engine::{Engine, EngineConfig};
use crate::inventory::{self, FileRecord, Store};
use crate::policy::{self, Plan, PlanRules};

use super::shared::{DriveCell, Progress, RoundSummary, Shared};
use super::targets::Roots;

/// What a round did.
#[derive(Debug, Default)]
pub struct RoundResult {
    /// It went through the whole plan (not stopped, paused or failed to
    /// start).
    pub finished: bool,
    /// The files it refreshed (measured next, to see whether it helped).
    pub refreshed: Vec<FileRecord>,
    /// A planned file was not the inventory's any more (replaced, gone,
    /// behind a symlink): the trees must be rescanned.
    pub rescan: bool,
    /// The daily budget left stale files for another day.
    pub budget_cut: bool,
    /// The fleet slot was lost (etcd unreachable, lease expired): stopped
    /// after the in-flight I/O, checkpointed.
    pub slot_lost: bool,
    /// The health gate said no between files (why).
    pub gate_failed: Option<String>,
    /// The maintenance window closed between files.
    pub left_window: bool,
    /// It held a fleet slot but the host had no room (another drive took
    /// the permit first): the slot goes back.
    pub host_busy: bool,
    /// What it did, file by file, counted (also when it stopped early).
    pub summary: RoundSummary,
}

use file::slot_proven;
#[cfg(test)]
use file::IGNORE_LOST_SLOT;

/// How often a file another process interrupted is tried again in one
/// round, and the pause before a retry when nothing else is left.
const MAX_RETRIES: u32 = 2;
const RETRY_PAUSE: Duration = Duration::from_secs(2);

/// Waits `d`, or less when `stop` says so; true when it waited it out.
fn pause(d: Duration, mut stop: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if stop() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

/// Why a round stops between files (`None`: it goes on).
fn must_stop(
    shared: &Shared,
    cell: &DriveCell,
    s: &Settings,
    ticket: Option<&Ticket>,
    result: &mut RoundResult,
) -> Option<&'static str> {
    if shared.stopping() {
        return Some("the daemon is stopping");
    }
    if cell.paused.load(Ordering::Relaxed) {
        return Some("paused");
    }
    if !slot_proven(ticket) {
        tracing::warn!("the fleet slot is not held any more: the refresh stops here");
        result.slot_lost = true;
        return Some("the fleet slot was lost");
    }
    if !s.window.contains(crate::clock::local_minute()) {
        tracing::info!("the maintenance window closed: the refresh stops here");
        result.left_window = true;
        return Some("the maintenance window closed");
    }
    if let Some(fleet) = shared.fleet.as_ref().filter(|_| ticket.is_some()) {
        if let Err(why) = crate::coordination::gate::check(&fleet.cfg) {
            tracing::warn!("health gate: {why}; the refresh stops here and gives its slot back");
            result.gate_failed = Some(why.to_string());
            return Some("the health gate said no");
        }
    }
    None
}

/// What the drive's inventory says now, from one pass over its records:
/// every file counted, the stale ones, and the plan made of them. Status,
/// `plan`, the metrics and a round all take it from here, so they never
/// disagree (the plan leaves out, and counts, the stale files refreshed
/// within `min_interval` and those beyond the daily budget).
#[derive(Debug, Default)]
pub(super) struct Stock {
    pub files: u64,
    pub stale_files: u64,
    pub stale_bytes: u64,
    /// Files with a timestamp from a wrong clock (in the future).
    pub wrong_clock: u64,
    pub plan: Plan,
    /// The plan's records, in plan order.
    pub records: Vec<FileRecord>,
    /// The inventory could not be read (whatever was read is counted).
    pub error: Option<String>,
}

pub(super) fn take_stock(
    cell: &DriveCell,
    store: &Store,
    s: &Settings,
    forced: bool,
    only: Option<&Path>,
) -> Stock {
    let now = inventory::now_secs();
    let budget_left = cell.lock().today.left(now, s.daily_budget);
    let mut stock = Stock::default();
    // Streamed: only stale files (the plan's candidates) are kept.
    let mut candidates = vec![];
    for root in &cell.roots {
        let streamed = store.for_each_file(root, &mut |f| {
            stock.files += 1;
            stock.wrong_clock += u64::from(f.from_a_wrong_clock(now));
            if f.data_age(now) < s.stale_after || f.alloc == 0 {
                return;
            }
            stock.stale_files += 1;
            stock.stale_bytes += f.data_bytes();
            if only.is_none_or(|p| f.path.starts_with(p)) {
                candidates.push(f);
            }
        });
        if let Err(e) = streamed {
            tracing::warn!("{e}");
            stock.error = Some(e.to_string());
        }
    }
    let rules = PlanRules {
        now,
        stale_after: s.stale_after,
        min_interval: if forced {
            Duration::ZERO
        } else {
            s.min_interval
        },
        budget_left,
    };
    (stock.plan, stock.records) = policy::plan_records(candidates, rules);
    stock
}

/// Refreshes the drive's plan; with `[coordination]`, only while
/// `ticket` holds the drive's fleet slot.
pub fn run(
    shared: &Shared,
    cell: &DriveCell,
    store: &Store,
    s: &Settings,
    forced: bool,
    only: Option<&Path>,
    ticket: Option<&Ticket>,
) -> RoundResult {
    if shared.fleet.is_some() && ticket.is_none() {
        // Never a refresh without a slot.
        return RoundResult {
            slot_lost: true,
            ..RoundResult::default()
        };
    }
    let Stock { plan, records, .. } = take_stock(cell, store, s, forced, only);
    cell.lock().plan = plan.clone();
    let budget_cut = plan.deferred_budget > 0;
    if plan.files.is_empty() {
        return RoundResult {
            finished: true,
            budget_cut,
            summary: RoundSummary {
                ended: inventory::now_secs(),
                forced,
                finished: true,
                ..RoundSummary::default()
            },
            ..RoundResult::default()
        };
    }
    let stop = || shared.stopping() || cell.paused.load(Ordering::Relaxed) || !slot_proven(ticket);
    let cfg = shared.config();
    let controller = shared.controller_permits(&cell.controller);
    let per_controller = cfg.max_active_per_controller.unwrap_or(usize::MAX);
    // Holding a fleet slot, never wait for the host: give the slot back
    // (the other copies of the data may use it) and queue again once the
    // host has room.
    let permits = if ticket.is_some() {
        let host = shared.permits.try_acquire(cfg.max_active_drives);
        let ctl = host
            .as_ref()
            .and_then(|_| controller.try_acquire(per_controller));
        host.zip(ctl)
    } else {
        let host = shared.permits.acquire(cfg.max_active_drives, &stop);
        let ctl = host
            .as_ref()
            .and_then(|_| controller.acquire(per_controller, &stop));
        host.zip(ctl)
    };
    let Some(_permits) = permits else {
        return RoundResult {
            host_busy: ticket.is_some(),
            ..RoundResult::default()
        };
    };
    cell.cancel.store(false, Ordering::Relaxed);
    let mut result = RoundResult {
        budget_cut,
        ..RoundResult::default()
    };
    let engine = match Engine::start(EngineConfig {
        min_free: Some(s.min_free),
        cancel: cell.cancel.clone(),
        strategy: s.strategy,
        journal: Some(shared.journal.clone()),
        pace: s.pace(),
        pace_status: cell.pace.clone(),
        ..EngineConfig::default()
    }) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("starting the engine: {e}");
            cell.lock().error = Some(e.to_string());
            return RoundResult::default();
        }
    };
    shared.set_backend(engine.backend().name());
    let dev = super::metrics::Dev {
        device: cell.label.clone(),
    };
    shared.metrics.in_progress.get_or_create(&dev).set(1);
    let mut round = Round {
        shared,
        cell,
        store,
        ticket,
        started: Instant::now(),
        progress: Progress {
            files_total: plan.files.len() as u64,
            bytes_total: plan.bytes,
            started: inventory::now_secs(),
            forced,
            ..Progress::default()
        },
        refreshed: vec![],
        rescan: false,
        summary: RoundSummary {
            forced,
            planned: plan.files.len() as u64,
            planned_bytes: plan.bytes,
            ..RoundSummary::default()
        },
    };
    cell.lock().refresh = Some(round.progress.clone());
    tracing::info!(
        files = plan.files.len(),
        bytes = plan.bytes,
        forced,
        "refresh starts"
    );
    let roots = Roots::open(&cell.roots);
    let mut finished = true;
    // A file another process interrupts goes to the back of the round and
    // is tried again after the others (after a pause when only such files
    // are left): a busy file never holds up the rest of the drive.
    let mut queue: VecDeque<(usize, u32)> = (0..records.len()).map(|i| (i, 0)).collect();
    while let Some((i, tries)) = queue.pop_front() {
        if let Some(why) = must_stop(shared, cell, s, ticket, &mut result) {
            round.summary.stopped = Some(why.into());
            finished = false;
            break;
        }
        if tries > 0 && queue.iter().all(|&(_, t)| t > 0) {
            let stop = || must_stop(shared, cell, s, ticket, &mut RoundResult::default()).is_some();
            if !pause(RETRY_PAUSE * tries, stop) {
                continue; // stopping: the next turn says why
            }
        }
        match round.file(&engine, &roots, &records[i], tries < MAX_RETRIES) {
            Next::Go => {}
            Next::Retry => queue.push_back((i, tries + 1)),
            Next::Stop => {
                // A file stopped by the round's own cancel: the round says
                // why it was cancelled (paused, stopping, slot lost…).
                if let Some(why) = must_stop(shared, cell, s, ticket, &mut result) {
                    round.summary.stopped = Some(why.into());
                }
                finished = false;
                break;
            }
        }
    }
    drop(engine);
    shared.metrics.in_progress.get_or_create(&dev).set(0);
    let end = inventory::now_secs();
    if finished {
        shared.metrics.last_refresh.get_or_create(&dev).set(end);
    }
    round.summary.ended = end;
    round.summary.finished = finished;
    let mut st = cell.lock();
    st.refresh = None;
    st.last_round = Some(round.summary.clone());
    if finished {
        st.last_refresh = Some(end);
        // Done: the plan shown is the next scan's, not this one's.
        st.plan = Default::default();
    }
    drop(st);
    let sm = &round.summary;
    tracing::info!(
        finished,
        planned = sm.planned,
        refreshed = sm.refreshed,
        skipped = sm.skipped,
        interrupted = sm.interrupted,
        failed = sm.failed,
        bytes = sm.bytes,
        stopped = sm.stopped.as_deref().unwrap_or(""),
        "refresh ends"
    );
    // A slot lost mid-file shows as an interrupted file.
    result.slot_lost |= !slot_proven(ticket);
    RoundResult {
        finished,
        refreshed: round.refreshed,
        rescan: round.rescan,
        summary: round.summary,
        ..result
    }
}

#[cfg(test)]
#[path = "round_tests.rs"]
mod tests;

mod file;
use file::{Next, Round};
