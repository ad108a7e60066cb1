//! The application's read latency, told apart from ours: from the drive's
//! counters (reads completed and the milliseconds they took, summed) minus
//! what our own reads account for there.

use std::collections::VecDeque;

use super::device::Counters;
use crate::io::account::{likely_pieces, OwnDone};

/// Ticks summed into one estimate (the counters and our completions are
/// read at slightly different moments; a window evens that out).
pub const WINDOW_TICKS: usize = 5;
/// Fewer of the application's reads than this in a window: no estimate.
pub const MIN_READS: u64 = 8;

/// One tick of the application's reads: how many, and their time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TickReads {
    /// Signed: a read of ours the drive counted in an earlier tick than we
    /// reaped it shows as -1 here and +1 there; summed, it cancels out.
    pub reads: i64,
    pub ms: f64,
    /// Bytes our own reads completed in the tick.
    pub own_bytes: u64,
}

/// Separates the application's reads from ours, tick by tick.
#[derive(Debug, Default)]
pub struct Separator {
    last: Option<Counters>,
    window: VecDeque<TickReads>,
    /// In a section of our own I/O that we cannot count, since these
    /// counters (see [`Separator::begin_uncounted`]).
    uncounted_since: Option<Counters>,
    /// What the drive counted in such sections since the last tick.
    uncounted: Counters,
}

impl Separator {
    /// Forgets everything (another drive).
    pub fn reset(&mut self) {
        *self = Separator::default();
    }

    /// Our own I/O the drive counts and we cannot starts (the metadata
    /// the kernel reads to open and plan a file, relocation's copies):
    /// what the drive counts until [`Separator::end_uncounted`] is left
    /// out of the tick it falls in, the application's reads in that
    /// while too. Not the whole tick: at 50 MiB/s a 4 MiB file starts
    /// and ends in every 100 ms tick, and a pacer that left those ticks
    /// out never saw an application (the loop devices of the latency
    /// matrix, 2026-11-28).
    pub fn begin_uncounted(&mut self, now: Counters) {
        self.uncounted_since = Some(now);
    }

    /// The section ends at `now`. `false`: it cannot be left out (the
    /// counters could not be read): the caller leaves the tick out.
    pub fn end_uncounted(&mut self, now: Option<Counters>) -> bool {
        match (self.uncounted_since.take(), now) {
            (Some(since), Some(now)) => {
                self.uncounted = self.uncounted.plus(now.since(since));
                true
            }
            // Begun without readable counters: its tick is left out.
            (None, Some(_)) => true,
            (_, None) => false,
        }
    }

    /// Between ticks: the drive's reads since the last tick, less what
    /// sections of ours counted; `None` in a section or before a first
    /// reading.
    pub fn reads_since_tick(&self, now: Counters) -> Option<u64> {
        if self.uncounted_since.is_some() {
            return None;
        }
        let last = self.last?;
        Some(now.since(last).since(self.uncounted).reads)
    }

    /// Takes this tick's counters and our completions. Returns the
    /// application's reads of this tick, or `None` when they cannot be
    /// told apart (first reading, unreadable counters, or I/O of ours the
    /// kernel did without countable requests).
    pub fn tick(&mut self, now: Option<Counters>, own: &OwnDone, max_io: u64) -> Option<TickReads> {
        let Some(now) = now else {
            self.last = None;
            self.uncounted_since = None;
            self.uncounted = Counters::default();
            return None;
        };
        // A section still open: what it counted so far is left out here
        // (none is today: `Throttle::uncounted` holds the pacer while its
        // section runs; a tick inside one would count it twice without).
        if let Some(since) = self.uncounted_since.as_mut() {
            self.uncounted = self.uncounted.plus(now.since(*since));
            *since = now;
        }
        let uncounted = std::mem::take(&mut self.uncounted);
        let last = self.last.replace(now)?;
        if own.uncounted {
            return None;
        }
        // The application's and ours, less what the sections counted.
        let counted = now.since(last).since(uncounted);
        // A request of ours longer than `max_io` is several reads at
        // the drive, each for about its latency.
        let own_reads: u64 = own.reads.iter().map(|r| likely_pieces(r.0, max_io)).sum();
        let own_ms: f64 = own
            .reads
            .iter()
            .map(|r| likely_pieces(r.0, max_io) as f64 * r.1.as_secs_f64() * 1e3)
            .sum();
        let t = TickReads {
            reads: counted.reads as i64 - own_reads as i64,
            ms: counted.read_ms as f64 - own_ms,
            own_bytes: own.read_bytes(),
        };
        self.window.push_back(t);
        if self.window.len() > WINDOW_TICKS {
            self.window.pop_front();
        }
        Some(t)
    }

    /// The application's reads over the window.
    pub fn reads(&self) -> u64 {
        self.window.iter().map(|t| t.reads).sum::<i64>().max(0) as u64
    }

    /// The mean time between the application's reads over the window,
    /// when it read at least half of [`MIN_READS`] (a light reader's gaps
    /// are what its pauses are told by).
    pub fn gap(&self, tick: std::time::Duration) -> Option<std::time::Duration> {
        self.per_sec(tick, MIN_READS / 2)
            .map(|r| std::time::Duration::from_secs_f64(1.0 / r))
    }

    /// The application's reads per second over the window, when it read
    /// enough to say.
    pub fn reads_per_sec(&self, tick: std::time::Duration) -> Option<f64> {
        self.per_sec(tick, MIN_READS)
    }

    /// What our own reads read over the window, in bytes a second (0
    /// with no window).
    pub fn own_per_sec(&self, tick: std::time::Duration) -> f64 {
        let bytes: u64 = self.window.iter().map(|t| t.own_bytes).sum();
        let span = self.span(tick);
        if span > 0.0 {
            bytes as f64 / span
        } else {
            0.0
        }
    }

    fn per_sec(&self, tick: std::time::Duration, at_least: u64) -> Option<f64> {
        let reads = self.reads();
        (reads >= at_least.max(1)).then(|| reads as f64 / self.span(tick))
    }

    /// The window's length in seconds.
    fn span(&self, tick: std::time::Duration) -> f64 {
        (tick * self.window.len() as u32).as_secs_f64()
    }

    /// The application's mean read latency over the window, in ms, when
    /// it read enough to say.
    pub fn latency_ms(&self) -> Option<f64> {
        let reads = self.reads();
        if reads < MIN_READS {
            return None;
        }
        let ms: f64 = self.window.iter().map(|t| t.ms).sum();
        Some((ms / reads as f64).max(0.0))
    }

    /// Starts a fresh window (after a change of ours the old ticks would
    /// blur).
    pub fn restart(&mut self) {
        self.window.clear();
    }
}
