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
//! windows"). While the pool is young (one to three learnings that
//! timed reads) it is learned again every [`super::RELEARN_SOON`], not
//! [`super::RELEARN`]: full in 30 s, not 90 (in 70 s runs on the loop
//! devices a learning's p99 alone was 0.76–1.45× the idle run's, the
//! pool of three 0.83–1.20×). A learning whose mean alone moved by more
//! than [`CHANGED`] from the one before (the application changed what
//! it does: another queue depth, another read size) starts the pool
//! again. At most `POOLED - 1` learnings come soon until the pool is
//! full again: an application that changes at every learning is learned
//! every [`super::RELEARN`] after its first three, and one that changes
//! while its pool is young is hurried no further than what was left.
//!
//! **The guard** ([`Says`]). The mean's law steers; the tail stops it,
//! and cuts it where the tail is over for sure. A window's p99 over
//! [`TARGET`] its p99 alone holds the rate (no growth, and a rate or
//! depth on trial goes back); over [`FAR_OVER`] after a window over
//! [`TARGET`], the rate is cut by a quarter and one request goes in
//! flight. Why a guard and not a law: beside a QD1
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
//! **Over by a little, steadily** ([`Says::SpanOver`], [`steady`]).
//! One window's p99 is noise; the p99 of the last [`SPAN`] windows'
//! reads together (5 s, 2,000 reads or more) is the application's tail
//! over those 5 s: over [`SPAN_AIM`] (more than 1 % of the span's reads
//! slow, not one window's few; the aim below the target, as the mean's
//! is), the rate is cut to the mean of the rates the windows ran at
//! times [`SPAN_AIM`] / that ratio (0.75–0.95), one request in flight,
//! and the span starts again at the rate it left. A window that began
//! with a pause or a learning, or in which the floor was paid back above
//! the controller's rate, is not in a span: its reads queued behind what
//! was not the controller's rate. After a cut
//! on the tail (over the span, or [`FAR_OVER`]) the rate grows, by the
//! mean's law or on trial, no further than the cut: that ceiling rises
//! by [`steady::CEILING_RISE`] every 30 s of decisions, and goes when the
//! application changes ([`CHANGED`]) or the refresh leaves the drive to
//! it; a cut to the floor sets none (the floor is kept whatever the
//! tail says, and a ceiling there would only hold the refresh at it).
//! Without the span the guard held a tail between [`TARGET`] and
//! [`FAR_OVER`] for good: in 70 s runs on the loop devices the pacer's
//! windows read over 1.2× in 50–75 % of the windows after the first 10
//! s, and the reader's p99 sat at 1.16–1.48× idle (docs/benchmarks.md,
//! "The tail over a span of windows"). The law that cut at 1.15× a
//! window's p99 lost the rate to one window's noise; the weighing of
//! reads across windows, to a p99 alone learned once (both in
//! benchmarks.md): this one weighs 5 s of reads against the pool's.

pub mod steady;

use std::collections::VecDeque;
use std::time::Duration;

use crate::io::block_reads::Histogram;
pub use steady::SPAN;

/// The application's latency, mean and p99, may be this many times its
/// latency alone.
pub const TARGET: f64 = 1.2;

/// Fewer of the application's reads than this in a window: no p99 (of
/// 200 it is the third slowest).
pub const MIN_READS: u64 = 200;

/// Learnings whose reads alone are pooled: at one every
/// [`super::RELEARN`] while the application keeps reading, the last
/// minute and a half or more (the first 30 s, at one every
/// [`super::RELEARN_SOON`] until the pool is full).
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

/// What the span aims at: the last [`SPAN`] windows' p99 together over
/// this many times the p99 alone are cut for. Below the target, as the
/// mean's aim is, for what the p99 alone cannot know: the pool of four
/// learnings read 0.89–1.33× the idle run's p99 at the drive (two 70 s
/// runs on the loop devices, four cells each), and a QD1 reader's p99
/// read over the drive's (1.32× against 1.25× where the span aimed at
/// the target itself, loop-none · QD1). Inside the pool's own noise, so
/// a pool learned low cuts a tail that did not grow: 5 % every 5 s at
/// most, and the span never cuts under the floor.
pub const SPAN_AIM: f64 = 1.1;
const _: () = assert!(SPAN_AIM < TARGET);

/// The cut for the last [`SPAN`] windows together over [`SPAN_AIM`] is
/// in proportion ([`SPAN_AIM`] / their p99 over the one alone, of the
/// mean rate they ran at), the rate times no more than this and no less
/// than [`CUT`].
pub const SPAN_CUT_MOST: f64 = 0.95;
const _: () = assert!(CUT < SPAN_CUT_MOST);

/// The last [`SPAN`] windows over [`SPAN_AIM`] together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpanOver {
    /// Their p99 over the one alone.
    pub ratio: f64,
    /// The rate to cut to: the mean of the rates they ran at, cut in
    /// proportion.
    pub to: f64,
}

impl SpanOver {
    fn of(weighed: steady::Weighed) -> Option<SpanOver> {
        let ratio = weighed.ratio;
        (ratio > SPAN_AIM).then(|| SpanOver {
            ratio,
            to: weighed.ran_at * (SPAN_AIM / ratio).clamp(CUT, SPAN_CUT_MOST),
        })
    }
}

/// After a trial the tail alone sent back, no more trials for this long
/// (one the mean sent back: none until the latency is learned again).
/// A window just over is noise as often, and must not hold the rate
/// until the next learning (10–30 s away); a trial that truly costs the tail
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
    /// The last [`SPAN`] windows together over [`SPAN_AIM`]: cut, in
    /// proportion.
    SpanOver(SpanOver),
}

impl Says {
    /// Whether it cuts the rate.
    pub fn cuts(self) -> bool {
        matches!(self, Says::FarOver | Says::SpanOver(_))
    }

    /// The rate it cuts `rate` to: the ceiling after it, if it cuts (a
    /// span's cut is of the rates it ran at: it may be over `rate`, which
    /// the mean cut since).
    pub fn rate_after(self, rate: f64) -> f64 {
        match self {
            Says::Within | Says::Over => rate,
            Says::FarOver => rate * CUT,
            Says::SpanOver(over) => over.to,
        }
    }
}

#[derive(Debug, Default)]
pub struct Tail {
    /// The counts when learning started.
    learning_from: Option<Histogram>,
    /// The last learnings' reads alone, the newest last.
    pool: VecDeque<Histogram>,
    /// Learnings that came soon (the pool young) since the pool was last
    /// full: at most `POOLED - 1`.
    soon: usize,
    /// The application's p99 at the drive, alone: of the pool.
    alone: Option<Duration>,
    /// The counts when the window started (the last decision).
    since: Option<Histogram>,
    /// The last window's p99 over `alone`.
    now: Option<f64>,
    /// What it said of the last window.
    says: Says,
    /// The window starting is the first after a pause or a learning: the
    /// application's reads in it queued behind what ran at the
    /// configured rate, or while the floor was paid back; not the
    /// controller's rate's, so not the span's.
    fresh: bool,
    /// The last windows together, and the ceiling a cut on the tail set.
    steady: steady::Steady,
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
        if self.young() {
            // This learning came soon: one of the hurry's.
            self.soon += 1;
        }
        if changed {
            // Another application: what its tail taught is not its own.
            self.pool.clear();
            self.alone = None;
            self.steady.forget();
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
            if self.pool.len() == POOLED {
                self.soon = 0;
            }
            let pooled = Histogram::pooled(&self.pool);
            if pooled.reads() >= MIN_READS {
                self.alone = pooled.quantile(0.99);
            }
            tracing::debug!(
                this_p99_ms = this_p99.map(|d| d.as_secs_f64() * 1e3),
                pooled_p99_ms = self.alone.map(|d| d.as_secs_f64() * 1e3),
                pooled_reads = pooled.reads(),
                pooled = self.pool.len(),
                soon = self.soon,
                changed,
                "learned the application's p99 at the drive alone"
            );
        }
        self.restart(counts, true);
    }

    /// One to `POOLED - 1` learnings that timed reads in the pool, and
    /// the hurry not spent since it was last full: its p99 is still one
    /// learning's noise as much as the application's. An empty pool is
    /// not young (the drive's reads not timed, or none of the
    /// application's seen: nothing a learning soon would add).
    pub fn young(&self) -> bool {
        (1..POOLED).contains(&self.pool.len()) && self.soon < POOLED - 1
    }

    /// A new window from `counts` (after a pause: what ran at the
    /// configured rate is not the window's). `fresh`: it begins with a
    /// pause or a learning behind it, and is not weighed in the span (a
    /// window begun for a depth on trial is).
    pub fn restart(&mut self, counts: Option<Histogram>, fresh: bool) {
        self.since = counts;
        self.now = None;
        self.says = Says::Within;
        self.fresh = fresh;
    }

    /// A decision: the window's p99 over the one alone, when both are
    /// known; the next window starts. `ran_at`: the controller's rate
    /// over the window (`None`: the floor was paid back above it).
    pub fn decide(&mut self, counts: Option<Histogram>, ran_at: Option<f64>) -> Option<f64> {
        let window = match (self.since.as_ref(), counts.as_ref()) {
            (Some(since), Some(c)) => Some(c.since(since)),
            _ => None,
        };
        // The window before, on its own (not the span's say).
        let over_before = self.now.is_some_and(|r| r > TARGET);
        self.now = window
            .as_ref()
            .filter(|w| w.reads() >= MIN_READS)
            .and_then(|w| w.quantile(0.99))
            .zip(self.alone)
            .map(|(p99, alone)| p99.as_secs_f64() / alone.as_secs_f64());
        let fresh = std::mem::take(&mut self.fresh);
        let span = match (window, ran_at, self.alone) {
            (Some(w), Some(rate), Some(alone)) if !fresh => self.steady.add(w, rate, alone),
            _ => None,
        }
        .and_then(SpanOver::of);
        self.says = match (self.now, span) {
            (Some(r), _) if r > FAR_OVER && over_before => Says::FarOver,
            (_, Some(over)) => Says::SpanOver(over),
            (Some(r), _) if r > TARGET => Says::Over,
            _ => Says::Within,
        };
        self.since = counts;
        self.now
    }

    /// The rate was cut on the tail to `rate`: it grows no further (but
    /// by [`steady::CEILING_RISE`] every 30 s), unless that is the `floor`; the
    /// next span is of the rates it leaves.
    pub fn cut_to(&mut self, rate: f64, floor: f64) {
        self.steady.cut_to(rate, floor);
    }

    /// A decision's share of the ceiling's rise: `decision` went by; a
    /// ceiling past `full` (the configured rate) bounds nothing, and goes.
    pub fn rise(&mut self, decision: Duration, full: f64) {
        self.steady.rise(decision, full);
    }

    /// The rate the refresh grows no further than, if the tail set one.
    pub fn ceiling(&self) -> Option<f64> {
        self.steady.ceiling()
    }

    /// What the tail said of the last window.
    pub fn says(&self) -> Says {
        self.says
    }

    /// Not sharing any more: nothing to show, nothing said (the p99
    /// alone stands); the refresh starts again from the floor, its span
    /// and ceiling gone with the rates they were of.
    pub fn stop_showing(&mut self) {
        self.now = None;
        self.says = Says::Within;
        self.steady.forget();
    }

    /// For the operator: the last window's p99 at the drive against the
    /// one alone, and what that did (`at_floor`: the rate is the floor's).
    pub fn shown(&self, at_floor: bool) -> Option<String> {
        let alone = self.alone?;
        // A span over can say it of a window too short for its own p99.
        let ratio = match self.says {
            Says::SpanOver(over) => self.now.unwrap_or(over.ratio),
            _ => self.now?,
        };
        // What a cut did: slowed down, or nothing below the floor.
        let cut = if at_floor {
            ", held at the floor: progress is a promise"
        } else {
            ": slowing down"
        };
        let why = match self.says {
            Says::Within => String::new(),
            Says::Over => format!(" (over {TARGET}×: not growing)"),
            Says::FarOver => format!(" (over {FAR_OVER}×{cut})"),
            Says::SpanOver(over) => format!(
                " ({:.2}× over the last {SPAN} windows, over the span's {SPAN_AIM}× aim{cut})",
                over.ratio
            ),
        };
        let ceiling = match self.ceiling() {
            Some(c) if !at_floor => format!(
                "; grows to {:.1} MiB/s at most since a cut on its tail",
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
