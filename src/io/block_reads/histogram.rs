//! The counts the programs keep, read and compared in user space.

use std::time::Duration;

use super::programs::{BUCKETS, UNIT_SHIFT};

/// Reads counted by how long they took at the drive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
        }
    }
}

/// The bucket of a time in units of 1,024 ns, as `programs::bucket`
/// computes it in the kernel (its test runs both).
#[cfg(test)]
pub fn bucket_of(units: u64) -> usize {
    let v = units.min((1 << 24) - 1);
    if v < 16 {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros() as u64;
    ((msb - 3) * 16 + ((v >> (msb - 4)) & 15)) as usize
}

/// The times in a bucket, in units: from, up to (not including).
pub fn bucket_span(b: usize) -> (u64, u64) {
    if b < 16 {
        return (b as u64, b as u64 + 1);
    }
    let (msb, sub) = ((b / 16 + 3) as u64, (b % 16) as u64);
    ((16 + sub) << (msb - 4), (17 + sub) << (msb - 4))
}

impl Histogram {
    pub fn from_counts(counts: Vec<u64>) -> Histogram {
        assert_eq!(counts.len(), BUCKETS);
        Histogram { counts }
    }

    /// Counts a time (the programs count in the kernel; tests here).
    #[cfg(test)]
    pub fn add(&mut self, t: Duration) {
        let units = (t.as_nanos() >> UNIT_SHIFT) as u64;
        self.counts[bucket_of(units)] += 1;
    }

    /// What was counted since `before` (a snapshot of the same counts).
    pub fn since(&self, before: &Histogram) -> Histogram {
        let counts = self
            .counts
            .iter()
            .zip(&before.counts)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        Histogram { counts }
    }

    /// All of `counts` together (reads of different whiles, pooled).
    pub fn pooled<'a>(counts: impl IntoIterator<Item = &'a Histogram>) -> Histogram {
        counts
            .into_iter()
            .fold(Histogram::default(), |sum, h| sum.plus(h))
    }

    /// Both counts together (reads of different whiles, pooled).
    pub fn plus(&self, more: &Histogram) -> Histogram {
        let counts = self
            .counts
            .iter()
            .zip(&more.counts)
            .map(|(a, b)| a + b)
            .collect();
        Histogram { counts }
    }

    pub fn reads(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The time `q` (0 < q ≤ 1) of the reads took at most, as the upper
    /// bound of its bucket (over by at most 1/16); `None` with no reads.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let n = self.reads();
        if n == 0 {
            return None;
        }
        let want = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        let b = self.counts.iter().position(|c| {
            seen += c;
            seen >= want
        })?;
        Some(Duration::from_nanos(bucket_span(b).1 << UNIT_SHIFT))
    }
}
