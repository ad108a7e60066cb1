//! What a drive's refresh will rewrite, in order.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One file to rewrite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanEntry {
    #[serde(with = "crate::pathtext::json")]
    pub path: PathBuf,
    /// The device number at the last scan (this boot).
    pub dev: u64,
    /// The filesystem's identity (UUID; stable across reboots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs: Option<crate::fsid::FsId>,
    pub ino: u64,
    pub size: u64,
    pub age_days: f64,
}

/// What to rewrite on a drive, in order.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Plan {
    pub files: Vec<PlanEntry>,
    pub bytes: u64,
    /// Stale, but rewritten less than `min_interval` ago.
    pub skipped_recent: u64,
    /// Left for another day by the daily budget.
    pub deferred_budget: u64,
}
