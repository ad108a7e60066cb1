//! How fast and how surely refreshd finds a drive's state: the sampler and
//! the policy exactly as a drive's worker runs them, in-process, on three
//! testbed drives (1 GiB, 840evo model, 4 files of 32 MiB with mtimes six
//! months old):
//!   - aged: the data really is six months old on the flash: rounds and
//!     bytes read until it is confirmed degraded;
//!   - fresh: the data was just written: 20 rounds, how many say degraded
//!     (false positives);
//!   - link-capped: fresh data behind a 20 MB/s link: 20 rounds, how many
//!     say degraded (false positives: a rewrite cannot help) and how many
//!     say slow.
//!
//! Each round reads `REFRESHD_BENCH_SAMPLE_MIB` (default 32) MiB.
//!
//! `cargo bench --bench detect` (root and /dev/fuse needed).
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use refreshd::inventory::Store;
use refreshd::policy::{self, Fallbacks, Health, HealthState, Thresholds};
use refreshd::sampler::{self, SampleOptions};
use testbed::{Drive, DriveOptions, Model};

const MIB: u64 = 1 << 20;

fn drive(dir: &Path) -> Drive {
    let opts = DriveOptions {
        size: 1 << 30,
        model: Model::preset("840evo").unwrap(),
        ..DriveOptions::default()
    };
    std::fs::create_dir_all(dir).unwrap();
    let d = Drive::up(dir, &opts).unwrap();
    let tree = d.path("index");
    std::fs::create_dir_all(&tree).unwrap();
    let old = refreshd::inventory::now_secs() - 183 * 86_400;
    for i in 0..4u64 {
        let p = tree.join(format!("seg{i}"));
        let data: Vec<u8> = (0..32 * MIB).map(|b| (b as u8) ^ (i as u8)).collect();
        std::fs::write(&p, data).unwrap();
        let ts = rustix::fs::Timespec {
            tv_sec: old,
            tv_nsec: 0,
        };
        let times = rustix::fs::Timestamps {
            last_access: ts,
            last_modification: ts,
        };
        rustix::fs::utimensat(rustix::fs::CWD, &p, &times, rustix::fs::AtFlags::empty()).unwrap();
    }
    d.sync().unwrap();
    d
}

/// Runs up to `rounds` rounds; stops early at `until` if given. Returns
/// (rounds run, bytes read, verdicts).
fn rounds(d: &Drive, rounds: usize, until: Option<HealthState>) -> (usize, u64, Vec<HealthState>) {
    let tree = d.path("index");
    let state = tempfile::tempdir().unwrap();
    let mut store = Store::open(state.path()).unwrap();
    store.scan(&tree).unwrap();
    let files = store.files(&tree).unwrap();
    let budget = std::env::var("REFRESHD_BENCH_SAMPLE_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
        * MIB;
    let th = Thresholds {
        min_throughput: refreshd::units::Rate(100 * MIB),
        min_ratio: 0.5,
    };
    let mut health = Health::default();
    let (mut read, mut verdicts) = (0, vec![]);
    for r in 0..rounds {
        let now = refreshd::inventory::now_secs();
        let opts = SampleOptions {
            budget: refreshd::units::ByteSize(budget),
            stale_after: Duration::from_secs(30 * 86_400),
            canary_dir: Some(tree.clone()),
            canary_reserve: refreshd::units::ByteSize(64 * MIB),
            seed: r as u64,
            now,
        };
        let s = sampler::sample(&files, &opts).unwrap();
        read += s.bytes_read;
        let j = policy::judge_sample(&s, th, Fallbacks::default());
        let v = health.observe(&j);
        verdicts.push(v);
        if Some(v) == until {
            return (r + 1, read, verdicts);
        }
    }
    (rounds, read, verdicts)
}

fn count(v: &[HealthState], s: HealthState) -> usize {
    v.iter().filter(|&&x| x == s).count()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !rustix::process::geteuid().is_root() || !Path::new("/dev/fuse").exists() {
        println!("detect bench skipped: needs root and /dev/fuse");
        return;
    }
    let t = Instant::now();
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();

    let aged = drive(&tmp.path().join("aged"));
    aged.age(6.0);
    let (n, read, v) = rounds(&aged, 10, Some(HealthState::Degraded));
    println!(
        "aged 6 months:        confirmed degraded after {n} round(s), {} MiB read ({:?})",
        read / MIB,
        v.iter().map(|s| s.name()).collect::<Vec<_>>()
    );
    drop(aged);

    let fresh = drive(&tmp.path().join("fresh"));
    let (n, _, v) = rounds(&fresh, 20, None);
    println!(
        "fresh:                {} degraded, {} suspect, {} healthy of {n} rounds (false positives: {})",
        count(&v, HealthState::Degraded),
        count(&v, HealthState::Suspect),
        count(&v, HealthState::Healthy),
        count(&v, HealthState::Degraded)
    );
    drop(fresh);

    let capped = drive(&tmp.path().join("capped"));
    capped.link_cap(20_000_000);
    let (n, _, v) = rounds(&capped, 20, None);
    println!(
        "link capped 20 MB/s:  {} slow, {} degraded of {n} rounds (false positives: {})",
        count(&v, HealthState::Slow),
        count(&v, HealthState::Degraded),
        count(&v, HealthState::Degraded) + count(&v, HealthState::Suspect)
    );
    println!("(in {:.0} s)", t.elapsed().as_secs_f64());
}
