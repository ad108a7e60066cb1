//! State the pacer shares: with the ring (our own completed requests,
//! and the priorities requests carry) and with the daemon (whether and
//! why the refresh yields).

use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::IOPRIO_BE7;
use crate::config::IoPriority;

/// The refresh's own I/O since the pacer last looked, and the I/O
/// priority its reads carry. Shared by the ring (which fills it) and the
/// pacer (which empties it) on the I/O thread.
#[derive(Debug, Default)]
pub struct OwnIo {
    done: Mutex<OwnDone>,
    /// Our reads submitted and not yet completed.
    reads_in_flight: AtomicUsize,
    pub(super) read_ioprio: AtomicU16,
    write_ioprio: AtomicU16,
}

#[derive(Debug, Default)]
pub(super) struct OwnDone {
    /// Completed reads: length, latency, and whether it had the drive to
    /// itself (nothing else of ours in flight when it started).
    pub(super) reads: Vec<(u64, Duration, bool)>,
    pub(super) writes: Vec<u64>,
    /// Own I/O the kernel did for us without requests we can count
    /// (relocation's copy and compare): this tick's counters are unusable.
    pub(super) uncounted: bool,
}

impl OwnIo {
    pub fn read_started(&self) {
        self.reads_in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A read completed, failed or not.
    pub fn read_ended(&self) {
        let _ = self
            .reads_in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    pub fn reads_in_flight(&self) -> usize {
        self.reads_in_flight.load(Ordering::Relaxed)
    }

    /// A read completed whole (`latency` from submit to completion).
    pub fn read_done(&self, len: u64, latency: Duration, alone: bool) {
        let mut d = self.done.lock().unwrap_or_else(|e| e.into_inner());
        d.reads.push((len, latency, alone));
    }

    pub fn write_done(&self, len: u64) {
        let mut d = self.done.lock().unwrap_or_else(|e| e.into_inner());
        d.writes.push(len);
    }

    /// The kernel is about to do I/O of ours we cannot count.
    pub fn uncounted(&self) {
        self.done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .uncounted = true;
    }

    pub fn read_ioprio(&self) -> u16 {
        self.read_ioprio.load(Ordering::Relaxed)
    }

    pub fn write_ioprio(&self) -> u16 {
        self.write_ioprio.load(Ordering::Relaxed)
    }

    /// Writes under a lease must finish inside the lease-break time, so
    /// they never run in the idle class: `thread_default` is what the
    /// thread's own class calls for (see `sys::write_ioprio`).
    pub fn set_write_ioprio(&self, priority: IoPriority, thread_default: u16) {
        let p = match priority {
            IoPriority::Idle => IOPRIO_BE7,
            IoPriority::Inherit => thread_default,
        };
        self.write_ioprio.store(p, Ordering::Relaxed);
    }

    pub(super) fn take(&self) -> OwnDone {
        std::mem::take(&mut *self.done.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

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
