//! The contract between the driver and the strategies: what a strategy
//! gets for one file ([`FileJob`]: the opened file under its guard, the
//! throttle, the lease clock, the report to fill) and what it hands back
//! ([`Done`]). The strategies are siblings below this module and import
//! only this contract and the layers below the engine's driver.
//!
//! - [`inplace`]: read and write back the same bytes through O_DIRECT,
//!   under an exclusive lease, with a crash-journal record.
//! - [`relocate`]: kernel-mediated copies (MOVE_EXT on ext4,
//!   FIDEDUPERANGE on XFS and btrfs) for files other processes hold open.

use crate::engine::pacing::throttle::Throttle;
use crate::engine::report::{FileReport, Outcome};
use crate::engine::safety::attrwatch::AttrWatch;
use crate::engine::safety::guard::{Opened, Target};
use crate::engine::safety::journal::Record;
use crate::engine::safety::lease::LeaseClock;
use crate::engine::settings::EngineConfig;

pub mod inplace;
pub mod relocate;

/// What a strategy hands back to the driver.
#[derive(Debug)]
pub(crate) struct Done {
    pub outcome: Outcome,
    /// The strategy wrote through the file (in place): its mtime moved and
    /// must be put back, if the lease still covers us.
    pub wrote_in_place: bool,
}

impl Done {
    pub fn new(outcome: Outcome, wrote_in_place: bool) -> Done {
        Done {
            outcome,
            wrote_in_place,
        }
    }
}

/// Everything a strategy needs for one file.
pub(crate) struct FileJob<'a, 'fd> {
    pub target: &'a Target,
    pub opened: &'a Opened,
    pub cfg: &'a EngineConfig,
    pub skip: u64,
    pub throttle: &'a mut Throttle,
    pub clock: &'a mut LeaseClock<'fd>,
    pub report: &'a mut FileReport,
    pub progress: &'a mut dyn FnMut(u64),
    /// The crash-recovery record, opened by the in-place strategy before
    /// its first write and settled by the driver.
    pub record: &'a mut Option<Record>,
    /// Other processes' attribute changes while the file is written in
    /// place (`None` for relocation, or when no watch could be made).
    pub attrs: &'a mut Option<AttrWatch<'fd>>,
}
