//! Refresh throughput, side by side in one run, on a loop-mounted ext4
//! (loop device with direct I/O, so the host disk is really hit):
//!
//! (a) `refreshd refresh` unthrottled,
//! (b) `dd if=f of=f bs=1M conv=notrunc,fdatasync iflag=direct oflag=direct`,
//! (c) the device limit: one O_DIRECT sequential read pass plus one write
//!     pass of the same bytes, 32 requests of 1 MiB in flight.
//!
//! Runs alternate (a, b, c, then b, c, a, …); medians and ratios are
//! printed. Then the throttle: `--rate` against the measured rate. Then
//! the aged drive: the testbed's 840evo model with 8 channels, a 512 MiB
//! file aged 6 months before every run, engine vs dd side by side
//! (`REFRESHD_BENCH_AGED_MIB`, `REFRESHD_BENCH_AGED_ROUNDS`, default 3;
//! `REFRESHD_BENCH_ONLY=aged` runs only this part). Last, relocation vs
//! in place on aged data per filesystem (`REFRESHD_BENCH_ONLY=relocate`),
//! and relocation's throttle accuracy (`REFRESHD_BENCH_ONLY=relocate-rate`).
//! The one-shot at its defaults on an idle drive against `--yield off` and
//! dd (`REFRESHD_BENCH_ONLY=idle`: one 512 MiB file, 300 files of 1 MiB).
//!
//! `cargo bench` (root needed). `REFRESHD_BENCH_MIB` sets the file size
//! (default 1024), `REFRESHD_BENCH_ROUNDS` the rounds (default 9), and
//! `REFRESHD_BENCH_VARIANTS` extra engine settings to time alongside,
//! separated by `;` (e.g. `--queue-depth 2;--queue-depth 32`).
#![allow(clippy::unwrap_used)]

#[path = "refresh/relocation.rs"]
mod relocation;
use relocation::{aged, relocate, relocate_rate};

#[path = "../tests/helpers/mod.rs"]
mod helpers;

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use helpers::{pattern, LoopFs};
use io_uring::{opcode, types, IoUring};
use refreshd::io::buffers::BufferPool;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn drop_caches() {
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

fn engine(file: &Path, extra: &[&str]) -> Duration {
    engine_files(file, extra, 1)
}

/// `refreshd refresh` of `path` (a file or a directory of `files` files).
fn engine_files(path: &Path, extra: &[&str], files: usize) -> Duration {
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_refreshd"))
        .env(
            "REFRESHD_STATE_DIR",
            concat!(env!("CARGO_TARGET_TMPDIR"), "/bench-state"),
        )
        .args(["refresh", "--no-progress"])
        .args(extra)
        .arg(path)
        .output()
        .unwrap();
    let d = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains(&format!("{files} refreshed")), "{s}");
    d
}

/// The usual loop: `dd conv=notrunc` over every file of `dir`.
fn dd_loop(dir: &Path) -> Duration {
    let t = Instant::now();
    let st = Command::new("sh")
        .arg("-c")
        .arg(
            "for f in \"$1\"/*; do dd if=\"$f\" of=\"$f\" bs=1M conv=notrunc,fdatasync \
             iflag=direct oflag=direct status=none || exit 1; done",
        )
        .arg("sh")
        .arg(dir)
        .status()
        .unwrap();
    assert!(st.success());
    t.elapsed()
}

/// The one-shot on an idle drive, at its defaults (`--yield auto`),
/// against `--yield off` and dd, side by side: one 512 MiB file and 300
/// files of 1 MiB (`REFRESHD_BENCH_ONLY=idle`; rounds:
/// `REFRESHD_BENCH_ROUNDS`, default 5). The pacer must cost nothing here.
fn idle() {
    let rounds = env_u64("REFRESHD_BENCH_ROUNDS", 5) as usize;
    let fs = LoopFs::with_options("ext4", 1536, true);
    let big = fs.path("big");
    make_file(&big, 512, 11);
    let dir = fs.path("small");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..300 {
        make_file(&dir.join(format!("f{i:03}")), 1, 100 + i);
    }
    fs.sync();
    println!("one-shot on an idle drive (loop, direct I/O, ext4), {rounds} rounds, medians:");
    for (what, path, files) in [
        ("one 512 MiB file", &big, 1),
        ("300 x 1 MiB files", &dir, 300),
    ] {
        let (mut auto, mut off, mut dd_t) = (vec![], vec![], vec![]);
        for r in 0..rounds {
            // Alternate the order: no position is always first.
            for k in 0..3 {
                drop_caches();
                match (k + r) % 3 {
                    0 => auto.push(engine_files(path, &[], files)),
                    1 => off.push(engine_files(path, &["--yield", "off"], files)),
                    _ => dd_t.push(if files == 1 { dd(path) } else { dd_loop(path) }),
                }
            }
        }
        let (a, o, d) = (median(&mut auto), median(&mut off), median(&mut dd_t));
        println!(
            "  {what}: default {:.2} s, --yield off {:.2} s, dd {:.2} s; default / dd {:.3}x (target <= 1.0), default / off {:.3}x (target <= 1.05)",
            a.as_secs_f64(),
            o.as_secs_f64(),
            d.as_secs_f64(),
            a.as_secs_f64() / d.as_secs_f64(),
            a.as_secs_f64() / o.as_secs_f64()
        );
    }
}

fn dd(file: &Path) -> Duration {
    let t = Instant::now();
    let st = Command::new("dd")
        .arg(format!("if={}", file.display()))
        .arg(format!("of={}", file.display()))
        .args([
            "bs=1M",
            "conv=notrunc,fdatasync",
            "iflag=direct",
            "oflag=direct",
            "status=none",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    t.elapsed()
}

/// One deep-queue O_DIRECT pass over the file: read everything into `mem`
/// or write `mem` back. Returns the time.
fn pass(file: &File, mem: &mut BufferPool, write: bool) -> Duration {
    const DEPTH: usize = 32;
    let n = mem.count();
    let len = mem.buf_len();
    let mut ring = IoUring::new(DEPTH as u32 * 2).unwrap();
    let fd = types::Fd(file.as_raw_fd());
    let t = Instant::now();
    let (mut next, mut inflight) = (0usize, 0usize);
    while next < n || inflight > 0 {
        while next < n && inflight < DEPTH {
            let ptr = mem.ptr(next);
            let off = (next * len) as u64;
            let e = if write {
                opcode::Write::new(fd, ptr, len as u32).offset(off).build()
            } else {
                opcode::Read::new(fd, ptr, len as u32).offset(off).build()
            };
            // SAFETY: `mem` outlives the ring's requests (we wait for all).
            unsafe { ring.submission().push(&e.user_data(next as u64)).unwrap() };
            next += 1;
            inflight += 1;
        }
        ring.submit_and_wait(1).unwrap();
        while let Some(c) = ring.completion().next() {
            assert_eq!(c.result(), len as i32, "device-limit I/O failed");
            inflight -= 1;
        }
    }
    if write {
        rustix::fs::fdatasync(file).unwrap();
    }
    t.elapsed()
}

fn limit(file: &Path, mem: &mut BufferPool) -> Duration {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(file)
        .unwrap();
    pass(&f, mem, false) + pass(&f, mem, true)
}

/// The two ratios the targets are stated in.
fn print_ratios(engine: Duration, dd: Duration, limit: Duration) {
    println!(
        "  speedup vs dd (b/a):        {:.2}x   (target >= 1.3x)",
        dd.as_secs_f64() / engine.as_secs_f64()
    );
    println!(
        "  engine / limit (a/c):       {:.2}    (target <= 1.10)",
        engine.as_secs_f64() / limit.as_secs_f64()
    );
}

/// A file of `mib` MiB of patterned data, synced.
fn make_file(path: &Path, mib: u64, seed: u64) {
    use std::io::Write;
    let mut f = File::create(path).unwrap();
    let block = pattern(1 << 20, seed);
    for _ in 0..mib {
        f.write_all(&block).unwrap();
    }
    f.sync_all().unwrap();
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED refresh benchmark: needs root for loop devices");
        return;
    }
    if std::env::var("REFRESHD_BENCH_ONLY").as_deref() == Ok("relocate-rate") {
        relocate_rate();
        return;
    }
    if std::env::var("REFRESHD_BENCH_ONLY").as_deref() == Ok("relocate") {
        relocate();
        return;
    }
    if std::env::var("REFRESHD_BENCH_ONLY").as_deref() == Ok("idle") {
        idle();
        return;
    }
    if std::env::var("REFRESHD_BENCH_ONLY").as_deref() == Ok("aged") {
        aged();
        return;
    }
    let mib = env_u64("REFRESHD_BENCH_MIB", 1024);
    let rounds = env_u64("REFRESHD_BENCH_ROUNDS", 9) as usize;
    let fs = LoopFs::with_options("ext4", mib * 2 + 256, true);
    let file = fs.path("big");
    make_file(&file, mib, 42);
    let bytes = mib << 20;
    let mut mem = BufferPool::new(mib as usize, 1 << 20);
    // Warm up each path once (page tables, first allocations).
    engine(&file, &[]);
    dd(&file);
    limit(&file, &mut mem);

    // Extra engine settings to compare, e.g. "--queue-depth 32;--chunk 4MiB".
    let variants: Vec<String> = std::env::var("REFRESHD_BENCH_VARIANTS")
        .map(|v| v.split(';').map(str::to_string).collect())
        .unwrap_or_default();
    let mut var_times: Vec<Vec<Duration>> = vec![vec![]; variants.len()];
    let (mut e, mut d, mut l) = (vec![], vec![], vec![]);
    let kinds = 3 + variants.len();
    for round in 0..rounds {
        for k in 0..kinds {
            drop_caches();
            match (round + k) % kinds {
                0 => e.push(engine(&file, &[])),
                1 => d.push(dd(&file)),
                2 => l.push(limit(&file, &mut mem)),
                v => {
                    let args: Vec<&str> = variants[v - 3].split_whitespace().collect();
                    var_times[v - 3].push(engine(&file, &args));
                }
            }
        }
    }
    for (v, t) in variants.iter().zip(var_times.iter_mut()) {
        println!("  variant {v:30} median {:.3} s", median(t).as_secs_f64());
    }
    let spread = |v: &[Duration]| {
        let (lo, hi) = (v.iter().min().unwrap(), v.iter().max().unwrap());
        format!("min {:.3} max {:.3}", lo.as_secs_f64(), hi.as_secs_f64())
    };
    let spreads = [spread(&e), spread(&d), spread(&l)];
    let (me, md, ml) = (median(&mut e), median(&mut d), median(&mut l));
    let mbs = |t: Duration| bytes as f64 / t.as_secs_f64() / (1 << 20) as f64;
    println!("refresh of a {mib} MiB file on loop-mounted ext4 (direct-I/O loop), {rounds} rounds, medians:");
    println!(
        "  (a) refreshd refresh        {:>8.3} s  {:>7.1} MiB/s  ({})",
        me.as_secs_f64(),
        mbs(me),
        spreads[0]
    );
    println!(
        "  (b) dd conv=notrunc direct  {:>8.3} s  {:>7.1} MiB/s  ({})",
        md.as_secs_f64(),
        mbs(md),
        spreads[1]
    );
    println!(
        "  (c) device limit (r + w)    {:>8.3} s  {:>7.1} MiB/s  ({})",
        ml.as_secs_f64(),
        mbs(ml),
        spreads[2]
    );
    print_ratios(me, md, ml);

    // Throttle accuracy: a rate that makes the file take 12 s.
    let size = mib;
    let rate = (mib / 12).max(1);
    let small = fs.path("throttled");
    {
        let f = File::open(&file).unwrap();
        let mut buf = vec![0u8; (size << 20) as usize];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, 0).unwrap();
        helpers::write_file(&small, &buf);
    }
    let t = engine(&small, &["--rate", &format!("{rate}MiB/s")]);
    let got = size as f64 / t.as_secs_f64();
    println!(
        "throttle: --rate {rate}MiB/s on {size} MiB took {:.2} s = {got:.2} MiB/s ({:+.2}% off; target ±5%)",
        t.as_secs_f64(),
        (got / rate as f64 - 1.0) * 100.0
    );

    drop(fs);
    aged();
    relocate();
    relocate_rate();
}
