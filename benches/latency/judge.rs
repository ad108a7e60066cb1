//! How the latency benchmark orders a round's runs and weighs one law
//! against another. No I/O here: tests/latency_judge.rs tests it (a
//! bench without libtest's harness runs no tests of its own).

/// One round's run of a case against that round's idle run.
#[derive(Debug, Clone, Copy)]
pub struct RoundRatios {
    pub mean: f64,
    pub p99: f64,
    /// What the refresh did while the reader ran (MiB/s, not a ratio).
    pub mib_per_s: f64,
}

/// The order of one round's `n` cases: 0 (idle, the round's baseline)
/// first, the other `m = n − 1` in the `turn`th row of a Williams
/// design. Over every `m` turns (`2m` when `m` is odd) each of them
/// runs in each slot equally often, right after idle included, and
/// right after each other case equally often: a run can be touched by
/// the one before it (on a loop device, what the host's disk still
/// writes back), and a rotation alone would put every case after the
/// same neighbour in all but one turn in `m`.
pub fn round_order(n: usize, turn: usize) -> Vec<usize> {
    let m = n.saturating_sub(1);
    if m == 0 {
        return (0..n).collect();
    }
    // Williams' first row: 0, 1, m−1, 2, m−2, …; row t adds t (mod m).
    let first = (0..m).map(|k| {
        if k % 2 == 1 {
            k.div_ceil(2)
        } else {
            (m - k / 2) % m
        }
    });
    let t = turn % if m % 2 == 0 { m } else { 2 * m };
    let mut row: Vec<usize> = first.map(|c| 1 + (c + t) % m).collect();
    if t >= m {
        // m odd: the second m rows are the first m reversed.
        row.reverse();
    }
    std::iter::once(0).chain(row).collect()
}

/// A geometric mean of ratios and its 95 % interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub ratio: f64,
    /// The cells it is over: those where both laws' runs gave a finite
    /// ratio (a refresh that did nothing in a run has no log of its
    /// MiB/s; its cell is left out of that measure, not of the others).
    pub cells: usize,
    /// `None` from one cell: no spread to go by.
    pub bounds: Option<(f64, f64)>,
}

impl Interval {
    /// The interval of the mean of `logs` (Student's t over the cells),
    /// back from logarithms to ratios.
    fn of_logs(logs: &[f64]) -> Option<Interval> {
        let logs: Vec<f64> = logs.iter().copied().filter(|l| l.is_finite()).collect();
        if logs.is_empty() {
            return None;
        }
        let n = logs.len() as f64;
        let mean = logs.iter().sum::<f64>() / n;
        let bounds = (logs.len() > 1).then(|| {
            let var = logs.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n - 1.0);
            let half = t975(logs.len() - 1) * (var / n).sqrt();
            ((mean - half).exp(), (mean + half).exp())
        });
        Some(Interval {
            ratio: mean.exp(),
            cells: logs.len(),
            bounds,
        })
    }

    /// Whether 1 (no difference) is outside the interval.
    pub fn excludes_one(&self) -> bool {
        self.bounds.is_some_and(|(lo, hi)| lo > 1.0 || hi < 1.0)
    }

    pub fn show(&self) -> String {
        match self.bounds {
            Some((lo, hi)) => format!("×{:.3} ({lo:.3}–{hi:.3})", self.ratio),
            None => format!("×{:.3}", self.ratio),
        }
    }
}

/// The 97.5th percentile of Student's t with `df` degrees of freedom:
/// tabled to 30, then the normal's with the first two terms of its
/// expansion in 1/df (Cornish–Fisher: within 0.0005 of t from 31 on).
pub fn t975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    let z = 1.959_964_f64;
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        _ => {
            let df = df as f64;
            z + (z.powi(3) + z) / (4.0 * df)
                + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * df * df)
        }
    }
}

/// One law (`a`) against another (`b`), paired: the same cells, the same
/// rounds, each round's runs against the same idle run, so the idle run
/// cancels and what is left is a over b. Per cell the logarithm of a's
/// over b's, averaged over the rounds; over the cells, their geometric
/// mean with a 95 % interval. A cell's verdict flips with one run's
/// noise (the same code twice: 4 of 12 one-round verdicts apart); the
/// mean over every cell of how far apart two laws read is the steadier
/// measure, and its interval says whether a difference is more than
/// the cells' spread.
#[derive(Debug, Clone, PartialEq)]
pub struct Paired {
    pub p99: Interval,
    pub mean: Interval,
    /// `None` where no cell had a finite ratio of MiB/s.
    pub mib_per_s: Option<Interval>,
    /// Cells where a's p99 read lower than b's, and higher.
    pub p99_lower: usize,
    pub p99_higher: usize,
}

impl Paired {
    /// `a[cell][round]` against `b[cell][round]`: the same cells, each
    /// with the same rounds (every round runs every case). Cells with no
    /// rounds are left out; `None` with no cell left.
    pub fn of(a: &[Vec<RoundRatios>], b: &[Vec<RoundRatios>]) -> Option<Paired> {
        assert_eq!(a.len(), b.len(), "two laws over different cells");
        for (a, b) in a.iter().zip(b) {
            assert_eq!(a.len(), b.len(), "two laws over different rounds");
        }
        let per_cell = |f: fn(&RoundRatios) -> f64| -> Vec<f64> {
            a.iter()
                .zip(b)
                .filter(|(a, _)| !a.is_empty())
                .map(|(a, b)| {
                    let logs = a.iter().zip(b).map(|(a, b)| (f(a) / f(b)).ln());
                    logs.sum::<f64>() / a.len() as f64
                })
                .collect()
        };
        let p99 = per_cell(|r| r.p99);
        Some(Paired {
            p99: Interval::of_logs(&p99)?,
            mean: Interval::of_logs(&per_cell(|r| r.mean))?,
            mib_per_s: Interval::of_logs(&per_cell(|r| r.mib_per_s)),
            p99_lower: p99.iter().filter(|&&d| d < 0.0).count(),
            p99_higher: p99.iter().filter(|&&d| d > 0.0).count(),
        })
    }
}
