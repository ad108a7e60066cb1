//! The drive's own counters: completed requests, from sysfs.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::io::block_reads::{Histogram, ReadTimes};

/// A drive's cumulative counters (`/sys/block/<dev>/stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Reads completed.
    pub reads: u64,
    /// Time those reads took, summed over the reads, in milliseconds.
    pub read_ms: u64,
    /// Writes completed.
    pub writes: u64,
}

impl Counters {
    /// What was counted since `before` (never below zero).
    pub fn since(self, before: Counters) -> Counters {
        Counters {
            reads: self.reads.saturating_sub(before.reads),
            read_ms: self.read_ms.saturating_sub(before.read_ms),
            writes: self.writes.saturating_sub(before.writes),
        }
    }

    pub fn plus(self, more: Counters) -> Counters {
        Counters {
            reads: self.reads + more.reads,
            read_ms: self.read_ms + more.read_ms,
            writes: self.writes + more.writes,
        }
    }
}

/// Completed requests of a drive, whoever issued them.
pub trait DeviceCounters: Send {
    /// A name for messages (`sda`, `loop3+loop4`).
    fn name(&self) -> &str;
    /// The counters so far; `None` if they cannot be read.
    fn read(&mut self) -> Option<Counters>;
    /// Largest request the block layer sends the drive whole: a longer one
    /// of ours counts as several.
    fn max_io(&self) -> u64;
    /// Reads in flight on the drive right now, whoever issued them
    /// (`/sys/block/<dev>/inflight`); `None` if it cannot be read.
    fn reads_in_flight(&mut self) -> Option<u64> {
        None
    }
    /// Others' reads timed one by one so far (see
    /// [`crate::io::block_reads`]); `None` where they cannot be.
    fn read_times(&mut self) -> Option<Histogram> {
        None
    }
}

/// `/sys/block/<name>/stat` of one or more whole drives, summed.
#[derive(Debug)]
pub struct SysBlock {
    name: String,
    stats: Vec<PathBuf>,
    inflight: Vec<PathBuf>,
    max_io: u64,
    drives: Vec<String>,
    sys: PathBuf,
    /// Started when first asked for (a `SysBlock` is made for every
    /// file; the pacer keeps the one of a drive it already watches).
    times: Option<Option<ReadTimes>>,
}

impl SysBlock {
    /// The drives named (as in `crate::drive::Drive::name`) under `sys`.
    pub fn new(sys: &Path, drives: &[String]) -> Option<SysBlock> {
        if drives.is_empty() {
            return None;
        }
        let block = sys.join("block");
        let mut max_io = u64::MAX;
        for d in drives {
            let q = block.join(d).join("queue");
            let kb = read_u64(&q.join("max_sectors_kb")).unwrap_or(128);
            let segs = read_u64(&q.join("max_segments")).unwrap_or(128);
            max_io = max_io.min((kb * 1024).min(segs * 4096)).max(4096);
        }
        let s = SysBlock {
            name: drives.join("+"),
            stats: drives.iter().map(|d| block.join(d).join("stat")).collect(),
            inflight: drives
                .iter()
                .map(|d| block.join(d).join("inflight"))
                .collect(),
            max_io,
            drives: drives.to_vec(),
            sys: sys.to_path_buf(),
            times: None,
        };
        Some(s)
    }
}

fn read_u64(p: &Path) -> Option<u64> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

impl DeviceCounters for SysBlock {
    fn name(&self) -> &str {
        &self.name
    }

    fn read(&mut self) -> Option<Counters> {
        let mut sum = Counters::default();
        for p in &self.stats {
            let text = fs::read_to_string(p).ok()?;
            let v: Vec<u64> = text
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            // Fields: reads completed (0), merged (1), sectors (2), read
            // ticks in ms (3), writes completed (4), …
            sum.reads += *v.first()?;
            sum.read_ms += *v.get(3)?;
            sum.writes += *v.get(4)?;
        }
        Some(sum)
    }

    fn max_io(&self) -> u64 {
        self.max_io
    }

    fn reads_in_flight(&mut self) -> Option<u64> {
        let mut sum = 0;
        for p in &self.inflight {
            // "reads writes"
            let text = fs::read_to_string(p).ok()?;
            sum += text.split_whitespace().next()?.parse::<u64>().ok()?;
        }
        Some(sum)
    }

    fn read_times(&mut self) -> Option<Histogram> {
        let (sys, drives, name) = (&self.sys, &self.drives, &self.name);
        let times = self.times.get_or_insert_with(|| {
            ReadTimes::start(sys, drives)
                .map_err(|e| {
                    // Once per process: the reason is the host's or the
                    // sandbox's, the same for every drive.
                    static SAID: AtomicBool = AtomicBool::new(false);
                    if !SAID.swap(true, Ordering::Relaxed) {
                        tracing::info!(
                            "the application's reads on {name} are not timed one by one \
                             (the pacer sees their mean; status shows no p99): {e}"
                        )
                    }
                })
                .ok()
        });
        times.as_ref().map(ReadTimes::histogram)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_drives_and_takes_the_smallest_request_limit() {
        let root = tempfile::tempdir().unwrap();
        for (d, stat, kb, segs) in [
            ("sda", "10 0 80 30 5 0 40 0 0 0 0", "1280", "128"),
            ("sdb", "1 0 8 4 2 0 16 0 0 0 0", "64", "128"),
        ] {
            let q = root.path().join("block").join(d).join("queue");
            fs::create_dir_all(&q).unwrap();
            fs::write(root.path().join("block").join(d).join("stat"), stat).unwrap();
            fs::write(
                root.path().join("block").join(d).join("inflight"),
                "       2        5\n",
            )
            .unwrap();
            fs::write(q.join("max_sectors_kb"), kb).unwrap();
            fs::write(q.join("max_segments"), segs).unwrap();
        }
        let mut s = SysBlock::new(root.path(), &["sda".into(), "sdb".into()]).unwrap();
        assert_eq!(s.name(), "sda+sdb");
        assert_eq!(
            s.read(),
            Some(Counters {
                reads: 11,
                read_ms: 34,
                writes: 7
            })
        );
        assert_eq!(s.max_io(), 64 << 10);
        assert_eq!(s.reads_in_flight(), Some(4), "reads only, summed");
        fs::remove_file(root.path().join("block/sdb/stat")).unwrap();
        assert_eq!(s.read(), None, "a drive that vanished: no counts");
    }
}
