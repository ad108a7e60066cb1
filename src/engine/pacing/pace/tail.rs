//! The application's tail where the drive serves it: its reads timed one
//! by one ([`crate::io::block_reads`]), their p99 learned alone as the
//! mean is and compared at each decision: shown to the operator beside
//! the mean, and a guard on the mean's law. In the matrix the drive's
//! p99 and a QD1, QD8 or bursty reader's p99 were on the same side of
//! 1.2× alone in 124 of 135 runs; an mmap reader's in 38 of 45, and of
//! the 26 runs with the drive's p99 within 1.2× its p99 was over in 7 (a
//! 16 KiB touch is several reads: its p99 sees the drive's p99.9). The
//! counters' mean saw neither (docs/benchmarks.md, "The drive's reads,
//! timed one by one").
//!
//! **The p99 alone** is taken over the reads of the last [`POOLED`]
//! learnings together, not one's: a quantile needs far more reads than
//! a mean to settle (of 250 reads, its p99 is the third slowest), and
//! one learning counts 300 ms of them; learned in one learning it was
//! 0.90–1.63× the idle run's p99 (same file, "Weighing the tail across
//! windows"). A learning whose mean alone moved by more than
//! [`CHANGED`] from the one before (the application changed what it
//! does: another queue depth, another read size) starts the pool again.
//!
//! **The guard** ([`Says`]). The mean's law steers; the tail only stops
//! it. A window's p99 over [`TARGET`] its p99 alone holds the rate (no
//! growth, and a rate or depth on trial goes back); over [`FAR_OVER`]
//! after a window over [`TARGET`], the rate is cut by a quarter and one
//! request goes in flight. Why a guard and not a law: beside a QD1
//! reader on a loop device, 70 s runs, the mean's law read 1.04× and
//! went to the configured 50 MiB/s, where the window's p99 sat at
//! 2.5–3.4× for a minute (the reader's 2.61×; a fixed 8 MiB/s 1.00×),
//! and on loop-mq-deadline · QD8 its windows read 1.0–1.27× at 4–12
//! MiB/s and 1.47–2.07× at 18–50: the tail over by far is steady, and
//! seen. Over by a little it is noise as often (the same fixed rate's
//! p99 spread by up to 0.18 over three runs), and the two laws that
//! steered on it lost the rate to that noise: one that cut at 1.15× a
//! window's p99 held the loop devices' QD1 and QD8 readers at 5.7–7.5
//! MiB/s, under the best fixed rates; one that weighed the reads over
//! 1.2× across windows was decided by the p99 learned in one learning
//! (same file, "Steering on the drive's p99", "Weighing the tail across
//! windows"). Held, a window over by noise costs a half second's
//! growth, and a trial it sends back [`TRIALS_AFTER`] of trials (not
//! the 30 s to the next learning a mean that cost sets); cut, two
//! windows in a row cost a quarter. Between [`TARGET`] and [`FAR_OVER`]
//! the rate holds and is not cut: a tail steady at 1.4× stays there
//! (in 70 s runs on the loop devices, 1.16–1.48×; docs/benchmarks.md).
//! A window over also ends the start from the floor, as the mean's
//! notice does.

use std::collections::VecDeque;
use std::time::Duration;

use crate::io::block_reads::Histogram;

/// The application's latency, mean and p99, may be this many times its
/// latency alone.
pub const TARGET: f64 = 1.2;

/// Fewer of the application's reads than this in a window: no p99 (of
/// 200 it is the third slowest).
pub const MIN_READS: u64 = 200;

/// Learnings whose reads alone are pooled: at one every
/// [`super::RELEARN`] while the application keeps reading, the last
/// minute and a half or more.
pub const POOLED: usize = 4;

/// A mean alone this many times the one before, or less than its
/// inverse: the application changed, its old tail is not its own any
/// more (a mean learned twice of the same reader moves by a few per
/// cent).
pub const CHANGED: f64 = 1.25;

/// A window's p99 this many times its p99 alone, after a window over
/// [`TARGET`]: the rate is cut by [`CUT`].
pub const FAR_OVER: f64 = 1.5;
/// The cut for a tail [`FAR_OVER`]: a quarter.
pub const CUT: f64 = 0.75;

/// After a trial the tail alone sent back, no more trials for this long
/// (one the mean sent back: none until the latency is learned again).
/// A window just over is noise as often, and must not hold the rate for
/// the 30 s until the next learning; a trial that truly costs the tail
/// is then over in one window of ten, not every other one.
pub const TRIALS_AFTER: Duration = Duration::from_secs(5);

/// What the tail says at a decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Says {
    /// Within [`TARGET`] its p99 alone, or not known: the mean decides.
    #[default]
    Within,
    /// Over [`TARGET`]: the rate holds, a trial goes back.
    Over,
    /// Over [`FAR_OVER`], and over [`TARGET`] the window before: cut.
    FarOver,
}

#[derive(Debug, Default)]
pub struct Tail {
    /// The counts when learning started.
    learning_from: Option<Histogram>,
    /// The last learnings' reads alone, the newest last.
    pool: VecDeque<Histogram>,
    /// The application's p99 at the drive, alone: of the pool.
    alone: Option<Duration>,
    /// The counts when the window started (the last decision).
    since: Option<Histogram>,
    /// The last window's p99 over `alone`.
    now: Option<f64>,
    /// What it said of the last window.
    says: Says,
}

impl Tail {
    /// Learning starts, once our last requests are done (the tick the
    /// mean skips): `counts`, the drive's so far (`None`: its reads are
    /// not timed).
    pub fn start_learning(&mut self, counts: Option<Histogram>) {
        self.learning_from = counts;
        self.now = None;
    }

    /// Learning ends: what it timed joins the pool (after the pool is
    /// emptied if the application `changed`), and the p99 alone is the
    /// pool's, if it holds enough reads (else the one before stands, as
    /// the mean's does, unless the application changed); the first
    /// window starts.
    pub fn learned(&mut self, counts: Option<Histogram>, changed: bool) {
        if changed {
            self.pool.clear();
            self.alone = None;
        }
        if let (Some(from), Some(c)) = (self.learning_from.take(), counts.as_ref()) {
            let this = c.since(&from);
            let this_p99 = this.quantile(0.99);
            if this.reads() > 0 {
                if self.pool.len() == POOLED {
                    self.pool.pop_front();
                }
                self.pool.push_back(this);
            }
            let pooled = self
                .pool
                .iter()
                .fold(Histogram::default(), |sum, h| sum.plus(h));
            if pooled.reads() >= MIN_READS {
                self.alone = pooled.quantile(0.99);
            }
            tracing::debug!(
                this_p99_ms = this_p99.map(|d| d.as_secs_f64() * 1e3),
                pooled_p99_ms = self.alone.map(|d| d.as_secs_f64() * 1e3),
                pooled_reads = pooled.reads(),
                learnings = self.pool.len(),
                changed,
                "learned the application's p99 at the drive alone"
            );
        }
        self.restart(counts);
    }

    /// A new window from `counts` (after a pause: what ran at the
    /// configured rate is not the window's).
    pub fn restart(&mut self, counts: Option<Histogram>) {
        self.since = counts;
        self.now = None;
        self.says = Says::Within;
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
        let over_before = self.says != Says::Within;
        self.says = match self.now {
            Some(r) if r > FAR_OVER && over_before => Says::FarOver,
            Some(r) if r > TARGET => Says::Over,
            _ => Says::Within,
        };
        self.since = counts;
        self.now
    }

    /// What the tail said of the last window.
    pub fn says(&self) -> Says {
        self.says
    }

    /// Not sharing any more: nothing to show, nothing said (what was
    /// learned stands).
    pub fn stop_showing(&mut self) {
        self.now = None;
        self.says = Says::Within;
    }

    /// For the operator: the last window's p99 at the drive against the
    /// one alone, and what that did (`at_floor`: the rate is the floor's).
    pub fn shown(&self, at_floor: bool) -> Option<String> {
        let (ratio, alone) = (self.now?, self.alone?);
        let why = match self.says {
            Says::Within => String::new(),
            Says::Over => format!(" (over {TARGET}×: not growing)"),
            Says::FarOver if at_floor => {
                format!(" (over {FAR_OVER}×, held at the floor: progress is a promise)")
            }
            Says::FarOver => format!(" (over {FAR_OVER}×: slowing down)"),
        };
        Some(format!(
            "; p99 at the drive {ratio:.2}× its {:.3} ms alone{why}",
            alone.as_secs_f64() * 1e3
        ))
    }
}
