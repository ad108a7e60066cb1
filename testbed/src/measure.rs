//! Measurements through the filesystem with O_DIRECT: bulk sequential read
//! throughput and small random-read latency percentiles.

use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

/// A page-aligned buffer for O_DIRECT.
struct Aligned {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let layout =
            std::alloc::Layout::from_size_align(len.max(4096), 4096).expect("valid layout");
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "allocation failed");
        Aligned { ptr, layout }
    }
    fn slice(&mut self, len: usize) -> &mut [u8] {
        assert!(len <= self.layout.size());
        // SAFETY: ptr is valid for layout.size() initialised bytes, owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// Opens for O_DIRECT reads, with `O_NOATIME` where allowed (the owner,
/// or `CAP_FOWNER`): a measurement leaves the file's atime as it was, so
/// tests can check refreshd left it too.
fn open_direct(path: &Path) -> Result<File> {
    let open = |flags| File::options().read(true).custom_flags(flags).open(path);
    match open(libc::O_DIRECT | libc::O_NOATIME) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open(libc::O_DIRECT),
        r => r,
    }
    .with_context(|| format!("opening {} with O_DIRECT", path.display()))
}

/// Reads the whole file sequentially with O_DIRECT in 1 MiB requests;
/// returns bytes per second.
pub fn bulk_read(path: &Path) -> Result<f64> {
    bulk_read_by(path, 1 << 20)
}

/// [`bulk_read`] in requests of `request` bytes (a multiple of 4 KiB, at
/// most 1 MiB: an error otherwise), one at a time. A 1 MiB request reaches the emulator as
/// 128 KiB requests that are served by one channel or two at once, the
/// same for a whole read of 64 MiB and different for the next (47 or
/// 90 MB/s on 8 channels of the 840evo model, 2026-11-28); a 128 KiB
/// request is one, on one channel: the same speed every time (40.5 MB/s
/// fresh, 4.8 aged 6 months, five reads each within 2 %).
pub fn bulk_read_by(path: &Path, request: usize) -> Result<f64> {
    anyhow::ensure!(
        request > 0 && request % 4096 == 0 && request <= 1 << 20,
        "a bulk read's request of {request} bytes: 4 KiB to 1 MiB in 4 KiB steps"
    );
    let f = open_direct(path)?;
    let len = f.metadata()?.len();
    let mut buf = Aligned::new(request);
    let t = Instant::now();
    let mut off = 0;
    while off < len {
        let n = f.read_at(buf.slice(request), off)?;
        if n == 0 {
            break;
        }
        off += n as u64;
    }
    Ok(off as f64 / t.elapsed().as_secs_f64())
}

/// Latency percentiles in milliseconds, the columns of the seed table.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct Latency {
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub p95: f64,
    pub mean: f64,
}

pub fn percentiles(samples: &mut [Duration]) -> Latency {
    if samples.is_empty() {
        return Latency::default();
    }
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let at = |q: f64| ms(samples[((samples.len() - 1) as f64 * q).round() as usize]);
    let mean = samples.iter().map(|d| ms(*d)).sum::<f64>() / samples.len() as f64;
    Latency {
        p25: at(0.25),
        p50: at(0.50),
        p75: at(0.75),
        p95: at(0.95),
        mean,
    }
}

/// `count` random 4–16 KiB O_DIRECT reads at queue depth 1.
pub fn random_reads(path: &Path, count: usize, seed: u64) -> Result<Latency> {
    let f = open_direct(path)?;
    let len = f.metadata()?.len();
    let blocks = (len / 4096).max(1);
    let mut buf = Aligned::new(16 << 10);
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let size = 4096 * (1 + (next() % 4) as usize);
        let block = next() % blocks.saturating_sub(4).max(1);
        let t = Instant::now();
        f.read_at(buf.slice(size), block * 4096)?;
        samples.push(t.elapsed());
    }
    Ok(percentiles(&mut samples))
}

/// Drops clean caches so reads come from the "device".
pub fn drop_caches() {
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

/// Reads the file with `threads` readers, each streaming its own stripe
/// with 1 MiB O_DIRECT requests (a bulk reader keeps the device busy);
/// returns bytes per second.
pub fn bulk_read_parallel(path: &Path, threads: u64) -> Result<f64> {
    let len = std::fs::metadata(path)?.len();
    let per = len.div_ceil(threads.max(1)).div_ceil(1 << 20) << 20;
    let t = Instant::now();
    let total: Result<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|i| {
                s.spawn(move || -> Result<u64> {
                    let f = open_direct(path)?;
                    let mut buf = Aligned::new(1 << 20);
                    let (mut off, end) = (i * per, ((i + 1) * per).min(len));
                    let mut done = 0;
                    while off < end {
                        let n = f.read_at(buf.slice(1 << 20), off)?;
                        if n == 0 {
                            break;
                        }
                        off += n as u64;
                        done += n as u64;
                    }
                    Ok(done)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow::anyhow!("reader panicked"))?)
            .sum()
    });
    Ok(total? as f64 / t.elapsed().as_secs_f64())
}

/// A content fingerprint (FNV-1a), to show data is unchanged.
pub fn fingerprint(path: &Path) -> Result<u64> {
    let data = std::fs::read(path)?;
    Ok(data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bulk_read_refuses_a_request_it_cannot_make() {
        let p = Path::new("/nonexistent");
        for bad in [0, 1000, 2 << 20] {
            let e = bulk_read_by(p, bad).unwrap_err().to_string();
            assert!(e.contains(&format!("request of {bad} bytes")), "{e}");
        }
        // A good size gets as far as opening the file.
        let e = bulk_read_by(p, 128 << 10).unwrap_err().to_string();
        assert!(!e.contains("request of"), "{e}");
    }
}
