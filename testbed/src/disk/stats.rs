//! What `agingssd stats` reports, and the counters behind it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::state::DiskState;

/// Counters for `agingssd stats`.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) reads: AtomicU64,
    pub(super) read_bytes: AtomicU64,
    pub(super) writes: AtomicU64,
    pub(super) write_bytes: AtomicU64,
    pub(super) read_errors: AtomicU64,
    pub(super) write_errors: AtomicU64,
    pub(super) discards: AtomicU64,
    /// Requests whose real I/O on the store took longer than the model's
    /// service time: the emulator was slower than the drive it models.
    pub(super) overruns: AtomicU64,
    pub(super) overrun_us: AtomicU64,
    pub(super) slowest_io_us: AtomicU64,
}

impl Counters {
    /// Notes how long one request's real I/O took against its modelled
    /// service time.
    pub(super) fn io_took(&self, spent: Duration, service: Duration) {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.slowest_io_us.fetch_max(us(spent), Ordering::Relaxed);
        if spent > service {
            self.overruns.fetch_add(1, Ordering::Relaxed);
            self.overrun_us
                .fetch_add(us(spent - service), Ordering::Relaxed);
        }
    }
}

/// What `stats` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stats {
    pub model: String,
    pub channels: u32,
    pub size: u64,
    pub now_months: f64,
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub read_errors: u64,
    /// Writes refused with EIO (write faults).
    #[serde(default)]
    pub write_errors: u64,
    pub discards: u64,
    /// Requests whose real I/O took longer than the modelled service time,
    /// and by how much in all: non-zero means the emulator, not the model,
    /// set the speed for a while (CPU starvation, a slow host).
    #[serde(default)]
    pub overruns: u64,
    #[serde(default)]
    pub overrun_us: u64,
    /// The slowest single real I/O on the store, µs.
    #[serde(default)]
    pub slowest_io_us: u64,
    /// Written blocks by whole months of age: (months, blocks).
    pub age_histogram: Vec<(u32, u64)>,
    pub faults: Vec<(u64, u64)>,
    /// Writes that touched a faulty range: (offset, length).
    pub faulty_writes: Vec<(u64, u64)>,
    /// Ranges whose writes fail with EIO.
    #[serde(default)]
    pub write_faults: Vec<(u64, u64)>,
}

impl DiskState {
    pub fn stats(&self) -> Stats {
        let mut hist: std::collections::BTreeMap<u32, u64> = Default::default();
        for i in 0..self.stamps.len() {
            if let Some(age) = self.block_age(i) {
                *hist.entry(age.floor() as u32).or_default() += 1;
            }
        }
        let c = &self.counters;
        Stats {
            model: self.model.name.to_string(),
            channels: self.channels,
            size: self.size,
            now_months: self.now_months(),
            reads: c.reads.load(Ordering::Relaxed),
            read_bytes: c.read_bytes.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            write_bytes: c.write_bytes.load(Ordering::Relaxed),
            read_errors: c.read_errors.load(Ordering::Relaxed),
            write_errors: c.write_errors.load(Ordering::Relaxed),
            write_faults: self
                .write_faults
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|r| (r.start, r.end - r.start))
                .collect(),
            discards: c.discards.load(Ordering::Relaxed),
            overruns: c.overruns.load(Ordering::Relaxed),
            overrun_us: c.overrun_us.load(Ordering::Relaxed),
            slowest_io_us: c.slowest_io_us.load(Ordering::Relaxed),
            age_histogram: hist.into_iter().collect(),
            faults: self
                .faults
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|r| (r.start, r.end - r.start))
                .collect(),
            faulty_writes: self
                .faulty_writes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }
}
