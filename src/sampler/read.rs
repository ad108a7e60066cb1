//! The round's reads: sequential regions with queue depth and single
//! small reads, through the I/O layer's ring, measured.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::Rng;

use super::candidate::{Candidate, ALIGN};
use crate::engine::BackendChoice;
use crate::io::backend::{open_backend, Op};
use crate::io::buffers::BufferPool;
use crate::io::fileio::Ring;
use refreshd_protocol::sample::{Measurement, Percentiles};

/// One sequential request.
pub(super) const REQ: usize = 1 << 20;
/// Sequential requests in flight.
const DEPTH: usize = 8;
/// A sequential region: read as `REQ` requests, `DEPTH` in flight.
pub(super) const REGION: u64 = 4 << 20;
/// A latency read.
const SMALL: usize = 4096;

/// Picks an aligned offset in a candidate's data, weighted by bytes, with
/// room for `len` bytes inside the extent (shorter if the extent is).
fn pick(c: &Candidate, rng: &mut SmallRng, len: u64) -> (u64, u64) {
    let mut at = rng.random_range(0..c.total);
    for &(off, l) in &c.extents {
        if at < l {
            let len = len.min(l);
            let slack = (l - len) / ALIGN;
            let start = off + rng.random_range(0..=slack) * ALIGN;
            return (start, len);
        }
        at -= l;
    }
    let (off, l) = c.extents[0];
    (off, len.min(l))
}

/// Reads with queue depth: sequential regions and single small reads.
/// Every read goes through a per-file handle, reaped before the call
/// returns (also on an error).
pub(super) struct Reader {
    ring: Ring,
}

impl Reader {
    pub(super) fn new() -> io::Result<Reader> {
        let (io, _) = open_backend(BackendChoice::Auto, BufferPool::new(DEPTH, REQ))?;
        Ok(Reader {
            ring: Ring::new(io, Default::default()),
        })
    }

    /// Reads `[off, off+len)` in 1 MiB requests, up to 8 in flight.
    /// Returns the elapsed time, or the first error.
    fn region(&mut self, fd: &OwnedFd, off: u64, len: u64) -> io::Result<Duration> {
        let mut io = self.ring.file(fd.as_fd())?;
        let t = Instant::now();
        let mut next = off;
        let end = off + len;
        let mut free: Vec<usize> = (0..DEPTH).collect();
        let mut first_err: Option<io::Error> = None;
        loop {
            while first_err.is_none() && next < end {
                let Some(b) = free.pop() else { break };
                let n = (end - next).min(REQ as u64) as usize;
                if let Err(e) = io.submit(b, Op::Read, next, n) {
                    first_err = Some(e.into());
                    break;
                }
                next += n as u64;
            }
            if io.in_flight() == 0 {
                break;
            }
            if let Some(c) = io.wait(Duration::from_secs(30))? {
                free.push(c.buf);
                match c.result {
                    Ok(0) if first_err.is_none() => {
                        first_err = Some(io::Error::from(io::ErrorKind::UnexpectedEof))
                    }
                    Err(e) if first_err.is_none() => first_err = Some(e),
                    _ => {}
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(t.elapsed()),
        }
    }

    fn small(&mut self, fd: &OwnedFd, off: u64) -> io::Result<Duration> {
        let mut io = self.ring.file(fd.as_fd())?;
        let t = Instant::now();
        io.sync(0, Op::Read, off, SMALL)?;
        Ok(t.elapsed())
    }
}

#[derive(Default)]
pub(super) struct Acc {
    regions: Vec<f64>,
    seq_bytes: u64,
    seq_secs: f64,
    lat_ms: Vec<f64>,
    pub(super) bytes: u64,
    errors: u64,
}

impl Acc {
    pub(super) fn merge(&mut self, o: &Acc) {
        self.regions.extend(&o.regions);
        self.seq_bytes += o.seq_bytes;
        self.seq_secs += o.seq_secs;
        self.lat_ms.extend(&o.lat_ms);
        self.bytes += o.bytes;
        self.errors += o.errors;
    }

    pub(super) fn finish(&self) -> Measurement {
        Measurement {
            throughput: Percentiles::of(&self.regions),
            aggregate_bps: (self.seq_secs > 0.0).then(|| self.seq_bytes as f64 / self.seq_secs),
            latency_ms: Percentiles::of(&self.lat_ms),
            bytes_read: self.bytes,
            errors: self.errors,
        }
    }
}

/// Spends about `budget` bytes on sequential regions and small reads of
/// `cands` (weighted by their data bytes).
pub(super) fn measure(
    reader: &mut Reader,
    cands: &[Candidate],
    budget: u64,
    rng: &mut SmallRng,
) -> Acc {
    let mut acc = Acc::default();
    let total: u64 = cands.iter().map(|c| c.total).sum();
    if total == 0 || budget < SMALL as u64 {
        return acc;
    }
    let choose = |rng: &mut SmallRng| {
        let mut at = rng.random_range(0..total);
        for c in cands {
            if at < c.total {
                return c;
            }
            at -= c.total;
        }
        &cands[0]
    };
    // An eighth for latency (at most 64 reads), the rest sequential.
    let small_reads = (budget / 8 / SMALL as u64).clamp(1, 64);
    let mut seq_budget = budget - small_reads * SMALL as u64;
    let mut misses = 0;
    while seq_budget >= ALIGN && misses < 64 {
        let c = choose(rng);
        let (off, len) = pick(c, rng, REGION.min(seq_budget / ALIGN * ALIGN));
        if len == 0 {
            misses += 1;
            continue;
        }
        seq_budget -= len;
        acc.bytes += len;
        match reader.region(&c.fd, off, len) {
            Ok(d) => {
                let secs = d.as_secs_f64().max(1e-9);
                // Regions under 1 MiB say more about latency than throughput.
                if len >= REQ as u64 {
                    acc.regions.push(len as f64 / secs);
                    acc.seq_bytes += len;
                    acc.seq_secs += secs;
                }
            }
            Err(_) => acc.errors += 1,
        }
    }
    for _ in 0..small_reads {
        let c = choose(rng);
        let (off, _) = pick(c, rng, SMALL as u64);
        acc.bytes += SMALL as u64;
        match reader.small(&c.fd, off) {
            Ok(d) => acc.lat_ms.push(d.as_secs_f64() * 1e3),
            Err(_) => acc.errors += 1,
        }
    }
    acc
}
