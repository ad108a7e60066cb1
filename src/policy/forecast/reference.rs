//! Each round's fresh reference: the median canary, moved toward the
//! round's own by the share of its moves the stale reads share.

use std::collections::VecDeque;

use super::{History, Round};

impl History {
    /// Each kept round's fresh reference: the median canary
    /// ([`History::fresh_bps`]), moved toward the round's own canary by
    /// the share of its moves the round's stale reads share
    /// ([`History::shared_share`]).
    ///
    /// A canary reads the drive as it is in its round, load included. A
    /// burst of load (seconds to minutes: one round or many of the
    /// testbed's ~10 s) slows the stale reads made under it and the
    /// canary's, read in step with them ([`crate::sampler`]): against the
    /// median canary alone it reads as age. One canary's own noise, or a
    /// burst on the canary alone, would move every point of its round the
    /// other way (the reason for the median). So each round's reference
    /// is `median · (canary / median)^w`, `w` in [0, 1] the share the
    /// stale reads take of the canary's moves: 0 without load, 1 when a
    /// burst slows both alike.
    pub(crate) fn references(&self) -> Vec<f64> {
        let Some(mid) = self.fresh_bps() else {
            return vec![];
        };
        let w = self.shared_share(mid);
        self.rounds
            .iter()
            .map(|r| mid * (r.fresh_bps / mid).powf(w))
            .collect()
    }

    /// How much of the canary's moves from round to round the stale
    /// reads share, in [0, 1]: the slope of the stale reads' time change
    /// on the canary's (both per byte, as a share of the median canary's),
    /// over every bucket read in two rounds up to [`SHARED_LAGS`] apart
    /// (paired by age, [`same_bucket`]), centred per distance on the
    /// stale reads' mean change (their ageing). A burst shared by both
    /// adds the same time per byte to each, a slope of 1; noise of the
    /// canary's own, or a burst on it alone, a slope of 0. (A load that
    /// divides every read's speed alike, rather than adding time, gives a
    /// slope of 1 + the data's excess: the share reaches 1 sooner. The
    /// canary's changes are taken about 0, not about their mean: it has no
    /// trend of its own over the rounds.) The canary's
    /// own noise takes its share too: on the testbed beside `stress-ng`,
    /// the canary's median of 7 regions reads the load more loosely than
    /// the stale data's of 49, and the slope is 0.3–0.6.
    ///
    /// It replaced the share of the canaries' spread that successive
    /// rounds could not tell from one read's noise (2026-11-28), which
    /// read a burst on the canary alone as one on both, and load that
    /// changes from round to round as noise. `tools/forecast-sim.py`, nine
    /// shapes, share of runs with every forecast 6–12 days ahead within
    /// ±25 % (40 runs each; this, then the rule before; docs/DESIGN.md,
    /// "Forecast", has the whole table): without load 0.76 / 0.58 / 0.26
    /// against 0.77 / 0.59 / 0.24 at 1 / 2 / 3 % noise per read; load
    /// that changes every round (`JITTER=0.1`, 1 %) 0.74 against 0.44;
    /// bursts of many rounds on both (`LOAD=0.1`) 0.63 against 0.68; on
    /// the canary alone (`BURST=canary`) 0.62 against 0.29.
    pub(super) fn shared_share(&self, mid: f64) -> f64 {
        let (mut together, mut canary) = (0.0, 0.0);
        for lag in 1..=SHARED_LAGS {
            let moves = moves_apart(&self.rounds, lag, mid);
            if moves.len() < 2 {
                continue;
            }
            let ageing = moves.iter().map(|m| m.1).sum::<f64>() / moves.len() as f64;
            together += moves.iter().map(|(c, s)| c * (s - ageing)).sum::<f64>();
            canary += moves.iter().map(|(c, _)| c * c).sum::<f64>();
        }
        let share = together / canary;
        if canary > 0.0 && share.is_finite() {
            share.clamp(0.0, 1.0)
        } else {
            0.0
        }
    }
}

/// Rounds up to this many apart are compared ([`History::shared_share`]):
/// a burst of many rounds moves the canary at its start and end only,
/// where one canary's noise moves it at every round, so successive
/// rounds alone see a long burst twice against 47 moves of noise and
/// take too small a share of it. In `tools/forecast-sim.py` (`LAGS`;
/// bursts of up to 0.1 on every read, 8–24 rounds long, 1 % noise; share
/// of runs within ±25 %): 1 round apart 0.46, up to 4 0.60, up to 8 0.63,
/// up to 16 0.65 (the rule before, 0.68); load that changes every round
/// and bursts on the canary alone within 0.01 of each other.
const SHARED_LAGS: usize = 8;

/// For each two rounds `lag` apart, each bucket read in both (paired by
/// age, [`same_bucket`]): how the canary's time per byte moved, and how
/// the bucket's did, both as a share of the median canary's (`mid`).
fn moves_apart(rounds: &VecDeque<Round>, lag: usize, mid: f64) -> Vec<(f64, f64)> {
    let mut moves = vec![];
    for (a, b) in rounds.iter().zip(rounds.iter().skip(lag)) {
        let canary = mid / b.fresh_bps - mid / a.fresh_bps;
        for &(months, bps) in &b.buckets {
            if let Some(before) = same_bucket(&a.buckets, months) {
                let stale = mid / bps - mid / before;
                if canary.is_finite() && stale.is_finite() {
                    moves.push((canary, stale));
                }
            }
        }
    }
    moves
}

/// The throughput of the bucket of `buckets` whose data is of about
/// `months` (within [`SAME_BUCKET`]), the nearest.
fn same_bucket(buckets: &[(f64, f64)], months: f64) -> Option<f64> {
    buckets
        .iter()
        .map(|&(m, bps)| ((m / months).ln().abs(), bps))
        .filter(|&(apart, _)| apart <= SAME_BUCKET.ln())
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, bps)| bps)
}

/// Two rounds' buckets hold the same data when their mean ages differ by
/// less than this factor: [`SHARED_LAGS`] rounds 6 h apart (two days) age
/// a month-old bucket by 7 %; data younger than about 0.6 months ages
/// faster and pairs only with rounds nearer; data moving between buckets
/// shifts their means more, and is not paired. The nearest is taken, so
/// two buckets of one round may pair with the same of the other.
const SAME_BUCKET: f64 = 1.1;
