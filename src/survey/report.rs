//! What a survey is asked and what it answers per drive.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::drive::Drive;
use crate::policy::{self, Judgement, Plan, Thresholds};
use crate::sampler::DriveSample;

/// Options of `refreshd survey`.
#[derive(Debug, Clone)]
pub struct SurveyOptions {
    pub paths: Vec<PathBuf>,
    pub stale_after: Duration,
    pub sample_bytes: crate::units::ByteSize,
    pub thresholds: Thresholds,
    pub min_free: crate::units::ByteSize,
    pub seed: u64,
    /// Where the daemon keeps its record (last refresh per file): ages
    /// are what the daemon would say when it can be read.
    pub state_dir: PathBuf,
}

/// One drive's result.
#[derive(Debug, Clone, Serialize)]
pub struct DriveReport {
    /// The drive name(s), `+`-joined for multi-device filesystems.
    pub device: String,
    pub drives: Vec<Drive>,
    #[serde(with = "crate::pathtext::json_vec")]
    pub paths: Vec<PathBuf>,
    pub files: u64,
    pub bytes: u64,
    pub sample: DriveSample,
    pub judgement: Judgement,
    /// healthy, degraded or unknown (one round: unconfirmed).
    pub verdict: String,
    pub plan: Plan,
    /// Where the data's ages come from (the daemon's record, or mtimes
    /// only, and why).
    pub ages: String,
    /// When the stale data will read below a floor, from this round's
    /// ages (`None`: fewer than two ages read measurably slower than fresh).
    pub forecast: Option<policy::forecast::Forecast>,
}
