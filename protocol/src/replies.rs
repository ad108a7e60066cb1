//! What the daemon answers, typed: `daemon::control` builds these and
//! `client` reads them, so the two cannot drift apart and still compile.
//! The wire format is the JSON these serialize to, unchanged for
//! `refreshctl --json` users since protocol version 1; fields are only
//! ever added (with defaults, so an older daemon's answer still reads).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::drive::Drive;
use crate::forecast::Forecast;
use crate::health::{HealthState, Judgement, Reference};
use crate::plan::Plan;
use crate::sample::DriveSample;
use crate::state::{SlotState, Waiting};

/// `status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReply {
    pub version: String,
    pub uptime_seconds: u64,
    pub drives: Vec<DriveStatusReply>,
    /// Configured trees that cannot be watched.
    #[serde(default)]
    pub unwatched: Vec<UnwatchedTree>,
    /// The fleet group (with `[coordination]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordination: Option<CoordinationReply>,
}

/// The daemon's fleet membership in `status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CoordinationReply {
    /// This daemon's name in its groups.
    pub name: String,
    pub max_concurrent: u64,
    /// Whether the etcd session is up.
    pub connected: bool,
    /// Why it is not (refreshes wait meanwhile).
    pub error: Option<String>,
    /// Why the health gate last said no (cleared when it says yes).
    pub health: Option<String>,
    /// Its drives' groups: `[coordination]`'s first.
    pub groups: Vec<GroupReply>,
}

/// One fleet group as etcd last said.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupReply {
    pub group: String,
    /// Who holds its slots, first come first.
    pub holders: Vec<SlotHolder>,
    /// Drives waiting for a slot.
    pub waiting: u64,
    /// Why this daemon cannot take its slots (e.g. it disagrees on
    /// `max_concurrent` with the group).
    pub error: Option<String>,
}

/// A holder of one of the group's slots.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SlotHolder {
    /// The daemon's name (host name by default).
    pub name: String,
    pub device: String,
    /// When it queued (seconds since the epoch).
    pub since: i64,
}

/// A drive's place in its group, in `status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SlotReply {
    pub group: String,
    pub state: SlotState,
    /// While waiting: drives ahead of it.
    pub ahead: Option<u64>,
    /// Since it queued.
    pub waited_seconds: f64,
    pub held_since: Option<i64>,
    /// Why it is unavailable.
    pub reason: Option<String>,
}

/// One drive in `status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DriveStatusReply {
    pub device: String,
    pub state: HealthState,
    /// Why a wanted refresh waits.
    pub waiting: Option<Waiting>,
    /// What the host sees about a slow drive.
    #[serde(default)]
    pub diagnosis: Vec<String>,
    pub paused: bool,
    pub files: u64,
    pub stale_files: u64,
    pub stale_bytes: u64,
    pub last_scan: Option<i64>,
    pub last_sample: Option<SampleSummary>,
    pub refresh: Option<Progress>,
    /// Whether the refresh yields to other I/O now, and why.
    #[serde(default)]
    pub yielding: Option<YieldingNow>,
    /// Time spent yielding since the daemon started.
    #[serde(default)]
    pub yielded_seconds: f64,
    pub last_refresh: Option<i64>,
    /// `now` requests received and completed (for `--wait`).
    pub requests: u64,
    pub completed: u64,
    /// What the last `now` did, in one line.
    pub last_request: Option<String>,
    /// The refresh rounds run for the last answered `now` (`None`: it
    /// needed none): `refreshctl now --wait` exits 1 when a file failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_request_round: Option<RoundSummary>,
    /// What the drive's last refresh round did (also one that stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_round: Option<RoundSummary>,
    pub error: Option<String>,
    /// Its place in the fleet group while it wants to refresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<SlotReply>,
}

/// The last sample's verdict, in `status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SampleSummary {
    pub at: i64,
    pub stale_bps: Option<f64>,
    pub fresh_bps: Option<f64>,
    pub ratio: Option<f64>,
    #[serde(default)]
    pub reasons: Vec<String>,
    pub reference: Option<Reference>,
    pub unjudged: Option<String>,
    pub slow: Option<String>,
    /// When the stale data will read below a floor, at the rate the drive
    /// has been slowing down (`None`: not enough ages measured yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<Forecast>,
}

impl SampleSummary {
    pub fn of(at: i64, j: &Judgement, forecast: Option<Forecast>) -> SampleSummary {
        SampleSummary {
            forecast,
            at,
            stale_bps: j.stale_bps,
            fresh_bps: j.fresh_bps,
            ratio: j.ratio,
            reasons: j.reasons.clone(),
            reference: j.reference,
            unjudged: j.unjudged.clone(),
            slow: j.slow.clone(),
        }
    }
}

/// A refresh in progress.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Progress {
    pub files_total: u64,
    pub files_done: u64,
    pub bytes_total: u64,
    pub bytes_done: u64,
    pub started: i64,
    pub forced: bool,
    pub eta_seconds: Option<f64>,
}

/// What a refresh round did, file by file, counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundSummary {
    /// When it ended (Unix time).
    pub ended: i64,
    pub forced: bool,
    /// It went through its whole plan.
    pub finished: bool,
    /// Why it stopped before the end ("paused", "stopping", …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// Files in the plan.
    pub planned: u64,
    /// Bytes in the plan.
    #[serde(default)]
    pub planned_bytes: u64,
    pub refreshed: u64,
    pub skipped: u64,
    pub interrupted: u64,
    pub failed: u64,
    /// Bytes really rewritten or relocated.
    pub bytes: u64,
    /// The first failures (at most [`RoundSummary::KEEP`]).
    #[serde(default)]
    pub failures: Vec<FileProblem>,
}

impl RoundSummary {
    /// Failures kept with their reasons.
    pub const KEEP: usize = 5;

    /// Adds another round's counts (a request may take several rounds).
    pub fn absorb(&mut self, o: &RoundSummary) {
        self.ended = self.ended.max(o.ended);
        self.forced |= o.forced;
        self.finished = o.finished;
        self.stopped = o.stopped.clone();
        self.planned += o.planned;
        self.planned_bytes += o.planned_bytes;
        self.refreshed += o.refreshed;
        self.skipped += o.skipped;
        self.interrupted += o.interrupted;
        self.failed += o.failed;
        self.bytes += o.bytes;
        for f in &o.failures {
            if self.failures.len() < Self::KEEP {
                self.failures.push(f.clone());
            }
        }
    }

    /// "5 refreshed, 1 failed" (only the counts that are not zero).
    pub fn counts(&self) -> String {
        let parts: Vec<String> = [
            (self.refreshed, "refreshed"),
            (self.skipped, "skipped"),
            (self.interrupted, "interrupted"),
            (self.failed, "failed"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, w)| format!("{n} {w}"))
        .collect();
        if parts.is_empty() {
            "nothing done".into()
        } else {
            parts.join(", ")
        }
    }
}

/// A file a round could not refresh, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileProblem {
    pub path: String,
    pub reason: String,
}

/// The refresh is yielding to other I/O.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct YieldingNow {
    /// Unix time it started yielding.
    pub since: i64,
    pub reason: String,
}

/// A configured tree the daemon cannot watch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnwatchedTree {
    #[serde(with = "crate::pathtext::json")]
    pub path: PathBuf,
    pub reason: String,
}

/// One entry of `drives`: a drive and its trees, or (`device`
/// "unwatched", with `error`) a tree that cannot be watched.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DriveEntry {
    pub device: String,
    pub drives: Vec<Drive>,
    #[serde(with = "crate::pathtext::json_vec")]
    pub paths: Vec<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The controller the drive is behind (`max_active_per_controller`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<String>,
    /// Its fleet group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// One entry of `plan`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanReply {
    pub device: String,
    pub plan: Plan,
}

/// The last sampling round.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SampleRecord {
    pub at: i64,
    pub sample: DriveSample,
    pub judgement: Judgement,
    /// When the stale data will read below a floor (from this round and
    /// the drive's earlier ones; `None`: not enough ages measured yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<Forecast>,
}

/// One entry of `survey`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SurveyReply {
    pub device: String,
    pub drives: Vec<Drive>,
    #[serde(with = "crate::pathtext::json_vec")]
    pub paths: Vec<PathBuf>,
    pub state: HealthState,
    pub sample: Option<SampleRecord>,
}

/// One entry of `now`: the request number to wait for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NowAccepted {
    pub device: String,
    pub request: u64,
}

/// One entry of `pause` and `resume`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PauseReply {
    pub device: String,
    pub paused: bool,
}

#[cfg(test)]
mod tests;
