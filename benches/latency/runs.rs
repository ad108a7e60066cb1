//! One run: a refresh in the background (its per-file JSON timed) beside a
//! reader, or the reader alone.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::beds::{Bed, MIB};
use crate::judge::{round_order, RoundRatios};
use crate::readers::{BlockTail, Latencies, Reader};

/// What the refresh did while the reader ran.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub mib_per_s: f64,
}

/// What runs beside the reader in one case of a cell.
pub enum Case {
    /// Nothing: the reader alone, the baseline every ratio is against.
    Idle,
    /// This build at the daemon's defaults (`--rate 50MiB/s`, yielding),
    /// as root: its pacer times the drive's reads one by one where the
    /// kernel allows.
    Default,
    /// The same with the shipped unit's capabilities only (its
    /// `CapabilityBoundingSet=`), not root's: no `CAP_BPF`, `CAP_PERFMON`
    /// or `CAP_SYS_ADMIN`, so its pacer cannot time the drive's reads one
    /// by one and steers on their mean alone, as the daemon under systemd
    /// does. Only the capabilities differ: the unit's `Nice=10` is not
    /// applied (the refresh under `nice -n 10` beside the loop devices'
    /// readers measured no difference one run's noise does not make:
    /// docs/benchmarks.md).
    AsTheUnit,
    /// Another build (its path) at the defaults, as root: a candidate
    /// law judged beside the current one in the same rounds
    /// (`REFRESHD_BENCH_CANDIDATES`).
    Candidate(String),
    /// This build at a fixed rate (MiB/s), not yielding (`--yield off`).
    Fixed(u64),
}

impl Case {
    /// The refresh's command, all but the files (`None`: idle).
    fn command(&self) -> Option<Command> {
        let bin = env!("CARGO_BIN_EXE_refreshd");
        let mut cmd = match self {
            Case::Idle => return None,
            Case::Default | Case::Fixed(_) => Command::new(bin),
            Case::Candidate(path) => Command::new(path),
            Case::AsTheUnit => {
                let mut c = Command::new("setpriv");
                // Root's capabilities after exec are its bounding set and
                // its inheritable set together: both go.
                c.args(["--inh-caps=-all", "--ambient-caps=-all"]).args([
                    "--bounding-set",
                    unit_bounding_set(),
                    "--",
                    bin,
                ]);
                c
            }
        };
        cmd.env(
            "REFRESHD_STATE_DIR",
            concat!(env!("CARGO_TARGET_TMPDIR"), "/bench-state"),
        )
        .args(["refresh", "--no-progress", "--json"]);
        match self {
            Case::Fixed(mib) => cmd.args(["--yield", "off", "--rate", &format!("{mib}MiB/s")]),
            _ => cmd.args(["--rate", "50MiB/s"]),
        };
        Some(cmd)
    }
}

/// The unit's bounding set as `setpriv --bounding-set` takes it
/// (`-all,+lease,…`), read from systemd/refreshd.service: the unit is
/// what is measured, whatever it grants.
fn unit_bounding_set() -> &'static str {
    static SET: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SET.get_or_init(read_unit_bounding_set)
}

fn read_unit_bounding_set() -> String {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/refreshd.service"
    ))
    .unwrap();
    // systemd joins repeated lines; a `~` list or an empty reset would
    // need systemd's rules, which the unit does not use today.
    let lists: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .collect();
    assert!(
        !lists.is_empty()
            && lists
                .iter()
                .all(|l| !l.trim().is_empty() && !l.starts_with('~')),
        "the unit's CapabilityBoundingSet= is not a plain list: {lists:?}"
    );
    let mut set = String::from("-all");
    for cap in lists.iter().flat_map(|l| l.split_whitespace()) {
        let name = cap.strip_prefix("CAP_").expect("CAP_ names").to_lowercase();
        set += &format!(",+{name}");
    }
    set
}

fn drop_caches() {
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

/// A refresh running in the background; its per-file JSON lines are timed,
/// and `ended` is set when it exits.
struct Refresh {
    pid: i32,
    waiter: std::thread::JoinHandle<std::process::ExitStatus>,
    done: std::sync::mpsc::Receiver<(Duration, u64)>,
    ended: Arc<AtomicBool>,
    /// What ran, for a failure's message.
    what: String,
}

impl Refresh {
    fn start(dir: &Path, mut cmd: Command) -> Refresh {
        let mut child = cmd
            .arg(dir.join("aged"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        let what = format!("{cmd:?}");
        let out = child.stdout.take().unwrap();
        let pid = child.id() as i32;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // The summary's bytes (the last file's too, interrupted or
            // not) and the time the refresh ran.
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                let s = &v["summary"];
                if let (Some(b), Some(t)) = (s["bytes_refreshed"].as_u64(), s["elapsed_s"].as_f64())
                {
                    let _ = tx.send((Duration::from_secs_f64(t), b));
                }
            }
        });
        let ended = Arc::new(AtomicBool::new(false));
        let flag = ended.clone();
        let waiter = std::thread::spawn(move || {
            let s = child.wait().unwrap();
            flag.store(true, Ordering::Relaxed);
            s
        });
        Refresh {
            pid,
            waiter,
            done: rx,
            ended,
            what,
        }
    }

    /// Stops it (SIGINT: it ends after its I/O in flight) if it still
    /// runs after `window`, else waits for its end: (bytes done, the time
    /// it ran).
    fn finish(self, window: Duration) -> (u64, Duration) {
        let cut = !window.is_zero() && !self.ended.load(Ordering::Relaxed);
        if cut {
            let pid = nix::unistd::Pid::from_raw(self.pid);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        }
        let status = self.waiter.join().unwrap();
        assert!(
            cut || status.success(),
            "refresh failed: {status}: {}",
            self.what
        );
        let (ran, bytes) = self
            .done
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|_| panic!("no summary from the refresh: {}", self.what));
        (bytes, ran)
    }
}

/// The reader beside `case`'s refresh, for at most `secs` (less when the
/// refresh ends first).
pub fn run_case(
    bed: &Bed<'_>,
    reader: Reader,
    case: &Case,
    secs: u64,
) -> (Latencies, Option<Outcome>) {
    (bed.age)();
    drop_caches();
    let window = Duration::from_secs(secs);
    let refresh = case.command().map(|c| Refresh::start(&bed.dir, c));
    let never = AtomicBool::new(false);
    let stop = refresh.as_ref().map_or(&never, |r| &*r.ended);
    let before = bed.reads.as_ref().map(|r| r.histogram());
    let mut lat = reader.run(&bed.dir.join("app"), window, stop);
    lat.block = bed.reads.as_ref().zip(before).and_then(|(r, b)| {
        let h = r.histogram().since(&b);
        let ms = |q: f64| h.quantile(q).map(|d| d.as_secs_f64() * 1e3);
        Some(BlockTail {
            p99_ms: ms(0.99)?,
            p999_ms: ms(0.999)?,
        })
    });
    let outcome = refresh.map(|r| {
        let (bytes, ran) = r.finish(window);
        Outcome {
            mib_per_s: bytes as f64 / MIB as f64 / ran.as_secs_f64(),
        }
    });
    (lat, outcome)
}

/// A whole refresh with no reader: its time.
pub fn time_alone(bed: &Bed<'_>, case: &Case) -> Duration {
    (bed.age)();
    drop_caches();
    let cmd = case.command().expect("a refresh");
    Refresh::start(&bed.dir, cmd).finish(Duration::ZERO).1
}

/// A cell's cases run in rounds, `repeats` of them: each round runs the
/// idle case (`cases[0]`) first and then every other case once, so each
/// case is compared with the idle run of its own round, not with idle
/// runs made before all of them: the machine's state drifts. On
/// loop-none · QD8, run case by case, the default's three runs back to
/// back read p99 1.29, 1.30, 1.30× idle and a fixed 4 MiB/s's three, a
/// minute later, 1.02, 1.00, 1.12; twenty minutes later one run of each
/// read 1.16 and 1.37.
///
/// The cases after idle go in an order that changes by cell (`turn`, the
/// cell's number) and round (`judge::round_order`): no case holds one
/// slot, or follows one neighbour, in every cell and round, so what a
/// slot or the run before does to a run is spread over the cases, not
/// read as a difference between two builds of one law (2026-12-07,
/// night: the same code read p99 1.30× as `default`, always right after
/// idle, and 1.22× as a candidate, always after the unit's run; the
/// slot may be why).
/// Returns each case's runs, round by round, in `cases`' order.
pub fn rounds(
    bed: &Bed<'_>,
    reader: Reader,
    cases: &[Case],
    secs: u64,
    repeats: usize,
    turn: usize,
) -> Vec<Vec<Run>> {
    let mut runs: Vec<Vec<Run>> = cases.iter().map(|_| vec![]).collect();
    for round in 0..repeats.max(1) {
        for i in round_order(cases.len(), turn * repeats.max(1) + round) {
            let (lat, outcome) = run_case(bed, reader, &cases[i], secs);
            runs[i].push(Run { lat, outcome });
        }
    }
    runs
}

/// One run of a case.
#[derive(Clone, Copy)]
pub struct Run {
    pub lat: Latencies,
    pub outcome: Option<Outcome>,
}

/// The median of each side of pairs.
fn median_pair(pairs: &[(f64, f64)]) -> (f64, f64) {
    (
        median(pairs.iter().map(|p| p.0).collect()),
        median(pairs.iter().map(|p| p.1).collect()),
    )
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The idle runs' medians (what the cell's line shows).
pub fn medians(idle: &[Run]) -> Latencies {
    let of = |f: fn(&Latencies) -> f64| median(idle.iter().map(|r| f(&r.lat)).collect());
    let blocks: Vec<(f64, f64)> = idle
        .iter()
        .filter_map(|r| r.lat.block)
        .map(|b| (b.p99_ms, b.p999_ms))
        .collect();
    Latencies {
        iops: of(|l| l.iops),
        mean_ms: of(|l| l.mean_ms),
        p99_ms: of(|l| l.p99_ms),
        block: (blocks.len() == idle.len()).then(|| {
            let (p99_ms, p999_ms) = median_pair(&blocks);
            BlockTail { p99_ms, p999_ms }
        }),
    }
}

/// A case against idle: each ratio the median over the rounds of the
/// case's run against the idle run of the same round.
pub struct Ratios {
    pub mean: f64,
    pub p99: f64,
    /// The drive's reads (p99, p99.9), where every run timed them.
    pub block: Option<(f64, f64)>,
    /// Each round's run against that round's idle run.
    pub each: Vec<RoundRatios>,
    /// The median of what the refresh did while the reader ran.
    pub mib_per_s: f64,
}

impl Ratios {
    pub fn of(case: &[Run], idle: &[Run]) -> Ratios {
        let pairs: Vec<(&Latencies, &Latencies)> = case
            .iter()
            .zip(idle)
            .map(|(c, i)| (&c.lat, &i.lat))
            .collect();
        let ratio = |f: fn(&Latencies) -> f64| -> Vec<f64> {
            pairs.iter().map(|(c, i)| f(c) / f(i)).collect()
        };
        let blocks: Vec<(f64, f64)> = pairs
            .iter()
            .filter_map(|(c, i)| {
                let (c, i) = (c.block?, i.block?);
                Some((c.p99_ms / i.p99_ms, c.p999_ms / i.p999_ms))
            })
            .collect();
        let rates: Vec<f64> = case
            .iter()
            .map(|r| r.outcome.expect("a refresh ran").mib_per_s)
            .collect();
        let (means, p99s) = (ratio(|l| l.mean_ms), ratio(|l| l.p99_ms));
        let each = (0..rates.len())
            .map(|k| RoundRatios {
                mean: means[k],
                p99: p99s[k],
                mib_per_s: rates[k],
            })
            .collect();
        Ratios {
            mean: median(means),
            p99: median(p99s),
            block: (blocks.len() == pairs.len()).then(|| median_pair(&blocks)),
            each,
            mib_per_s: median(rates),
        }
    }

    /// Within the latency target (1.2× idle, mean and p99).
    pub fn within(&self) -> bool {
        self.mean <= 1.2 && self.p99 <= 1.2
    }
}
