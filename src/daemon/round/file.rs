//! One file of a round: resolve it beneath its tree, send it to the
//! engine, checkpoint while it runs, and settle its outcome — the record,
//! the checkpoint, the counts, the log line. An interruption by another
//! process is tried again later in the round; only a final outcome is
//! counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::coordination::Ticket;
use crate::engine::report::{FailKind, Interruption};
use crate::engine::{Engine, FileReport, Outcome, SkipReason};
use crate::inventory::{self, FileRecord, Store};
use crate::pathtext::Log;
use crate::protocol::replies::FileProblem;

use super::super::shared::{DriveCell, Progress, RoundSummary, Shared};
use super::super::targets::Roots;

/// What the round does after a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    Go,
    /// Another process interrupted it: to the back of the round.
    Retry,
    /// Stop the round (pause, shutdown, a lost slot).
    Stop,
}

/// The round's running state.
pub(super) struct Round<'a> {
    pub shared: &'a Shared,
    pub cell: &'a DriveCell,
    pub store: &'a Store,
    pub ticket: Option<&'a Ticket>,
    pub started: Instant,
    pub progress: Progress,
    pub refreshed: Vec<FileRecord>,
    pub rescan: bool,
    pub summary: RoundSummary,
}

impl Round<'_> {
    /// One file; `may_retry`: an interruption by another process may send
    /// it to the back of the round (else it stays interrupted, for the
    /// next round).
    pub fn file(
        &mut self,
        engine: &Engine,
        roots: &Roots,
        rec: &FileRecord,
        may_retry: bool,
    ) -> Next {
        let skip = self.store.resume_point(rec).unwrap_or(0);
        if skip > 0 {
            tracing::info!(path = %Log(&rec.path), skip, "resuming from checkpoint");
        }
        let Some(target) = roots.target(rec) else {
            tracing::warn!(path = %Log(&rec.path), "not beneath an open tree; skipped");
            return Next::Go;
        };
        let done = Arc::new(AtomicU64::new(0));
        let d2 = done.clone();
        let rx = engine.submit_resuming(
            target,
            skip,
            Some(Box::new(move |n| {
                d2.fetch_add(n, Ordering::Relaxed);
            })),
        );
        let base = self.progress.bytes_done;
        let report = self.wait(rec, &rx, &done, base, skip);
        self.shared.metrics.record_report(&self.cell.label, &report);
        // Real bytes, not the plan's: what was rewritten.
        self.progress.bytes_done = base + done.load(Ordering::Relaxed);
        self.summary.bytes += report.bytes_refreshed;
        let next = self.settle(rec, &report, skip + done.load(Ordering::Relaxed), may_retry);
        if next != Next::Retry {
            self.progress.files_done += 1;
        }
        self.cell.lock().refresh = Some(self.progress.clone());
        next
    }

    /// Waits for the file's report, checkpointing progress (twice a second
    /// at most) and updating the status meanwhile.
    fn wait(
        &self,
        rec: &FileRecord,
        rx: &Receiver<FileReport>,
        done: &AtomicU64,
        base: u64,
        skip: u64,
    ) -> FileReport {
        let mut last_saved = skip;
        loop {
            match rx.recv_timeout(Duration::from_millis(500)) {
                Ok(r) => return r,
                Err(RecvTimeoutError::Timeout) => {
                    if !slot_proven(self.ticket) {
                        // The slot cannot be proven held (even if the
                        // session has not said so yet): stop the file.
                        self.cell.cancel.store(true, Ordering::Relaxed);
                    }
                    let d = skip + done.load(Ordering::Relaxed);
                    if d > last_saved {
                        if let Err(e) = self.store.save_checkpoint(rec, d) {
                            tracing::warn!(path = %Log(&rec.path), "saving the checkpoint: {e}");
                        }
                        last_saved = d;
                    }
                    self.show_progress(base + done.load(Ordering::Relaxed));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return FileReport::new(
                        rec.path.clone(),
                        Outcome::failed(FailKind::Internal, "the I/O thread stopped"),
                    )
                }
            }
        }
    }

    fn show_progress(&self, bytes_done: u64) {
        let mut st = self.cell.lock();
        if let Some(p) = st.refresh.as_mut() {
            p.bytes_done = bytes_done;
            let el = self.started.elapsed().as_secs_f64();
            // After 10 s, from the average rate so far, smoothed
            // (yielding makes the rate swing): a steady ETA.
            if p.bytes_done > 0 && el > 10.0 {
                let rate = p.bytes_done as f64 / el;
                let raw = p.bytes_total.saturating_sub(p.bytes_done) as f64 / rate;
                p.eta_seconds = Some(match p.eta_seconds {
                    Some(e) => 0.8 * (e - 0.5).max(0.0) + 0.2 * raw,
                    None => raw,
                });
            }
        }
    }

    /// Records the outcome. A checkpoint survives only an interruption (to
    /// resume the same file).
    fn settle(
        &mut self,
        rec: &FileRecord,
        report: &FileReport,
        done: u64,
        may_retry: bool,
    ) -> Next {
        let store = self.store;
        let path = Log(&rec.path);
        let kept = |r: Result<(), inventory::StoreError>| {
            if let Err(e) = r {
                tracing::warn!(path = %path, "the state database: {e}");
            }
        };
        match &report.outcome {
            Outcome::Refreshed => {
                kept(store.clear_checkpoint(rec.key()));
                let now = inventory::now_secs();
                kept(
                    store
                        .mark_refreshed(rec.key(), now, report.generation)
                        .map(drop),
                );
                self.cell.lock().today.spend(now, report.bytes_refreshed);
                self.refreshed.push(rec.clone());
                self.summary.refreshed += 1;
                let times = report.times_left.as_deref().unwrap_or("");
                tracing::info!(path = %path, bytes = report.bytes_refreshed, strategy = report.strategy, times, "refreshed");
            }
            Outcome::Interrupted { reason, cause, .. } => {
                kept(store.save_checkpoint(rec, done));
                let again = *cause != Interruption::Cancelled && may_retry;
                tracing::info!(path = %path, done, %reason, again, "interrupted; checkpointed");
                if again {
                    return Next::Retry;
                }
                self.summary.interrupted += 1;
                if *cause == Interruption::Cancelled {
                    self.summary.stopped = Some(format!("interrupted: {reason}"));
                    return Next::Stop;
                }
            }
            Outcome::Skipped { reason, detail } => {
                kept(store.clear_checkpoint(rec.key()));
                if matches!(
                    reason,
                    SkipReason::Replaced | SkipReason::Vanished | SkipReason::Symlink
                ) {
                    self.rescan = true;
                }
                self.summary.skipped += 1;
                tracing::info!(path = %path, reason = reason.as_str(), %detail, "skipped");
            }
            Outcome::Failed { reason, .. } => {
                kept(store.clear_checkpoint(rec.key()));
                self.summary.failed += 1;
                if self.summary.failures.len() < RoundSummary::KEEP {
                    self.summary.failures.push(FileProblem {
                        path: crate::pathtext::text(&rec.path),
                        reason: reason.clone(),
                    });
                }
                tracing::warn!(path = %path, %reason, "failed");
            }
            Outcome::WouldRefresh => {}
        }
        Next::Go
    }
}

#[cfg(test)]
thread_local! {
    /// Test switch: go on refreshing after the fleet slot can no longer be
    /// proven (what the guard below prevents).
    pub(super) static IGNORE_LOST_SLOT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the round may go on under `ticket` (no fleet: always).
pub(super) fn slot_proven(ticket: Option<&Ticket>) -> bool {
    #[cfg(test)]
    if IGNORE_LOST_SLOT.with(std::cell::Cell::get) {
        return true;
    }
    ticket.is_none_or(Ticket::holds)
}
