//! `[defaults]` and each `[[paths]]` entry: how a drive is watched,
//! judged and refreshed. Every key is one entry of the table below.

use std::time::Duration;

use super::readers;
use super::table::table;
use super::windows::Windows;
use crate::engine::types::{IoPriority, Strategy, YieldMode, DEFAULT_FLOOR, DEFAULT_RATE};
use crate::engine::PaceSettings;
use crate::units::{ByteSize, Rate};

const DAY: u64 = 86_400;

const fn days(n: u64) -> Duration {
    Duration::from_secs(n * DAY)
}

table! {
    /// Settings that `[defaults]` sets and each `[[paths]]` entry may
    /// override. Trees on one drive must agree on all of them (a drive is
    /// judged and refreshed as one).
    pub struct Settings in "defaults" {
        /// Data older than this (now - max(mtime, last refresh)) is a
        /// refresh candidate.
        stale_after: Duration = days(30), key "stale_after", read readers::duration;
        /// How often the trees are rescanned (incremental: unchanged
        /// files cost a stat).
        scan_interval: Duration = Duration::from_secs(3600),
            key "scan_interval", read readers::interval;
        /// How often each drive's read speed is sampled.
        sample_interval: Duration = Duration::from_secs(6 * 3600),
            key "sample_interval", read readers::interval;
        /// Read budget per drive per sample round (O_DIRECT, bypasses the
        /// page cache; a quarter, at most 32MiB, goes to the fresh
        /// reference canary). At least 1MiB.
        sample_bytes: ByteSize = ByteSize(256 << 20), key "sample_bytes", read readers::budget;
        /// Stale-data read floor: below it the drive is degraded.
        min_throughput: Rate = Rate(100 << 20), key "min_throughput", read readers::rate;
        /// Stale/fresh throughput ratio floor (0..1): below it the drive is
        /// degraded. The fresh reference is, in order: a canary written for
        /// the round, the drive's recorded baseline, its freshest data,
        /// `expected_throughput`; with none of them the drive is
        /// "unjudged", never "healthy".
        min_ratio: f64 = 0.5, key "min_ratio", read readers::ratio;
        /// What fresh data reads at on these drives, if you know it (the
        /// reference of last resort).
        expected_throughput: Option<Rate> = None, key "expected_throughput",
            read |p, k, v| readers::rate(p, k, v).map(Some);
        /// Refresh throttle per drive (reads and writes of the same bytes).
        rate: Rate = DEFAULT_RATE, key "rate", read readers::rate;
        /// auto: while an application reads the drive, its read latency is
        /// held within 1.2× its latency alone and the refresh takes what
        /// that leaves (docs/DESIGN.md, Pacing); off: always `rate`.
        yield_mode: YieldMode = YieldMode::Auto, key "yield", read readers::value;
        /// The refresh never goes slower than this while sharing the drive.
        yield_floor: Rate = Rate(DEFAULT_FLOOR), key "yield_floor", read readers::rate;
        /// idle: reads in the idle I/O class, writes best-effort 7 (they
        /// must finish inside a lease break), per request; inherit: the
        /// daemon's own (ionice).
        io_priority: IoPriority = IoPriority::Idle, key "io_priority", read readers::value;
        /// Never refresh the same data more often than this.
        min_interval: Duration = days(30), key "min_interval", read readers::duration;
        /// Local-time maintenance windows; refreshes run only inside them.
        /// Several: "22:00-06:00, 12:00-13:00" (a window may wrap past
        /// midnight).
        window: Windows = Windows::always(), key "window", read readers::value;
        /// auto: in place under an exclusive lease, kernel relocation for
        /// files other processes keep open; inplace: files in use are
        /// skipped; relocate: always relocate.
        strategy: Strategy = Strategy::Auto, key "strategy", read readers::value;
        /// Most bytes refreshed per drive per day (unset: no limit).
        daily_budget: Option<ByteSize> = None, key "daily_budget",
            read |p, k, v| readers::size(p, k, v).map(Some), shown "unset (no limit)";
        /// Free space that must remain on the filesystem (relocation,
        /// btrfs); the sampling canary leaves the smaller of this and
        /// 64MiB.
        min_free: ByteSize = ByteSize(1 << 30), key "min_free", read readers::size;
    }
    extra {}
}

impl Settings {
    /// The pacing settings as the engine takes them: the rate, yielding
    /// to other I/O, request priorities.
    pub fn pace(&self) -> PaceSettings {
        PaceSettings {
            rate: Some(self.rate),
            mode: self.yield_mode,
            priority: self.io_priority,
            floor: self.yield_floor,
        }
    }
}
