//! `agingssd reproduce` (the seed experiment) and `agingssd demo` (see
//! refreshd make a slow drive fast again).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::drive::{Drive, DriveOptions};
use crate::measure::{bulk_read_parallel, drop_caches, fingerprint, random_reads};
use crate::model::Model;

/// The seed table (docs/DESIGN.md): age, search p25, p50, p75, p95, mean (ms),
/// hours for a bulk read of 900 GB.
pub const SEED: [(f64, f64, f64, f64, f64, f64, f64); 7] = [
    (0.9, 36.0, 50.0, 69.0, 269.0, 112.0, 1.11),
    (2.0, 99.0, 144.0, 196.0, 486.0, 203.0, 3.51),
    (3.0, 133.0, 198.0, 269.0, 590.0, 281.0, 6.06),
    (4.0, 141.0, 234.0, 324.0, 670.0, 330.0, 8.70),
    (5.1, 133.0, 183.0, 244.0, 520.0, 295.0, 5.85),
    (6.0, 106.0, 158.0, 211.0, 433.0, 204.0, 5.23),
    (7.0, 105.0, 227.0, 333.0, 703.0, 338.0, 10.49),
];

fn write_file(path: &Path, mib: usize, seed: u8) -> Result<()> {
    let mut f = std::fs::File::create(path)?;
    let mut block: Vec<u8> = (0..1usize << 20)
        .map(|i| (i as u8).wrapping_mul(seed | 1))
        .collect();
    for i in 0..mib {
        block[..8].copy_from_slice(&(i as u64).to_le_bytes());
        f.write_all(&block)?;
    }
    f.sync_all()?;
    Ok(())
}

fn hours_900gb(bytes_per_s: f64) -> f64 {
    900e9 / bytes_per_s / 3600.0
}

/// The `refreshd` binary: next to this one, in the workspace's target
/// directory, or built there with cargo.
pub fn find_refreshd() -> Result<PathBuf> {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut candidates = vec![];
    if let Some(dir) = std::env::current_exe()?.parent() {
        candidates.push(dir.join("refreshd"));
    }
    candidates.push(ws.join("target/release/refreshd"));
    candidates.push(ws.join("target/debug/refreshd"));
    if let Some(p) = candidates.iter().find(|p| p.is_file()) {
        return Ok(p.clone());
    }
    // cargo's own progress shows: the first build takes minutes.
    eprintln!("building refreshd (cargo build --release -p refreshd; minutes the first time) …");
    let ok = Command::new("cargo")
        .args([
            "build",
            "--release",
            "-p",
            "refreshd",
            "--bin",
            "refreshd",
            "--manifest-path",
        ])
        .arg(ws.join("Cargo.toml"))
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    let built = ws.join("target/release/refreshd");
    if ok && built.is_file() {
        return Ok(built);
    }
    bail!("the refreshd binary was not found; build it first with `cargo build --release`")
}

/// A work directory; Ctrl-C or SIGTERM tears its drive down before exiting
/// (signals are blocked here, before any other thread exists, and one
/// thread waits for them).
fn work_dir(name: &str) -> Result<tempfile_dir::TempDir> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block()?;
    let dir = tempfile_dir::TempDir::new(name)?;
    let path = dir.path().to_path_buf();
    std::thread::spawn(move || {
        if let Ok(sig) = set.wait() {
            INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
            eprintln!("agingssd: {sig}: tearing the drive down");
            let _ = crate::drive::cleanup_leftovers(&path);
            let _ = std::fs::remove_dir_all(&path);
            std::process::exit(130);
        }
    });
    Ok(dir)
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// True once Ctrl-C/SIGTERM started tearing a scenario's drive down: the
/// caller must not exit before that thread does (it exits the process).
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst)
}

/// A minimal temp dir under /var/tmp (the image must not live on tmpfs
/// memory twice over), removed on drop.
mod tempfile_dir {
    use std::path::{Path, PathBuf};
    #[derive(Debug)]
    pub struct TempDir(PathBuf);
    impl TempDir {
        pub fn new(name: &str) -> anyhow::Result<TempDir> {
            let p = PathBuf::from(format!("/var/tmp/agingssd-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&p)?;
            Ok(TempDir(p))
        }
        pub fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn evo_drive(dir: &Path, size: u64) -> Result<Drive> {
    let opts = DriveOptions {
        size,
        model: Model::preset("840evo").context("preset")?,
        channels: 8,
        ..DriveOptions::default()
    };
    Drive::up(dir, &opts)
}

/// The seed experiment: bulk read and small-read latency by data age.
pub fn reproduce(shard_mib: usize) -> Result<()> {
    crate::drive::preflight()?;
    let tmp = work_dir("reproduce")?;
    let d = evo_drive(tmp.path(), 1 << 30)?;
    let shard = d.path("shard");
    println!("agingssd reproduce: 840evo model, 8 channels, ext4, one {shard_mib} MiB index shard");
    write_file(&shard, shard_mib, 7)?;
    d.sync()?;
    let model = d.state.model;
    let measure = |label: &str| -> Result<(f64, crate::measure::Latency)> {
        drop_caches();
        let bulk = bulk_read_parallel(&shard, 8)?;
        let lat = random_reads(&shard, 300, 42)?;
        eprintln!("  measured {label}");
        Ok((bulk, lat))
    };
    let (fresh_bulk, fresh_lat) = measure("fresh")?;
    println!();
    println!("  age │ bulk read of 900 GB (h)          │ 4–16 KiB O_DIRECT reads, QD1 (ms)         │ seed search (ms)");
    println!("  (mo)│  seed  measured  ×fresh  model × │   p25    p50    p75    p95   mean         │  p50  mean");
    println!("  ────┼──────────────────────────────────┼───────────────────────────────────────────┼───────────");
    let row = |age: f64,
               seed_h: Option<f64>,
               bulk: f64,
               l: crate::measure::Latency,
               seed: Option<(f64, f64)>| {
        let s = |v: Option<f64>| v.map_or("    – ".to_string(), |v| format!("{v:>6.2}"));
        println!(
            "  {age:>4.1}│ {} {:>8.2} {:>7.2} {:>8.2} │ {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>6.2}         │ {}",
            s(seed_h),
            hours_900gb(bulk),
            fresh_bulk / bulk,
            model.bulk_factor(age),
            l.p25,
            l.p50,
            l.p75,
            l.p95,
            l.mean,
            seed.map_or("   –     –".to_string(), |(p, m)| format!("{p:>5.0} {m:>5.0}"))
        );
    };
    row(0.0, None, fresh_bulk, fresh_lat, None);
    let mut now = 0.0;
    for (age, _p25, p50, _p75, _p95, mean, hours) in SEED {
        d.age(age - now);
        now = age;
        let (bulk, lat) = measure(&format!("{age} months"))?;
        row(age, Some(hours), bulk, lat, Some((p50, mean)));
    }
    println!();
    println!("  The seed's ages come from different drives (its 5–6 month rows are faster than");
    println!("  its 4 month row); the model is the smooth fit: slow growth to 1 month, a steep");
    println!("  rise from 1 to 4 months, a plateau near 10× for bulk reads.");

    let before = fingerprint(&shard)?;
    let refreshd = find_refreshd()?;
    let out = Command::new(&refreshd)
        .args(["refresh", "--no-progress"])
        .arg(&shard)
        .output()?;
    if !out.status.success() {
        bail!(
            "refreshd refresh failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let (bulk, lat) = measure("after refresh")?;
    println!();
    println!(
        "  after `refreshd refresh`: {:.2} h per 900 GB ({:.2}× fresh), p50 {:.2} ms (fresh {:.2} ms); contents {}",
        hours_900gb(bulk),
        fresh_bulk / bulk,
        lat.p50,
        fresh_lat.p50,
        if fingerprint(&shard)? == before { "identical" } else { "CHANGED" }
    );
    d.down()
}

/// The README's "see it work": a drive with 6-month-old files, slow; one
/// `refreshd refresh`; fast again.
pub fn demo() -> Result<()> {
    crate::drive::preflight()?;
    let refreshd = find_refreshd()?;
    let tmp = work_dir("demo")?;
    println!("Building an emulated Samsung 840 EVO-like drive (FUSE image, loop device, ext4) …");
    let d = evo_drive(tmp.path(), 1 << 30)?;
    let names: Vec<String> = (0..6).map(|i| format!("shard-{i}")).collect();
    for (i, n) in names.iter().enumerate() {
        write_file(&d.path(n), 48, i as u8 + 1)?;
    }
    d.sync()?;
    let prints: Vec<u64> = names
        .iter()
        .map(|n| fingerprint(&d.path(n)))
        .collect::<Result<_>>()?;
    drop_caches();
    let fresh = bulk_read_parallel(&d.path(&names[0]), 8)?;
    println!(
        "Wrote 6 × 48 MiB of index shards; fresh they read at {:.0} MB/s.",
        fresh / 1e6
    );
    println!("Time travel: the data is now 6 months old.");
    d.age(6.0);
    drop_caches();
    let before: Vec<f64> = names
        .iter()
        .map(|n| bulk_read_parallel(&d.path(n), 8))
        .collect::<Result<_>>()?;
    println!();
    println!("$ refreshd refresh {}", d.mnt.display());
    let out = Command::new(&refreshd)
        .args(["refresh", "--no-progress"])
        .arg(&d.mnt)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines().filter(|l| !l.contains("lost+found")) {
        println!("  {line}");
    }
    if !out.status.success() {
        bail!("refreshd refresh failed");
    }
    drop_caches();
    let after: Vec<f64> = names
        .iter()
        .map(|n| bulk_read_parallel(&d.path(n), 8))
        .collect::<Result<_>>()?;
    println!();
    println!("  file      read speed at 6 months   after refresh   speed-up");
    for (i, n) in names.iter().enumerate() {
        println!(
            "  {n:<8} {:>14.1} MB/s {:>12.1} MB/s {:>9.1}×",
            before[i] / 1e6,
            after[i] / 1e6,
            after[i] / before[i]
        );
    }
    let same = names
        .iter()
        .zip(&prints)
        .all(|(n, p)| fingerprint(&d.path(n)).ok() == Some(*p));
    println!();
    println!(
        "Contents unchanged: {}. Tearing the drive down.",
        if same { "yes" } else { "NO" }
    );
    d.down()?;
    if !same {
        bail!("file contents changed");
    }
    Ok(())
}
