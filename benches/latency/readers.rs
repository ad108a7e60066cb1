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
    pub p99_ms: f64,
    /// The same run's reads as the drive served them (others' reads at
    /// the block layer: the reader's, ours left out), where they can be
    /// timed; for the pacer's next signal.
    pub block: Option<BlockTail>,
}

/// The tail of the drive's reads over a run, in ms.
#[derive(Debug, Clone, Copy)]
pub struct BlockTail {
    pub p99_ms: f64,
    pub p999_ms: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// `fio --rw=randread --bs=4k --direct=1 --iodepth=1`.
    Fio,
    /// The same with 8 requests in flight (libaio).
    FioQd8,
    /// Solr-like: mmap, random 16 KiB touches, each evicted first.
    Mmap,
    /// 4 KiB O_DIRECT reads at QD1 for 2 s, then 2 s of nothing, and so on
    /// (latencies of the reading phases).
    Bursty,
}

impl Reader {
    pub const ALL: [Reader; 4] = [Reader::Fio, Reader::FioQd8, Reader::Mmap, Reader::Bursty];

    pub fn name(self) -> &'static str {
        match self {
            Reader::Fio => "qd1",
            Reader::FioQd8 => "qd8",
            Reader::Mmap => "mmap",
            Reader::Bursty => "bursty",
        }
    }

    pub fn about(self) -> &'static str {
        match self {
            Reader::Fio => "fio randread 4k QD1 O_DIRECT",
            Reader::FioQd8 => "fio randread 4k QD8 O_DIRECT (libaio)",
            Reader::Mmap => "mmap reader, random 16 KiB touches (Solr-like)",
            Reader::Bursty => "4k QD1 O_DIRECT reads, 2 s on, 2 s off",
        }
    }

    /// Reads for `secs`, or until `stop` is set (the refresh ended).
    pub fn run(self, file: &Path, secs: Duration, stop: &AtomicBool) -> Latencies {
        match self {
            Reader::Fio => fio(file, secs, stop, 1),
            Reader::FioQd8 => fio(file, secs, stop, 8),
            Reader::Mmap => mmap(file, secs, stop),
            Reader::Bursty => bursty(file, secs, stop),
        }
    }
}

fn fio(file: &Path, secs: Duration, stop: &AtomicBool, depth: u32) -> Latencies {
    let engine = if depth > 1 {
        "--ioengine=libaio"
    } else {
        "--ioengine=psync"
    };
    let child = Command::new("fio")
        .args([
            "--name=app",
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            engine,
            "--time_based",
            "--output-format=json",
            "--randrepeat=0",
            "--percentile_list=50:99:99.9",
        ])
        .arg(format!("--iodepth={depth}"))
        .args(latency_log())
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
        p99_ms: pct("99.000000"),
        block: None,
    }
}

/// With `REFRESHD_BENCH_LAT_LOG=<dir>`, fio logs every read's latency
/// there (`lat-<ms since the epoch>_clat.1.log`: ms since its start,
/// latency in ns): when in a run the slow reads fall.
fn latency_log() -> Vec<String> {
    let Some(dir) = std::env::var_os("REFRESHD_BENCH_LAT_LOG") else {
        return vec![];
    };
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let prefix = Path::new(&dir).join(format!("lat-{ms}"));
    vec![format!("--write_lat_log={}", prefix.display())]
}

/// Touches random 16 KiB ranges of a shared mapping, evicting each range
/// from the mapping and the page cache first so every touch is a read
/// from the drive.
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
        // Our own mapping's pages first: the kernel does not drop a page
        // from the cache while it is mapped, so without this every range
        // touched once is a cache hit after (the loop devices' mmap cells
        // read 330,000 touches a second, mean 0.002 ms, at idle).
        // SAFETY: advice on a range inside the mapping; it is read-only
        // and file-backed, so its pages come back from the file.
        let dropped = unsafe {
            libc::madvise(
                base.cast::<u8>().add(off).cast(),
                touch,
                libc::MADV_DONTNEED,
            )
        };
        // Not page-aligned (pages larger than 16 KiB): every touch would
        // be a cache hit again, silently.
        assert_eq!(dropped, 0, "madvise: {}", std::io::Error::last_os_error());
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

/// 4 KiB direct reads at random offsets, one at a time, in 2 s bursts
/// separated by 2 s of silence.
fn bursty(file: &Path, secs: Duration, stop: &AtomicBool) -> Latencies {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(file)
        .unwrap();
    let blocks = f.metadata().unwrap().len() / 4096;
    let layout = std::alloc::Layout::from_size_align(4096, 4096).unwrap();
    // SAFETY: a 4 KiB aligned buffer, freed below.
    let buf = unsafe { std::alloc::alloc(layout) };
    // SAFETY: the allocation above, 4096 bytes.
    let slice = unsafe { std::slice::from_raw_parts_mut(buf, 4096) };
    let mut lat = Vec::new();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let started = Instant::now();
    let mut reading = Duration::ZERO;
    while started.elapsed() < secs && !stop.load(Ordering::Relaxed) {
        let phase_start = Instant::now();
        while phase_start.elapsed() < Duration::from_secs(2) && started.elapsed() < secs {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let t = Instant::now();
            f.read_exact_at(slice, (seed % blocks) * 4096).unwrap();
            lat.push(t.elapsed());
        }
        reading += phase_start.elapsed();
        let off = Instant::now();
        while off.elapsed() < Duration::from_secs(2)
            && started.elapsed() < secs
            && !stop.load(Ordering::Relaxed)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(buf, layout) };
    summarize(&mut lat, reading)
}

fn summarize(lat: &mut [Duration], ran: Duration) -> Latencies {
    lat.sort();
    let n = lat.len().max(1);
    let at = |q: f64| lat[((n as f64 * q) as usize).min(n - 1)].as_secs_f64() * 1e3;
    Latencies {
        iops: lat.len() as f64 / ran.as_secs_f64(),
        mean_ms: lat.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e3 / n as f64,
        p99_ms: at(0.99),
        block: None,
    }
}
