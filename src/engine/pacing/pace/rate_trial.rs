//! More rate on trial, where the application's latency sits between the
//! controller's growth mark and its aim.
//!
//! There the law holds: on a drive whose latency answers the rate (the
//! testbed) that is where the rate is right. But a drive can read the
//! application a few per cent slower beside any I/O of ours, whatever
//! its rate: on the loop devices of the latency matrix (two cores, the
//! loop worker, the reader and the refresh share the CPU) the reader's
//! mean sat at 1.03–1.04× its latency alone at the 4 MiB/s floor and no
//! higher at a fixed 16 MiB/s, and the rate held at the floor for
//! seconds. So in between, a quarter more rate goes on trial, judged at
//! the next decision as a depth trial is: kept if the application's
//! latency rose by no more than [`DEPTH_COST`] of its latency alone and
//! stayed within the aim, else the rate goes back (not cut further: the
//! latency measured was the trial's) and no more is tried until the
//! latency is learned again.

use std::time::Duration;

use super::{Pacer, RateTrial, AIM, DEPTH_COST, GROWTH};

impl Pacer {
    /// Judges a rate on trial against the ratio now: kept, or back to the
    /// rate before (its latency was within the aim) if the latency rose
    /// by more than [`DEPTH_COST`] of its latency alone or passed the
    /// aim, with no more trials until the latency is learned again; or
    /// back if the tail at the drive is over its target (`tail_over`,
    /// [`super::tail`]), with no more trials for
    /// [`super::tail::TRIALS_AFTER`] from `now`.
    /// Returns whether it went back: the ratio now is the trial's, not
    /// the rate's it went back to, and no cut follows.
    pub(super) fn judge_rate_trial(&mut self, ratio: f64, tail_over: bool, now: Duration) -> bool {
        let Some(t) = self.rate_trial.take() else {
            return false;
        };
        let mean_cost = ratio - t.ratio_before > DEPTH_COST || ratio > AIM;
        if mean_cost || tail_over {
            tracing::debug!(
                ratio,
                before = t.ratio_before,
                tail_over,
                "more rate cost the application: back to {:.1} MiB/s",
                t.before / f64::from(1 << 20)
            );
            self.rate = t.before;
            if mean_cost {
                self.rate_trials_over = true;
            } else {
                self.rest_trials(now);
            }
        }
        mean_cost || tail_over
    }

    /// In the hold band: a quarter more rate, on trial (a depth trial
    /// does not start while it is: each would be judged by the same
    /// window; one pending here was judged just before). A quarter more
    /// than the rate in effect (the floor's payback may be above the
    /// controller's), within what growth may take ([`Pacer::grown`]),
    /// and only if that is more than the rate in effect: a trial that
    /// lets nothing more through is kept for nothing changing, and the
    /// rate it kept would run untried once the payback ends (and where
    /// the depth bounds the reads, under two thirds of the rate in
    /// effect, it would hold a depth trial back a decision).
    pub(super) fn try_more_rate(&mut self, ratio: f64) {
        if self.rate_trials_over {
            return;
        }
        let in_effect = self.sharing_rate();
        let more = self.grown(in_effect, GROWTH);
        if more <= in_effect {
            return;
        }
        self.rate_trial = Some(RateTrial {
            before: self.rate,
            ratio_before: ratio,
        });
        self.rate = more;
    }

    /// A rate on trial goes back untried (a pause, learning).
    pub(super) fn forget_rate_trial(&mut self, keep_ceiling: bool) {
        if let Some(t) = self.rate_trial.take() {
            self.rate = t.before;
        }
        if !keep_ceiling {
            self.rate_trials_over = false;
        }
    }

    /// A trial the tail alone sent back: none of rate or depth for
    /// [`super::tail::TRIALS_AFTER`] from `now` (one the mean sent back
    /// latches instead, until the latency is learned again).
    pub(super) fn rest_trials(&mut self, now: Duration) {
        self.trials_from = now + super::tail::TRIALS_AFTER;
    }
}
