//! The files a sampling round chooses from, kept bucket by bucket while
//! the inventory streams by: per data-age bucket the counts and bytes, and
//! a reservoir of candidates drawn by allocated bytes without replacement
//! (Efraimidis–Spirakis: each file gets the key ln(u)/w, the largest keys
//! win). Memory is bounded by the reservoirs, whatever the number of files.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::inventory::FileRecord;
use refreshd_protocol::sample::{bucket_of, BUCKET_EDGES, MONTH};

/// Candidates kept per bucket (a round measures up to 64; some may have
/// been replaced or hold no readable extent by then).
pub const CANDIDATES: usize = 128;

/// One data-age bucket.
#[derive(Debug, Default)]
pub struct Group {
    pub files: u64,
    pub bytes: u64,
    pub stale_files: u64,
    pub stale_bytes: u64,
    /// Allocated bytes (the weights).
    pub alloc: u64,
    /// Sum of age (months) × size, for the bytes' mean age.
    age_bytes: f64,
    reservoir: BinaryHeap<Reverse<Keyed>>,
}

impl Group {
    /// The mean age of the bucket's bytes, in months (`None`: no bytes).
    pub fn mean_months(&self) -> Option<f64> {
        (self.bytes > 0).then(|| self.age_bytes / self.bytes as f64)
    }

    /// Every file of the bucket is stale.
    pub fn all_stale(&self) -> bool {
        self.files > 0 && self.stale_files == self.files
    }

    /// The candidates, best key first (a weighted random order).
    pub fn candidates(self) -> Vec<FileRecord> {
        let mut v: Vec<Keyed> = self.reservoir.into_iter().map(|Reverse(k)| k).collect();
        v.sort_by(|a, b| b.cmp(a));
        v.into_iter().map(|k| k.rec).collect()
    }
}

#[derive(Debug)]
struct Keyed {
    key: f64,
    rec: FileRecord,
}

impl PartialEq for Keyed {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Keyed {}
impl PartialOrd for Keyed {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Keyed {
    fn cmp(&self, o: &Self) -> Ordering {
        self.key
            .total_cmp(&o.key)
            .then_with(|| (self.rec.dev, self.rec.ino).cmp(&(o.rec.dev, o.rec.ino)))
    }
}

/// All buckets of one round.
#[derive(Debug)]
pub struct Buckets {
    now: i64,
    stale_after: Duration,
    groups: Vec<Group>,
    rng: SmallRng,
}

impl Buckets {
    pub fn new(now: i64, stale_after: Duration, seed: u64) -> Buckets {
        Buckets {
            now,
            stale_after,
            groups: (0..BUCKET_EDGES.len()).map(|_| Group::default()).collect(),
            rng: SmallRng::seed_from_u64(seed ^ 0x5eed_5eed),
        }
    }

    /// Counts one file and offers it to its bucket's reservoir.
    pub fn add(&mut self, f: FileRecord) {
        let age = f.data_age(self.now);
        let months = age.as_secs_f64() / MONTH;
        let g = &mut self.groups[bucket_of(months)];
        g.files += 1;
        g.bytes += f.size;
        g.age_bytes += months * f.size as f64;
        g.alloc += f.alloc;
        if age >= self.stale_after {
            g.stale_files += 1;
            g.stale_bytes += f.size;
        }
        if f.alloc == 0 {
            return; // nothing to read: never a candidate
        }
        let u: f64 = self.rng.random::<f64>().max(f64::MIN_POSITIVE);
        let key = u.ln() / f.alloc as f64;
        if g.reservoir.len() < CANDIDATES {
            g.reservoir.push(Reverse(Keyed { key, rec: f }));
        } else if g.reservoir.peek().is_some_and(|Reverse(min)| key > min.key) {
            g.reservoir.pop();
            g.reservoir.push(Reverse(Keyed { key, rec: f }));
        }
    }

    pub fn into_groups(self) -> Vec<Group> {
        self.groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ino: u64, alloc: u64, months_old: f64, now: i64) -> FileRecord {
        FileRecord {
            fs: crate::io::fsid::FsId::Dev(1),
            dev: 1,
            ino,
            path: format!("/t/{ino}").into(),
            size: alloc,
            alloc,
            mtime: crate::clock::Timestamp::new(now - (months_old * MONTH) as i64, 0),
            btime: None,
            generation: None,
            last_refresh: None,
        }
    }

    #[test]
    fn counts_every_file_and_keeps_a_bounded_reservoir() {
        let now = 2_000_000_000;
        let mut b = Buckets::new(now, Duration::from_secs(86_400 * 30), 7);
        for i in 0..10_000 {
            b.add(rec(i, 4096, 6.5, now));
        }
        b.add(rec(99_999, 0, 6.5, now));
        let g = b.into_groups().swap_remove(6);
        assert_eq!((g.files, g.stale_files), (10_001, 10_001));
        assert!(g.all_stale());
        let c = g.candidates();
        assert_eq!(c.len(), CANDIDATES);
        assert!(
            c.iter().all(|r| r.alloc > 0),
            "empty files are never candidates"
        );
    }

    #[test]
    fn candidates_follow_allocated_bytes() {
        // One file holds as many bytes as 1,000 small ones: it is chosen
        // in about half of the rounds (weight 1000 / 2000).
        let now = 2_000_000_000;
        let mut big_first = 0;
        for seed in 0..400 {
            let mut b = Buckets::new(now, Duration::ZERO, seed);
            b.add(rec(0, 1000 * 4096, 2.5, now));
            for i in 1..=1000 {
                b.add(rec(i, 4096, 2.5, now));
            }
            let c = b.into_groups().swap_remove(2).candidates();
            if c[0].ino == 0 {
                big_first += 1;
            }
        }
        assert!((150..250).contains(&big_first), "{big_first} of 400");
    }

    #[test]
    fn the_same_seed_makes_the_same_choices() {
        let now = 2_000_000_000;
        let pick = |seed| {
            let mut b = Buckets::new(now, Duration::ZERO, seed);
            for i in 0..1000 {
                b.add(rec(i, 4096 * (1 + i % 7), 1.5, now));
            }
            b.into_groups().swap_remove(1).candidates()
        };
        assert_eq!(pick(3), pick(3));
        assert_ne!(pick(3), pick(4));
    }
}
