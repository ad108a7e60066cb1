//! What `agingssd stats` reports, and the counters behind it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

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
    /// service time by more than [`OVERRUN_SLACK`]: the emulator was
    /// slower than the drive it models.
    pub(super) overruns: AtomicU64,
    pub(super) overrun_us: AtomicU64,
    pub(super) slowest_io_us: AtomicU64,
}

/// What a thread's preemption alone can add to one request on a busy
/// machine: a real I/O this much past its service time is not counted.
pub const OVERRUN_SLACK: Duration = Duration::from_millis(1);

impl Counters {
    /// Notes how long one request's real I/O took against its modelled
    /// service time.
    pub(super) fn io_took(&self, spent: Duration, service: Duration) {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.slowest_io_us.fetch_max(us(spent), Ordering::Relaxed);
        if spent > service + OVERRUN_SLACK {
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

impl Stats {
    /// `stats` for people.
    pub fn render(&self) -> String {
        let s = self;
        let mut out = format!(
            "model {} · {} channels · {} MiB · virtual time {:.2} months\n\
             reads  {:>10} ({:.1} MiB), read errors {}\n\
             writes {:>10} ({:.1} MiB), discards {}\n",
            s.model,
            s.channels,
            s.size >> 20,
            s.now_months,
            s.reads,
            s.read_bytes as f64 / 1048576.0,
            s.read_errors,
            s.writes,
            s.write_bytes as f64 / 1048576.0,
            s.discards
        );
        if s.overruns > 0 {
            out.push_str(&format!(
                "SLOWER THAN THE MODEL: {} requests' real I/O overran their service time by {:.3} s in all (slowest {} µs)\n",
                s.overruns,
                s.overrun_us as f64 / 1e6,
                s.slowest_io_us
            ));
        }
        out.push_str("age of written data:\n");
        for (m, blocks) in &s.age_histogram {
            out.push_str(&format!(
                "  {m:>3}–{:<3} months {:>10.1} MiB\n",
                m + 1,
                *blocks as f64 * 4096.0 / 1048576.0
            ));
        }
        for (o, l) in &s.write_faults {
            out.push_str(&format!(
                "fault: writes of device bytes {o}..{} fail with EIO\n",
                o + l
            ));
        }
        if s.write_errors > 0 {
            out.push_str(&format!("write errors {}\n", s.write_errors));
        }
        for (o, l) in &s.faults {
            out.push_str(&format!(
                "fault: reads of device bytes {o}..{} fail with EIO\n",
                o + l
            ));
        }
        if s.faulty_writes.is_empty() {
            out.push_str("no write touched a faulty range\n");
        } else {
            for (o, l) in &s.faulty_writes {
                out.push_str(&format!("WRITE INTO FAULTY RANGE: {l} bytes at {o}\n"));
            }
        }
        out
    }
}
