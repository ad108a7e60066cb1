//! Foreground readers whose latency the benchmark reports.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A reader's latencies over its run.
#[derive(Debug, Clone, Copy)]
pub struct Latencies {
    pub iops: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

#[derive(Debug, Clone, Copy)]
pub enum Reader {
    /// `fio --rw=randread --bs=4k --direct=1 --iodepth=1`.
    Fio,
    /// Solr-like: mmap, random 16 KiB touches, each evicted first.
    Mmap,
}

impl Reader {
    pub fn name(self) -> &'static str {
        match self {
            Reader::Fio => "fio randread 4k QD1 O_DIRECT",
            Reader::Mmap => "mmap reader, random 16 KiB touches",
        }
    }

    /// Reads for `secs`, or until `stop` is set (the refresh ended).
    pub fn run(self, file: &Path, secs: Duration, stop: &AtomicBool) -> Latencies {
        match self {
            Reader::Fio => fio(file, secs, stop),
            Reader::Mmap => mmap(file, secs, stop),
        }
    }
}

fn fio(file: &Path, secs: Duration, stop: &AtomicBool) -> Latencies {
    let child = Command::new("fio")
        .args([
            "--name=app",
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--iodepth=1",
            "--ioengine=psync",
            "--time_based",
            "--output-format=json",
            "--percentile_list=50:99:99.9",
        ])
        .arg(format!("--runtime={}", secs.as_secs()))
        .arg(format!("--filename={}", file.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let end = Instant::now() + secs;
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
    }
    if Instant::now() < end {
        // fio ends its jobs and reports on SIGINT.
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    // Interrupted, fio exits non-zero but still reports (after a line
    // saying so): the JSON starts at the first brace.
    let text = String::from_utf8_lossy(&out.stdout);
    let json = text
        .find('{')
        .map(|i| &text[i..])
        .unwrap_or_else(|| panic!("fio: {}{}", text, String::from_utf8_lossy(&out.stderr)));
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let read = &v["jobs"][0]["read"];
    let pct = |k: &str| read["clat_ns"]["percentile"][k].as_f64().unwrap() / 1e6;
    Latencies {
        iops: read["iops"].as_f64().unwrap(),
        mean_ms: read["clat_ns"]["mean"].as_f64().unwrap() / 1e6,
        p50_ms: pct("50.000000"),
        p99_ms: pct("99.000000"),
        p999_ms: pct("99.900000"),
    }
}

/// Touches random 16 KiB ranges of a shared mapping, evicting each range
/// from the page cache first so every touch is a read from the drive.
fn mmap(file: &Path, secs: Duration, stop: &AtomicBool) -> Latencies {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(file).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    // SAFETY: a read-only shared view of a file nobody truncates during
    // the run; unmapped below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED, "mmap");
    // SAFETY: advice on the mapping just made.
    unsafe { libc::madvise(base, len, libc::MADV_RANDOM) };
    let touch = 16usize << 10;
    let mut lat = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let end = Instant::now() + secs;
    let started = Instant::now();
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let off = (seed as usize % (len / touch)) * touch;
        // SAFETY: plain syscall on an open fd.
        unsafe {
            libc::posix_fadvise(
                f.as_raw_fd(),
                off as i64,
                touch as i64,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        let t = Instant::now();
        let mut sum = 0u8;
        for page in (0..touch).step_by(4096) {
            // SAFETY: inside the mapping.
            sum ^= unsafe { std::ptr::read_volatile(base.cast::<u8>().add(off + page)) };
        }
        std::hint::black_box(sum);
        lat.push(t.elapsed());
    }
    let ran = started.elapsed();
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(base, len) };
    summarize(&mut lat, ran)
}

fn summarize(lat: &mut [Duration], ran: Duration) -> Latencies {
    lat.sort();
    let n = lat.len().max(1);
    let at = |q: f64| lat[((n as f64 * q) as usize).min(n - 1)].as_secs_f64() * 1e3;
    Latencies {
        iops: lat.len() as f64 / ran.as_secs_f64(),
        mean_ms: lat.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e3 / n as f64,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        p999_ms: at(0.999),
    }
}
