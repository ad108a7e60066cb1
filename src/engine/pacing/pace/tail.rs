//! The application's tail where the drive serves it: its reads timed one
//! by one ([`crate::io::block_reads`]), their p99 learned alone as the
//! mean is and compared at each decision: shown to the operator beside
//! the mean, not steered on (see the parent module). In the matrix the
//! drive's p99 and a QD1, QD8 or bursty reader's p99 were on the same
//! side of 1.2× alone in 124 of 135 runs; an mmap reader's in 38 of 45,
//! and of the 26 runs with the drive's p99 within 1.2× its p99 was over
//! in 7 (a 16 KiB touch is several reads: its p99 sees the drive's
//! p99.9). The counters' mean saw neither (docs/benchmarks.md, "The drive's reads,
//! timed one by one"). Two laws on it were tried and not kept: a cut at
//! 1.15× a window's p99 lost the rate to a half second's noise; the
//! share of reads over 1.2× the p99 alone, weighed across windows, was
//! decided by that p99, learned in one learning at 0.90–1.63× the idle
//! run's (same file, "Weighing the tail across windows").

use std::time::Duration;

use crate::io::block_reads::Histogram;

/// Fewer of the application's reads than this in a window: no p99 (of
/// 200 it is the third slowest).
pub const MIN_READS: u64 = 200;

#[derive(Debug, Default)]
pub struct Tail {
    /// The counts when learning started.
    learning_from: Option<Histogram>,
    /// The application's p99 at the drive, alone.
    alone: Option<Duration>,
    /// The counts when the window started (the last decision).
    since: Option<Histogram>,
    /// The last window's p99 over `alone`.
    now: Option<f64>,
}

impl Tail {
    /// Learning starts, once our last requests are done (the tick the
    /// mean skips): `counts`, the drive's so far (`None`: its reads are
    /// not timed).
    pub fn start_learning(&mut self, counts: Option<Histogram>) {
        self.learning_from = counts;
        self.now = None;
    }

    /// Learning ends: the p99 of what it timed, if enough (else the one
    /// learned before stands, as the mean's does); the first window
    /// starts.
    pub fn learned(&mut self, counts: Option<Histogram>) {
        if let (Some(from), Some(c)) = (self.learning_from.take(), counts.as_ref()) {
            let alone = c.since(&from);
            if alone.reads() >= MIN_READS {
                self.alone = alone.quantile(0.99);
            }
        }
        self.restart(counts);
    }

    /// A new window from `counts` (after a pause: what ran at the
    /// configured rate is not the window's).
    pub fn restart(&mut self, counts: Option<Histogram>) {
        self.since = counts;
        self.now = None;
    }

    /// A decision: the window's p99 over the one alone, when both are
    /// known; the next window starts.
    pub fn decide(&mut self, counts: Option<Histogram>) -> Option<f64> {
        let window = match (self.since.as_ref(), counts.as_ref()) {
            (Some(since), Some(c)) => Some(c.since(since)),
            _ => None,
        };
        self.now = window
            .filter(|w| w.reads() >= MIN_READS)
            .and_then(|w| w.quantile(0.99))
            .zip(self.alone)
            .map(|(p99, alone)| p99.as_secs_f64() / alone.as_secs_f64());
        self.since = counts;
        self.now
    }

    /// Not sharing any more: nothing to show (what was learned stands).
    pub fn stop_showing(&mut self) {
        self.now = None;
    }

    /// For the operator: the last window's p99 at the drive against the
    /// one alone.
    pub fn shown(&self) -> Option<String> {
        let (ratio, alone) = (self.now?, self.alone?);
        Some(format!(
            "; p99 at the drive {ratio:.2}× its {:.3} ms alone",
            alone.as_secs_f64() * 1e3
        ))
    }
}
