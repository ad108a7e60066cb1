//! The tail over by a little, steadily: the last [`SPAN`] windows' reads
//! together, each with the rate it ran at, and the ceiling a cut on the
//! tail leaves (see the parent module).

use std::collections::VecDeque;
use std::time::Duration;

use crate::io::block_reads::Histogram;

/// The last this many windows (5 s at a decision every 500 ms) are
/// weighed together: their p99 is the application's tail over the last
/// 5 s, not a window's noise.
pub const SPAN: usize = 10;
/// Fewer of the application's reads than this in the [`SPAN`]: no say
/// (of 2,000 its p99 is the twentieth slowest).
pub const SPAN_READS: u64 = 2_000;
/// After a cut on the tail the rate grows no further than where the cut
/// put it; that bound rises by this every 30 s of decisions (while the
/// application reads, as often as it is learned again once its tail's
/// pool is full), so the refresh
/// tries for more, slowly, where the application's tail may have room
/// again.
pub const CEILING_RISE: f64 = 1.1;

/// The last [`SPAN`] windows together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weighed {
    /// Their p99 over the one alone.
    pub ratio: f64,
    /// The mean of the rates they ran at.
    pub ran_at: f64,
}

#[derive(Debug, Default)]
pub struct Steady {
    /// The last windows' reads and the rate each ran at, the newest last
    /// (since the last cut on the tail: the evidence is of the rates it
    /// left).
    windows: VecDeque<(Histogram, f64)>,
    /// The rate the refresh grows no further than.
    ceiling: Option<f64>,
}

impl Steady {
    /// A window's reads that ran at `ran_at` join the span; once it is
    /// [`SPAN`] windows of [`SPAN_READS`] or more, their p99 against
    /// `alone`.
    pub fn add(&mut self, window: Histogram, ran_at: f64, alone: Duration) -> Option<Weighed> {
        if self.windows.len() == SPAN {
            self.windows.pop_front();
        }
        self.windows.push_back((window, ran_at));
        if self.windows.len() < SPAN {
            return None;
        }
        let all = Histogram::pooled(self.windows.iter().map(|(h, _)| h));
        if all.reads() < SPAN_READS {
            return None;
        }
        Some(Weighed {
            ratio: all.quantile(0.99)?.as_secs_f64() / alone.as_secs_f64(),
            ran_at: self.windows.iter().map(|(_, r)| r).sum::<f64>() / SPAN as f64,
        })
    }

    /// The rate was cut on the tail to `rate`: it grows no further, and
    /// the next span is of the rates it leaves. A cut to the `floor` or
    /// under it sets no ceiling: there the refresh has nothing left to
    /// give, and a ceiling would only hold it there once the tail is
    /// back within (the floor is a promise whatever the tail says).
    pub fn cut_to(&mut self, rate: f64, floor: f64) {
        if rate > floor {
            self.ceiling = Some(rate);
        }
        self.windows.clear();
    }

    /// A decision's share of [`CEILING_RISE`]: `decision` of its 30 s.
    /// Past `full` (the configured rate) it bounds nothing, and goes.
    pub fn rise(&mut self, decision: Duration, full: f64) {
        let by = CEILING_RISE.powf(decision.as_secs_f64() / 30.0);
        self.ceiling = self.ceiling.map(|c| c * by).filter(|&c| c < full);
    }

    /// The rate the refresh grows no further than, if the tail set one.
    pub fn ceiling(&self) -> Option<f64> {
        self.ceiling
    }

    /// The windows' rates are gone (the refresh left the drive to start
    /// again from the floor), or the application changed: nothing of
    /// this stands.
    pub fn forget(&mut self) {
        self.windows.clear();
        self.ceiling = None;
    }
}
