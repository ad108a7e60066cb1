//! What a sampling round measured on a drive, by data-age bucket.

use serde::{Deserialize, Serialize};

/// A month, in seconds (an average one).
pub const MONTH: f64 = 30.44 * 86_400.0;

/// Data-age buckets, in months: `[edge[i], edge[i+1])`, the last open.
pub const BUCKET_EDGES: [f64; 11] = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 9.0, 12.0, 24.0];

/// Index of the bucket for an age in months.
pub fn bucket_of(months: f64) -> usize {
    BUCKET_EDGES.iter().rposition(|&e| months >= e).unwrap_or(0)
}

/// "0-1", …, "24+".
pub fn bucket_label(i: usize) -> String {
    match BUCKET_EDGES.get(i + 1) {
        Some(hi) => format!("{}-{}", BUCKET_EDGES[i], hi),
        None => format!("{}+", BUCKET_EDGES[i]),
    }
}

/// p25/p50/p75/p95 and mean, the columns of the table in docs/DESIGN.md.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Percentiles {
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub p95: f64,
    pub mean: f64,
    pub count: usize,
}

impl Percentiles {
    /// Nearest-rank percentiles (linear interpolation between ranks).
    pub fn of(values: &[f64]) -> Option<Percentiles> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let q = |p: f64| {
            let pos = p * (v.len() - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
        };
        Some(Percentiles {
            p25: q(0.25),
            p50: q(0.5),
            p75: q(0.75),
            p95: q(0.95),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            count: v.len(),
        })
    }
}

/// What one set of reads measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Sequential throughput per region, bytes/s.
    pub throughput: Option<Percentiles>,
    /// All sequential bytes over all sequential time, bytes/s.
    pub aggregate_bps: Option<f64>,
    /// Latency of 4 KiB reads at queue depth 1, milliseconds.
    pub latency_ms: Option<Percentiles>,
    pub bytes_read: u64,
    /// Reads that failed (EIO…); they are reported, not retried.
    pub errors: u64,
}

impl Measurement {
    /// The robust throughput statistic: the median over regions.
    pub fn median_bps(&self) -> Option<f64> {
        self.throughput.map(|t| t.p50)
    }
}

/// One data-age bucket of a drive.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BucketSample {
    pub label: String,
    pub min_months: f64,
    pub files: u64,
    pub bytes: u64,
    pub stale: bool,
    pub measured: Measurement,
    /// The mean age of the bucket's data, by bytes (months).
    #[serde(default)]
    pub mean_months: Option<f64>,
}

/// A round on one drive.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DriveSample {
    pub fresh: Option<Measurement>,
    /// Why there is no fresh reference, if there is none.
    pub fresh_missing: Option<String>,
    pub buckets: Vec<BucketSample>,
    /// All stale buckets together.
    pub stale: Measurement,
    pub stale_files: u64,
    pub stale_bytes: u64,
    pub bytes_read: u64,
    pub canary_bytes: u64,
    pub seconds: f64,
}
