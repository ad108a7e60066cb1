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
//! windows in a row cost a quarter. A window over also ends the start
//! from the floor, as the mean's notice does.
//!
//! **Over by a little, steadily** ([`Says::SpanOver`]). One window's p99
//! is noise; the p99 of the last [`SPAN`] windows together (5 s, 2,000
//! reads or more: of 3,000 its twentieth slowest) is not. Over
//! [`TARGET`] the rate is cut in proportion ([`TARGET`] / that ratio,
//! within [`CUT`]..[`SPAN_CUT_LEAST`]), the span starts again at the
//! rate it left, and the rate grows (by the mean's law, or on trial) no
//! further than where the cut left it: that ceiling rises by [`CEILING_RISE`] at each learning (every
//! 30 s), and goes when the application changes ([`CHANGED`]). Without
//! it the guard held a tail between [`TARGET`] and [`FAR_OVER`] for
//! good: in 70 s runs on the loop devices the p99 sat at 1.16–1.48×
//! idle; with it, 1.16–1.29× (docs/benchmarks.md, "The tail over a span
//! of windows"). One window over in ten (2 % of its reads slow) is 0.2 %
//! of the span's: no cut. The cut before, a window's p99 over 1.15×, was
//! the noise of one window; the weighing before, read by read, was of a
//! p99 alone learned once (both in benchmarks.md). A cut for a tail
//! [`FAR_OVER`] sets the ceiling too.

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

/// The last this many windows (5 s at one decision every
/// [`super::DECIDE`]) are weighed together: their p99 over [`TARGET`]
/// is a tail over by a little, steadily, not a window's noise.
pub const SPAN: usize = 10;
/// Fewer of the application's reads than this in the [`SPAN`]: no say
/// (its p99 is the twentieth slowest).
pub const SPAN_READS: u64 = 2_000;
/// The cut for a span over [`TARGET`]: in proportion ([`TARGET`] / its
/// p99 over the one alone), at least this...
pub const SPAN_CUT_LEAST: f64 = 0.95;
/// ...and at most [`CUT`].
const _: () = assert!(CUT < SPAN_CUT_LEAST);
/// After a cut on the tail the rate grows no further than where the cut
/// put it; that bound rises by this at each learning (every
/// [`super::RELEARN`]), so the refresh tries for more, slowly, where the
/// application's tail may have room again.
pub const CEILING_RISE: f64 = 1.1;

/// After a trial the tail alone sent back, no more trials for this long
/// (one the mean sent back: none until the latency is learned again).
/// A window just over is noise as often, and must not hold the rate for
/// the 30 s until the next learning; a trial that truly costs the tail
/// is then over in one window of ten, not every other one.
pub const TRIALS_AFTER: Duration = Duration::from_secs(5);

/// What the tail says at a decision.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Says {
    /// Within [`TARGET`] its p99 alone, or not known: the mean decides.
    #[default]
    Within,
    /// Over [`TARGET`]: the rate holds, a trial goes back.
    Over,
    /// Over [`FAR_OVER`], and over [`TARGET`] the window before: cut.
    FarOver,
    /// The last [`SPAN`] windows together over [`TARGET`]: cut, in
    /// proportion (the p99 over the span, its ratio to the one alone).
    SpanOver(f64),
}

impl Says {
    /// The tail's cut of the rate (1: none).
    pub fn cut(self) -> f64 {
        match self {
            Says::Within | Says::Over => 1.0,
            Says::FarOver => CUT,
            Says::SpanOver(ratio) => (TARGET / ratio).clamp(CUT, SPAN_CUT_LEAST),
        }
    }
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
    /// The last [`SPAN`] windows' reads, the newest last (since the last
    /// cut on the tail: the evidence is of the rate it left).
    span: VecDeque<Histogram>,
    /// The rate the refresh grows no further than: where the last cut on
    /// the tail left it, risen since by [`CEILING_RISE`] a learning.
    ceiling: Option<f64>,
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
            // Another application: what its tail taught is not its own.
            self.pool.clear();
            self.alone = None;
            self.span.clear();
            self.ceiling = None;
        }
        self.ceiling = self.ceiling.map(|c| c * CEILING_RISE);
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
            .as_ref()
            .filter(|w| w.reads() >= MIN_READS)
            .and_then(|w| w.quantile(0.99))
            .zip(self.alone)
            .map(|(p99, alone)| p99.as_secs_f64() / alone.as_secs_f64());
        let over_before = self.says != Says::Within;
        let span = window.and_then(|w| self.span_over(w));
        self.says = match (self.now, span) {
            (Some(r), _) if r > FAR_OVER && over_before => Says::FarOver,
            (_, Some(r)) if r > TARGET => Says::SpanOver(r),
            (Some(r), _) if r > TARGET => Says::Over,
            _ => Says::Within,
        };
        self.since = counts;
        self.now
    }

    /// The window's reads join the span; once it is [`SPAN`] windows of
    /// [`SPAN_READS`] or more, its p99 over the one alone.
    fn span_over(&mut self, window: Histogram) -> Option<f64> {
        if self.span.len() == SPAN {
            self.span.pop_front();
        }
        self.span.push_back(window);
        if self.span.len() < SPAN {
            return None;
        }
        let all = self
            .span
            .iter()
            .fold(Histogram::default(), |sum, h| sum.plus(h));
        let p99 = all.quantile(0.99).filter(|_| all.reads() >= SPAN_READS)?;
        Some(p99.as_secs_f64() / self.alone?.as_secs_f64())
    }

    /// The rate was cut on the tail to `rate`: it grows no further (see
    /// [`CEILING_RISE`]), and the next span is of the rate it left.
    pub fn cut_to(&mut self, rate: f64) {
        self.ceiling = Some(rate);
        self.span.clear();
    }

    /// The rate the refresh grows no further than, if the tail set one.
    pub fn ceiling(&self) -> Option<f64> {
        self.ceiling
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
        // From the floor up again: the span's windows were of a rate that
        // is gone (the ceiling, of the same application, stands).
        self.span.clear();
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
            Says::SpanOver(r) if at_floor => {
                format!(" ({r:.2}× over {SPAN} windows, held at the floor: progress is a promise)")
            }
            Says::SpanOver(r) => format!(" ({r:.2}× over {SPAN} windows: slowing down)"),
        };
        let ceiling = match self.ceiling {
            Some(c) if !at_floor => format!(
                "; grows to {:.1} MiB/s at most, where its tail last went over",
                c / f64::from(1 << 20)
            ),
            _ => String::new(),
        };
        Some(format!(
            "; p99 at the drive {ratio:.2}× its {:.3} ms alone{why}{ceiling}",
            alone.as_secs_f64() * 1e3
        ))
    }
}
