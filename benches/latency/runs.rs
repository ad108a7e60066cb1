//! One run: a refresh in the background (its per-file JSON timed) beside a
//! reader, or the reader alone.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::beds::{Bed, MIB};
use crate::readers::{BlockTail, Latencies, Reader};

/// What the refresh did while the reader ran.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub mib_per_s: f64,
}

/// A first argument that runs the refresh with the shipped unit's
/// capabilities only (its `CapabilityBoundingSet=`), not root's: no
/// `CAP_BPF`, `CAP_PERFMON` or `CAP_SYS_ADMIN`, so its pacer cannot time
/// the drive's reads one by one and steers on their mean alone, as the
/// daemon under systemd does. Only the capabilities differ: the unit's
/// `Nice=10` is not applied (the refresh under `nice -n 10` beside the
/// loop devices' readers measured no difference one run's noise does
/// not make: docs/benchmarks.md).
pub const AS_THE_UNIT: &str = "--as-the-unit";

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
    started: Instant,
    done: std::sync::mpsc::Receiver<(Duration, u64)>,
    ended: Arc<AtomicBool>,
}

impl Refresh {
    fn start(dir: &Path, extra: &[&str]) -> Refresh {
        let bin = env!("CARGO_BIN_EXE_refreshd");
        let (mut cmd, extra) = match extra.split_first() {
            Some((&AS_THE_UNIT, rest)) => {
                let mut c = Command::new("setpriv");
                // Root's capabilities after exec are its bounding set and
                // its inheritable set together: both go.
                c.args(["--inh-caps=-all", "--ambient-caps=-all"]).args([
                    "--bounding-set",
                    unit_bounding_set(),
                    "--",
                    bin,
                ]);
                (c, rest)
            }
            _ => (Command::new(bin), extra),
        };
        let mut child = cmd
            .env(
                "REFRESHD_STATE_DIR",
                concat!(env!("CARGO_TARGET_TMPDIR"), "/bench-state"),
            )
            .args(["refresh", "--no-progress", "--json"])
            .args(extra)
            .arg(dir.join("aged"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let pid = child.id() as i32;
        let started = Instant::now();
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
            started,
            done: rx,
            ended,
        }
    }

    /// Stops it (SIGINT: it ends after its I/O in flight) if it still
    /// runs after `window`, else waits for its end: (bytes done, the time
    /// it ran).
    fn finish(self, window: Duration) -> (u64, Duration) {
        let cut = !window.is_zero() && !self.ended.load(Ordering::Relaxed);
        let total = self.started.elapsed();
        if cut {
            let pid = nix::unistd::Pid::from_raw(self.pid);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        }
        let status = self.waiter.join().unwrap();
        assert!(cut || status.success(), "refresh failed: {status}");
        let _ = total;
        let (ran, bytes) = self
            .done
            .recv_timeout(Duration::from_secs(5))
            .expect("the refresh's summary");
        (bytes, ran)
    }
}

/// The reader beside a refresh with `extra` arguments (`None`: alone),
/// for at most `secs` (less when the refresh ends first).
pub fn run_case(
    bed: &Bed<'_>,
    reader: Reader,
    extra: Option<&[&str]>,
    secs: u64,
) -> (Latencies, Option<Outcome>) {
    (bed.age)();
    drop_caches();
    let window = Duration::from_secs(secs);
    let refresh = extra.map(|x| Refresh::start(&bed.dir, x));
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
pub fn time_alone(bed: &Bed<'_>, extra: &[&str]) -> Duration {
    (bed.age)();
    drop_caches();
    Refresh::start(&bed.dir, extra).finish(Duration::ZERO).1
}

/// A case run `repeats` times: each field the median of its runs (a 5 s
/// run's p99 on the loop devices moves by a third between runs of the
/// same setting), and each run's latencies, for their spread.
pub struct Repeated {
    pub lat: Latencies,
    pub outcome: Option<Outcome>,
    pub each: Vec<Latencies>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn repeat_case(
    bed: &Bed<'_>,
    reader: Reader,
    extra: Option<&[&str]>,
    secs: u64,
    repeats: usize,
) -> Repeated {
    let runs: Vec<_> = (0..repeats.max(1))
        .map(|_| run_case(bed, reader, extra, secs))
        .collect();
    let each: Vec<Latencies> = runs.iter().map(|r| r.0).collect();
    let of = |f: fn(&Latencies) -> f64| median(each.iter().map(f).collect());
    let blocks: Vec<BlockTail> = each.iter().filter_map(|l| l.block).collect();
    let lat = Latencies {
        iops: of(|l| l.iops),
        mean_ms: of(|l| l.mean_ms),
        p99_ms: of(|l| l.p99_ms),
        block: (blocks.len() == each.len()).then(|| BlockTail {
            p99_ms: median(blocks.iter().map(|b| b.p99_ms).collect()),
            p999_ms: median(blocks.iter().map(|b| b.p999_ms).collect()),
        }),
    };
    let outcomes: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.1)
        .map(|o| o.mib_per_s)
        .collect();
    let outcome = (!outcomes.is_empty()).then(|| Outcome {
        mib_per_s: median(outcomes),
    });
    Repeated { lat, outcome, each }
}
