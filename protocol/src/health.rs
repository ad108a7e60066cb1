//! A drive's health as the daemon judges it: the verdict on one sampling
//! round and the state confirmed over several.

use serde::{Deserialize, Serialize};

/// Where a round's fresh reference came from, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reference {
    /// A canary written and read back in this round.
    Canary,
    /// What fresh data read at on this drive before (its identity's
    /// recorded baseline).
    Baseline,
    /// The drive's freshest data (the youngest, non-stale age bucket).
    FreshestData,
    /// The operator's `expected_throughput`.
    Expected,
}

/// The verdict on one round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judgement {
    pub stale_bps: Option<f64>,
    pub fresh_bps: Option<f64>,
    pub ratio: Option<f64>,
    /// min(stale/min_throughput, ratio/min_ratio); `None` without stale
    /// data, or without a reference while the ratio floor is in use.
    pub score: Option<f64>,
    /// Why it is below, in words (empty when it is not).
    pub reasons: Vec<String>,
    /// Where `fresh_bps` came from.
    pub reference: Option<Reference>,
    /// Stale data was measured but no reference could be had: the drive
    /// cannot be judged, and this says why.
    pub unjudged: Option<String>,
    /// Every byte is slow, fresh as well as old: a rewrite cannot help
    /// (a link negotiated down, garbage collection, a failing drive).
    pub slow: Option<String>,
}

impl Judgement {
    pub fn below(&self) -> bool {
        self.score.is_some_and(|s| s < 1.0)
    }
}

/// A drive's state as the daemon tracks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    /// Not measured yet, or nothing stale to measure.
    Unknown,
    /// Stale data was measured but there is nothing to compare it with
    /// (see the judgement's `unjudged` reason): never refreshed, never
    /// called healthy.
    Unjudged,
    /// Every byte is slow, fresh as well as old (see the judgement's
    /// `slow` reason): never refreshed, diagnosed.
    Slow,
    Healthy,
    /// One round below the floors: re-sample soon to confirm.
    Suspect,
    Degraded,
    /// Refreshed, and the rewritten data is still slow.
    NotRecovering,
    /// The last round could not read the drive's stale data at all (the
    /// reason is in the status): never refreshed on its own, sampled
    /// again at the next interval.
    CannotSample,
}

impl HealthState {
    pub fn name(self) -> &'static str {
        match self {
            HealthState::Unknown => "unknown",
            HealthState::Unjudged => "unjudged",
            HealthState::Slow => "slow",
            HealthState::Healthy => "healthy",
            HealthState::Suspect => "suspect",
            HealthState::Degraded => "degraded",
            HealthState::NotRecovering => "not_recovering",
            HealthState::CannotSample => "cannot_sample",
        }
    }
}
