//! State the pacer shares with the daemon: whether and why the refresh
//! yields.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// What the operator sees: whether and why the refresh yields, and for how
/// long it has in total. Shared with the daemon.
#[derive(Debug, Default)]
pub struct PaceStatus {
    /// Total time spent yielding, in nanoseconds.
    yielded_ns: AtomicU64,
    now: Mutex<Option<Yielding>>,
}

/// The refresh is yielding now.
#[derive(Debug, Clone, PartialEq)]
pub struct Yielding {
    /// Seconds since the Unix epoch.
    pub since: i64,
    pub reason: String,
}

impl PaceStatus {
    pub fn yielded(&self) -> Duration {
        Duration::from_nanos(self.yielded_ns.load(Ordering::Relaxed))
    }

    pub fn yielding(&self) -> Option<Yielding> {
        self.now.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(super) fn set(&self, y: Option<Yielding>) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = y;
    }

    pub(super) fn add(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.yielded_ns.fetch_add(ns, Ordering::Relaxed);
    }
}
