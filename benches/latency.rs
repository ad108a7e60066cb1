//! The application's latency while refreshd works, side by side in one run.
//!
//! A foreground reader runs for `REFRESHD_BENCH_LATENCY_SECS` (default 15)
//! on a fresh file, beside a refresh of aged data started with it:
//!
//! - `idle`: no refresh (the baseline every ratio is against);
//! - `before`: `--yield off --io-priority inherit` (what refreshd did);
//! - `priorities`: `--yield off` (per-request idle/best-effort 7 only);
//! - `default`: the default settings (`--yield auto`, idle priority).
//!
//! Every refresh runs at the daemon's default `--rate 50MiB/s`. Readers:
//! `fio --rw=randread --bs=4k --direct=1 --iodepth=1` and a Solr-like
//! reader (mmap, random 16 KiB touches, evicted after each touch so every
//! touch reads the drive). Reported: IOPS, mean, p50, p99, p99.9 as ratios
//! to idle, and the refresh's throughput while the reader ran and its total
//! time. Then, with no reader, the refresh alone at the default settings
//! against `before` (throughput ratio) and the throttle at 20 MiB/s.
//!
//! Drives: the testbed (840evo, 8 channels, ext4, data aged 6 months), and
//! a plain loop device (ext4) with the `bfq` and `mq-deadline` schedulers.
//! `REFRESHD_BENCH_ONLY=testbed|bfq|mq-deadline` runs one. Root needed.
#![allow(clippy::unwrap_used)]

#[path = "../tests/helpers/mod.rs"]
mod helpers;
#[path = "latency/readers.rs"]
mod readers;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use helpers::{pattern, LoopFs};
use readers::{Latencies, Reader};

const MIB: u64 = 1 << 20;
/// Files of the aged data set (several, so progress is seen per file).
const FILE_MIB: u64 = 8;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn drop_caches() {
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

/// A drive under test: where the files are, and how to age them.
struct Bed<'a> {
    name: String,
    dir: PathBuf,
    age: Box<dyn Fn() + 'a>,
    /// The refresh's `--rate`.
    rate: &'static str,
}

fn make_files(dir: &Path, total_mib: u64) {
    use std::io::Write;
    std::fs::create_dir_all(dir.join("aged")).unwrap();
    for i in 0..total_mib / FILE_MIB {
        let mut f = std::fs::File::create(dir.join(format!("aged/seg{i:03}"))).unwrap();
        for k in 0..FILE_MIB {
            f.write_all(&pattern(MIB as usize, i * 1000 + k)).unwrap();
        }
        f.sync_all().unwrap();
    }
    write_app_file(dir);
}

/// The reader's file, (re)written: fresh data.
fn write_app_file(dir: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("app")).unwrap();
    for k in 0..256 {
        f.write_all(&pattern(MIB as usize, 7_000 + k)).unwrap();
    }
    f.sync_all().unwrap();
}

/// A refresh running in the background; its per-file JSON lines are timed,
/// and `ended` is set when it exits.
struct Refresh {
    waiter: std::thread::JoinHandle<std::process::ExitStatus>,
    started: Instant,
    done: std::sync::mpsc::Receiver<(Duration, u64)>,
    ended: Arc<AtomicBool>,
}

impl Refresh {
    fn start(dir: &Path, extra: &[&str]) -> Refresh {
        let mut child = Command::new(env!("CARGO_BIN_EXE_refreshd"))
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
        let started = Instant::now();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                if let Some(b) = v.get("bytes_refreshed").and_then(|b| b.as_u64()) {
                    if v.get("path").is_some() {
                        let _ = tx.send((started.elapsed(), b));
                    }
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
            waiter,
            started,
            done: rx,
            ended,
        }
    }

    /// Waits for the end: (bytes done within `window`, total time).
    fn finish(self, window: Duration) -> (u64, Duration) {
        let status = self.waiter.join().unwrap();
        assert!(status.success(), "refresh failed: {status}");
        let total = self.started.elapsed();
        let within = self
            .done
            .try_iter()
            .filter(|(t, _)| *t <= window)
            .map(|(_, b)| b)
            .sum();
        (within, total)
    }
}

const CASES: &[(&str, &[&str])] = &[
    ("before", &["--yield", "off", "--io-priority", "inherit"]),
    ("priorities", &["--yield", "off"]),
    ("default", &[]),
];

fn run_case(
    bed: &Bed<'_>,
    reader: Reader,
    extra: Option<&[&str]>,
    secs: u64,
) -> (Latencies, Option<(u64, Duration)>) {
    (bed.age)();
    drop_caches();
    let window = Duration::from_secs(secs);
    let refresh = extra.map(|x| {
        let mut args = vec!["--rate", bed.rate];
        args.extend_from_slice(x);
        Refresh::start(&bed.dir, &args)
    });
    // The reader measures while the refresh runs (at most `secs`).
    let never = AtomicBool::new(false);
    let stop = refresh.as_ref().map_or(&never, |r| &*r.ended);
    let lat = reader.run(&bed.dir.join("app"), window, stop);
    (lat, refresh.map(|r| r.finish(window)))
}

fn table(bed: &Bed<'_>, reader: Reader, secs: u64, data_mib: u64) {
    let (idle, _) = run_case(bed, reader, None, secs);
    println!(
        "\n{} · {}: idle {:.0} IOPS, mean {:.3} ms, p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms",
        bed.name,
        reader.name(),
        idle.iops,
        idle.mean_ms,
        idle.p50_ms,
        idle.p99_ms,
        idle.p999_ms
    );
    println!(
        "  {:<11} {:>7} {:>7} {:>7} {:>7} {:>7}   {:>16} {:>9}",
        "refresh", "IOPS", "mean", "p50", "p99", "p99.9", "refresh MiB/s*", "done in"
    );
    for (name, extra) in CASES {
        let (l, r) = run_case(bed, reader, Some(extra), secs);
        let (within, total) = r.unwrap();
        let ran = total.min(Duration::from_secs(secs)).as_secs_f64();
        println!(
            "  {:<11} {:>6.2}× {:>6.2}× {:>6.2}× {:>6.2}× {:>6.2}×   {:>16.1} {:>7.1} s",
            name,
            l.iops / idle.iops,
            l.mean_ms / idle.mean_ms,
            l.p50_ms / idle.p50_ms,
            l.p99_ms / idle.p99_ms,
            l.p999_ms / idle.p999_ms,
            within as f64 / MIB as f64 / ran,
            total.as_secs_f64(),
        );
    }
    println!(
        "  (ratios to idle; --rate {}; the reader runs while the refresh does, at most {secs} s; * refreshed meanwhile; {data_mib} MiB of data)",
        bed.rate
    );
}

/// No reader: the refresh at the default settings against `before`, and
/// the throttle's accuracy while the drive is idle.
fn alone(bed: &Bed<'_>, data_mib: u64) {
    let time = |extra: &[&str]| {
        (bed.age)();
        drop_caches();
        Refresh::start(&bed.dir, extra).finish(Duration::ZERO).1
    };
    let before = time(&[
        "--rate",
        "50MiB/s",
        "--yield",
        "off",
        "--io-priority",
        "inherit",
    ]);
    let now = time(&["--rate", "50MiB/s"]);
    // The throttle, well below what the drive reads.
    let slow_off = time(&[
        "--rate",
        "10MiB/s",
        "--yield",
        "off",
        "--io-priority",
        "inherit",
    ]);
    let slow = time(&["--rate", "10MiB/s"]);
    let rate = |t: Duration| data_mib as f64 / t.as_secs_f64();
    println!(
        "  no reader, --rate {}: default {:.1} MiB/s vs before {:.1} MiB/s: {:.3}×",
        bed.rate,
        rate(now),
        rate(before),
        rate(now) / rate(before),
    );
    println!(
        "  --rate 10MiB/s, no reader: default {:.3}× the rate, before {:.3}× (whole run, files opened and synced included)",
        rate(slow) / 10.0,
        rate(slow_off) / 10.0
    );
}

fn testbed_drive(tmp: &Path, data_mib: u64) -> testbed::Drive {
    let opts = testbed::DriveOptions {
        size: (data_mib + 256) * MIB * 2 + 256 * MIB,
        model: testbed::Model::preset("840evo").unwrap(),
        channels: 8,
        ..testbed::DriveOptions::default()
    };
    testbed::Drive::up(tmp, &opts).unwrap()
}

fn testbed_bed(d: &testbed::Drive, data_mib: u64) -> Bed<'_> {
    let dir = d.path("bench");
    make_files(&dir, data_mib);
    let app_dir = dir.clone();
    Bed {
        name: "testbed 840evo, ext4".into(),
        dir,
        // The refresh's data ages 6 months; the reader's file is written
        // again, fresh, as the application's hot data would be.
        age: Box::new(move || {
            d.age(6.0);
            write_app_file(&app_dir);
        }),
        rate: "50MiB/s",
    }
}

fn loop_bed<'a>(fs: &'a LoopFs, scheduler: &str, data_mib: u64) -> Bed<'a> {
    let name = fs.dev.trim_start_matches("/dev/");
    std::fs::write(format!("/sys/block/{name}/queue/scheduler"), scheduler).unwrap();
    let dir = fs.path("bench");
    make_files(&dir, data_mib);
    Bed {
        name: format!("loop device ({scheduler}), ext4"),
        dir,
        age: Box::new(|| {}),
        // This VM's disk reads several hundred MiB/s: 50 MiB/s hardly
        // loads it. An operator refreshing unthrottled does.
        rate: "2GiB/s",
    }
}

fn main() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED latency benchmark: needs root");
        return;
    }
    if Command::new("fio").arg("--version").output().is_err() {
        eprintln!("SKIPPED latency benchmark: fio is not installed (apt-get install fio)");
        return;
    }
    let secs = env_u64("REFRESHD_BENCH_LATENCY_SECS", 15);
    let data_mib = env_u64("REFRESHD_BENCH_LATENCY_MIB", 256) / FILE_MIB * FILE_MIB;
    let loop_mib = env_u64("REFRESHD_BENCH_LATENCY_LOOP_MIB", 1024) / FILE_MIB * FILE_MIB;
    let only = std::env::var("REFRESHD_BENCH_ONLY").unwrap_or_default();
    let want = |s: &str| only.is_empty() || only == s;
    if want("testbed") {
        let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
        let drive = testbed_drive(tmp.path(), data_mib);
        let bed = testbed_bed(&drive, data_mib);
        for reader in [Reader::Fio, Reader::Mmap] {
            table(&bed, reader, secs, data_mib);
        }
        alone(&bed, data_mib);
    }
    for sched in ["bfq", "mq-deadline"] {
        if want(sched) {
            let fs = LoopFs::with_options("ext4", loop_mib + 1024, true);
            let bed = loop_bed(&fs, sched, loop_mib);
            table(&bed, Reader::Fio, secs, loop_mib);
            alone(&bed, loop_mib);
        }
    }
}
