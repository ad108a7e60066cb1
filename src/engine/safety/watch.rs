//! What the executor asks the guard between any two steps: stop now
//! (lease break, cancel), room for more bytes (free space), until when a
//! write is covered by the lease; and why a file stopped.

use std::time::{Duration, Instant};

pub use crate::io::fileio::NoWriteInFlight;

/// How often, at most, the executor looks at the lease and the stop flag
/// while it waits for I/O or for the throttle.
pub const POLL: Duration = Duration::from_millis(20);

/// Why a file stopped before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// Another process opened or truncated the file.
    LeaseBroken,
    /// Shutdown or Ctrl-C.
    Cancelled,
    /// Free space fell to the watermark.
    LowSpace { free: u64, watermark: u64 },
}

impl StopReason {
    /// The stable cause an interrupted file reports.
    pub fn cause(&self) -> crate::engine::report::Interruption {
        use crate::engine::report::Interruption;
        match self {
            StopReason::LeaseBroken => Interruption::InUse,
            StopReason::Cancelled => Interruption::Cancelled,
            StopReason::LowSpace { .. } => Interruption::LowSpace,
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::LeaseBroken => write!(f, "another process opened the file"),
            StopReason::Cancelled => write!(f, "cancelled"),
            StopReason::LowSpace { free, watermark } => write!(
                f,
                "free space {} is below the watermark {}",
                crate::units::format_size(*free),
                crate::units::format_size(*watermark)
            ),
        }
    }
}

/// What the executor asks between steps.
pub trait Watch {
    /// Stop now? (lease break, cancel)
    fn should_stop(&mut self) -> Option<StopReason>;
    /// May `len` more bytes be written? (free space on copy-on-write)
    fn space_for(&mut self, len: u64) -> Result<(), StopReason>;
    /// Until when a write is provably covered by our lease: the last time
    /// the kernel said we hold it, plus the lease-break time (the kernel
    /// cannot hand the file to anyone before). `None`: no lease to bound.
    fn lease_deadline(&self) -> Option<Instant> {
        None
    }
    /// No write of ours is in flight now (after one completed): the
    /// file's times are exactly what our own writes left. Only the one
    /// who counts the writes can say so (see [`NoWriteInFlight`]).
    fn quiescent(&mut self, _proof: NoWriteInFlight) {}
    /// A write of ours is about to be submitted.
    fn writing(&mut self) {}
}
