//! Deciding: is a drive degraded, and what should be rewritten?
//!
//! **Judging a round.** The stale-data throughput of a round is the median
//! over its sequential regions (a robust statistic: one stalled request
//! does not sink it). It is compared with two floors, `min_throughput` and
//! `min_ratio` × the fresh reference's median; the round's *score* is the
//! smaller of stale/min_throughput and ratio/min_ratio, so score < 1 means
//! "below a floor".
//!
//! **Confirming.** One slow round proves little on a busy host, so the
//! daemon's [`Health`] keeps the last three scores and acts on their
//! median: a drive becomes degraded when two of three rounds are below 1,
//! and healthy again only when the median is at least 1.2 (hysteresis:
//! a drive hovering at the threshold does not flap). A one-shot survey has
//! one round and says so.
//!
//! **After a refresh.** The rewritten data is measured like fresh data; if
//! it is still below the floors the drive is `not_recovering` (it may be
//! refreshing internally or failing): reported, not rewritten again and
//! again. It leaves that state when a later round is healthy, or when an
//! operator forces a refresh.
//!
//! **Ahead.** [`forecast`] fits how the drive slows with its data's age
//! and says when its stale data will cross a floor.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

pub use refreshd_protocol::health::{HealthState, Judgement, Reference};
pub use refreshd_protocol::plan::{Plan, PlanEntry};

use crate::inventory::FileRecord;
use crate::sampler::DriveSample;
use crate::units::Rate;

/// The two floors.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Thresholds {
    pub min_throughput: Rate,
    pub min_ratio: f64,
}

/// References other than the round's own canary.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Fallbacks {
    pub baseline_bps: Option<f64>,
    pub expected_bps: Option<f64>,
}

/// Fresh and old data reading within this ratio of each other are "the
/// same speed": whatever makes them slow, it is not the data's age.
pub const SLOW_RATIO: f64 = 0.7;
/// Fresh data below this share of the drive's baseline is far below it.
pub const BELOW_BASELINE: f64 = 0.5;

fn mbps(bps: f64) -> String {
    format!("{:.0} MB/s", bps / 1e6)
}

/// Judges one round's stale and fresh measurements.
pub fn judge(stale_bps: Option<f64>, fresh_bps: Option<f64>, th: Thresholds) -> Judgement {
    let ratio = match (stale_bps, fresh_bps) {
        (Some(s), Some(f)) if f > 0.0 => Some(s / f),
        _ => None,
    };
    let mut reasons = vec![];
    let score = stale_bps.map(|s| {
        let floor = if th.min_throughput.0 > 0 {
            s / th.min_throughput.0 as f64
        } else {
            f64::INFINITY
        };
        if floor < 1.0 {
            reasons.push(format!(
                "stale data reads at {} < min_throughput {}",
                mbps(s),
                mbps(th.min_throughput.0 as f64)
            ));
        }
        let rel = match ratio {
            Some(r) if th.min_ratio > 0.0 => r / th.min_ratio,
            _ => f64::INFINITY,
        };
        if rel < 1.0 {
            reasons.push(format!(
                "stale/fresh ratio {:.2} < min_ratio {}",
                ratio.unwrap_or(0.0),
                th.min_ratio
            ));
        }
        floor.min(rel)
    });
    Judgement {
        stale_bps,
        fresh_bps,
        ratio,
        score: score.filter(|s| s.is_finite()).or(score.map(|_| f64::MAX)),
        reasons,
        reference: fresh_bps.map(|_| Reference::Canary),
        unjudged: None,
        slow: None,
    }
}

/// Whether every byte is slow: this round's canary reads about as slowly
/// as the old data, and below the floor or far below the drive's baseline.
fn every_byte_slow(
    stale: f64,
    canary: f64,
    th: Thresholds,
    baseline: Option<f64>,
) -> Option<String> {
    if stale < SLOW_RATIO * canary {
        return None; // old data is slower than fresh: age, refreshable
    }
    let below_floor = th.min_throughput.0 > 0 && canary < th.min_throughput.0 as f64;
    let below_baseline = baseline.is_some_and(|b| canary < BELOW_BASELINE * b);
    if !below_floor && !below_baseline {
        return None;
    }
    let mut why = format!(
        "fresh data reads as slowly as old data ({} vs {})",
        mbps(canary),
        mbps(stale)
    );
    if let Some(b) = baseline.filter(|_| below_baseline) {
        why.push_str(&format!(", far below this drive's baseline of {}", mbps(b)));
    } else {
        why.push_str(&format!(
            ", below min_throughput {}",
            mbps(th.min_throughput.0 as f64)
        ));
    }
    why.push_str(": a rewrite cannot help (link speed, garbage collection, a failing drive)");
    Some(why)
}

/// Judges a sampled round, with the best reference there is: the round's
/// canary, the drive's baseline, its freshest data, the operator's
/// expectation. With stale data, the ratio floor in use and none of them,
/// the round is unjudged (never healthy by default).
pub fn judge_sample(s: &DriveSample, th: Thresholds, fb: Fallbacks) -> Judgement {
    let freshest = s
        .buckets
        .first()
        .filter(|b| b.min_months == 0.0 && !b.stale)
        .and_then(|b| b.measured.median_bps());
    let (fresh, reference) = match (
        s.fresh.as_ref().and_then(|f| f.median_bps()),
        fb.baseline_bps,
        freshest,
        fb.expected_bps,
    ) {
        (Some(c), ..) => (Some(c), Some(Reference::Canary)),
        (None, Some(b), ..) => (Some(b), Some(Reference::Baseline)),
        (None, None, Some(f), _) => (Some(f), Some(Reference::FreshestData)),
        (None, None, None, Some(e)) => (Some(e), Some(Reference::Expected)),
        _ => (None, None),
    };
    let stale = s.stale.median_bps();
    let mut j = judge(stale, fresh, th);
    j.reference = reference;
    if let (Some(st), Some(c), Some(Reference::Canary)) = (stale, fresh, reference) {
        j.slow = every_byte_slow(st, c, th, fb.baseline_bps);
        if j.slow.is_some() {
            j.score = None;
        }
    }
    if stale.is_some() && fresh.is_none() && th.min_ratio > 0.0 {
        let why = s
            .fresh_missing
            .clone()
            .unwrap_or_else(|| "no canary".into());
        j.unjudged = Some(format!(
            "no fresh reference: {why}; no recorded baseline for this drive, no fresh data \
             on it, no expected_throughput configured"
        ));
        j.score = None;
    }
    j
}

/// Scores kept for confirmation.
pub const WINDOW: usize = 3;
/// Median score at which a degraded drive counts as healthy again.
pub const RECOVER: f64 = 1.2;

/// Confirmation with hysteresis over the last [`WINDOW`] rounds.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    pub state: HealthState,
    scores: VecDeque<f64>,
}

impl Default for Health {
    fn default() -> Health {
        Health {
            state: HealthState::Unknown,
            scores: VecDeque::new(),
        }
    }
}

fn median(v: &VecDeque<f64>) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().collect();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

impl Health {
    /// Takes a round's judgement; returns the new state.
    pub fn observe(&mut self, j: &Judgement) -> HealthState {
        if j.unjudged.is_some() {
            // Old scores are kept: with a reference back, confirmation
            // goes on from them.
            self.state = HealthState::Unjudged;
            return self.state;
        }
        if j.slow.is_some() {
            // Scores of a slow drive say nothing about its data's age.
            self.scores.clear();
            self.state = HealthState::Slow;
            return self.state;
        }
        let Some(score) = j.score else {
            // Nothing stale: nothing to refresh, the drive is not slow on
            // anything we track.
            if self.state == HealthState::Unknown {
                return self.state;
            }
            self.scores.clear();
            self.state = HealthState::Healthy;
            return self.state;
        };
        self.scores.push_back(score);
        while self.scores.len() > WINDOW {
            self.scores.pop_front();
        }
        let m = median(&self.scores);
        let below = self.scores.iter().filter(|&&s| s < 1.0).count();
        self.state = match self.state {
            HealthState::Degraded if m >= RECOVER => HealthState::Healthy,
            HealthState::Degraded => HealthState::Degraded,
            HealthState::NotRecovering if score >= RECOVER => HealthState::Healthy,
            HealthState::NotRecovering => HealthState::NotRecovering,
            _ if below >= 2 && m < 1.0 => HealthState::Degraded,
            _ if score < 1.0 => HealthState::Suspect,
            _ => HealthState::Healthy,
        };
        self.state
    }

    /// The verification of a refresh: `j` measured the files just
    /// rewritten (and nothing else). The only way into `not_recovering`:
    /// data refreshd actually rewrote still reads slowly. Old scores
    /// describe old data and are dropped. With nothing measurable the
    /// state stays as it was. `partial`: the daily budget left stale files
    /// for another day, so a good verification keeps the drive degraded.
    pub fn verified(&mut self, j: &Judgement, partial: bool) -> HealthState {
        let Some(score) = j.score else {
            return self.state;
        };
        if score >= 1.0 && partial {
            // It helped, and the rest is still to do: the window keeps
            // describing the data that waits (not the rewritten data).
            self.state = HealthState::Degraded;
            return self.state;
        }
        self.scores.clear();
        self.scores.push_back(score);
        self.state = if score < 1.0 {
            HealthState::NotRecovering
        } else {
            HealthState::Healthy
        };
        self.state
    }

    /// A round that could not read the stale data: what the drive reads
    /// at is not known. The scores stay for when sampling works again.
    pub fn cannot_sample(&mut self) -> HealthState {
        self.state = HealthState::CannotSample;
        self.state
    }

    /// Whether the daemon should refresh this drive on its own.
    pub fn wants_refresh(&self) -> bool {
        self.state == HealthState::Degraded
    }
}

/// Plan inputs.
#[derive(Debug, Clone, Copy)]
pub struct PlanRules {
    pub now: i64,
    pub stale_after: Duration,
    pub min_interval: Duration,
    /// Bytes that may still be written today; `None`: no limit.
    pub budget_left: Option<u64>,
}

/// The stale files, oldest data first, skipping those refreshed within
/// `min_interval`, within the byte budget.
pub fn plan(files: &[FileRecord], rules: PlanRules) -> Plan {
    plan_records(files.iter().cloned(), rules).0
}

/// [`plan`], consuming the candidates: also returns the plan's records, in
/// plan order (one per entry). Only stale candidates are kept meanwhile.
pub fn plan_records(
    files: impl IntoIterator<Item = FileRecord>,
    rules: PlanRules,
) -> (Plan, Vec<FileRecord>) {
    let mut out = Plan::default();
    let mut records = vec![];
    let mut stale: Vec<FileRecord> = files
        .into_iter()
        .filter(|f| f.alloc > 0 && f.data_age(rules.now) >= rules.stale_after)
        .collect();
    // Oldest data first; data of unknown age (a wrong clock) first of all.
    stale.sort_by_key(|f| (f.data_written(rules.now), f.fs, f.ino));
    let mut left = rules.budget_left;
    for f in stale {
        // A last refresh in the future (a wrong clock) is not believed:
        // it never keeps data from being refreshed.
        let recent = f
            .last_refresh
            .and_then(|r| crate::clock::believable(r, rules.now))
            .is_some_and(|r| {
                Duration::from_secs(u64::try_from(rules.now - r).unwrap_or(0)) < rules.min_interval
            });
        if recent {
            out.skipped_recent += 1;
            continue;
        }
        // Allocated data, not apparent size: a sparse file's holes are
        // never rewritten (nor counted against the budget).
        let bytes = f.data_bytes();
        if let Some(l) = left.as_mut() {
            if bytes > *l {
                out.deferred_budget += 1;
                continue;
            }
            *l -= bytes;
        }
        out.bytes += bytes;
        let age = f.data_age(rules.now);
        out.files.push(PlanEntry {
            path: f.path.clone(),
            dev: f.dev,
            fs: Some(f.fs),
            ino: f.ino,
            size: f.size,
            age_days: if age == Duration::MAX {
                f64::INFINITY
            } else {
                age.as_secs_f64() / 86_400.0
            },
        });
        records.push(f);
    }
    (out, records)
}

pub mod forecast;

#[cfg(test)]
mod tests;
