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
    /// Each read's file (its descriptor's number) and length, in order.
    #[cfg(test)]
    pub(super) log: Vec<(i32, u64)>,
}

impl Reader {
    pub(super) fn new() -> io::Result<Reader> {
        let (io, _) = open_backend(BackendChoice::Auto, BufferPool::new(DEPTH, REQ))?;
        Ok(Reader {
            ring: Ring::new(io, Default::default()),
            #[cfg(test)]
            log: vec![],
        })
    }

    /// Reads `[off, off+len)` in 1 MiB requests, up to 8 in flight.
    /// Returns the elapsed time, or the first error.
    fn region(&mut self, fd: &OwnedFd, off: u64, len: u64) -> io::Result<Duration> {
        #[cfg(test)]
        self.log.push((std::os::fd::AsRawFd::as_raw_fd(fd), len));
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
        #[cfg(test)]
        self.log
            .push((std::os::fd::AsRawFd::as_raw_fd(fd), SMALL as u64));
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

/// The candidate at a byte drawn uniformly over `cands`' data.
fn choose<'c>(cands: &'c [Candidate], total: u64, rng: &mut SmallRng) -> &'c Candidate {
    let mut at = rng.random_range(0..total);
    for c in cands {
        if at < c.total {
            return c;
        }
        at -= c.total;
    }
    &cands[0]
}

/// About `budget` bytes of reads of `cands` (weighted by their data
/// bytes), taken one read at a time ([`Plan::step`]) so that two plans
/// can go in step ([`InStep`]): sequential regions first, then an eighth
/// of the budget (at most 64) in single small reads.
pub(super) struct Plan<'c> {
    cands: &'c [Candidate],
    total: u64,
    budget: u64,
    seq_left: u64,
    small_left: u64,
    misses: u32,
    pub(super) acc: Acc,
}

impl<'c> Plan<'c> {
    pub(super) fn new(cands: &'c [Candidate], budget: u64) -> Plan<'c> {
        let total: u64 = cands.iter().map(|c| c.total).sum();
        let (seq_left, small_left) = if total == 0 || budget < SMALL as u64 {
            (0, 0)
        } else {
            let small = (budget / 8 / SMALL as u64).clamp(1, 64);
            (budget - small * SMALL as u64, small)
        };
        Plan {
            cands,
            total,
            budget,
            seq_left,
            small_left,
            misses: 0,
            acc: Acc::default(),
        }
    }

    /// The share of the budget read so far (1 with no budget).
    pub(super) fn done(&self) -> f64 {
        if self.budget == 0 {
            return 1.0;
        }
        self.acc.bytes as f64 / self.budget as f64
    }

    /// One read: a region while the sequential budget lasts, then a small
    /// read. `false` when the plan is through.
    pub(super) fn step(&mut self, reader: &mut Reader, rng: &mut SmallRng) -> bool {
        while self.seq_left >= ALIGN && self.misses < 64 {
            let c = choose(self.cands, self.total, rng);
            let (off, len) = pick(c, rng, REGION.min(self.seq_left / ALIGN * ALIGN));
            if len == 0 {
                self.misses += 1;
                continue;
            }
            self.seq_left -= len;
            self.acc.bytes += len;
            match reader.region(&c.fd, off, len) {
                Ok(d) => {
                    let secs = d.as_secs_f64().max(1e-9);
                    // Regions under 1 MiB say more about latency than throughput.
                    if len >= REQ as u64 {
                        self.acc.regions.push(len as f64 / secs);
                        self.acc.seq_bytes += len;
                        self.acc.seq_secs += secs;
                    }
                }
                Err(_) => self.acc.errors += 1,
            }
            return true;
        }
        if self.small_left == 0 {
            return false;
        }
        self.small_left -= 1;
        let c = choose(self.cands, self.total, rng);
        let (off, _) = pick(c, rng, SMALL as u64);
        self.acc.bytes += SMALL as u64;
        match reader.small(&c.fd, off) {
            Ok(d) => self.acc.lat_ms.push(d.as_secs_f64() * 1e3),
            Err(_) => self.acc.errors += 1,
        }
        true
    }
}

/// What a round's reads go through: its reader and draws, and the canary
/// kept in step with them.
pub(super) struct Reads<'r, 'c> {
    pub reader: &'r mut Reader,
    pub rng: &'r mut SmallRng,
    pub fresh: &'r mut InStep<'c>,
}

/// Spends about `budget` bytes on reads of `cands` ([`Plan`]), keeping
/// the canary in step.
pub(super) fn measure(reads: &mut Reads, cands: &[Candidate], budget: u64) -> Acc {
    let mut plan = Plan::new(cands, budget);
    let mut before = 0;
    while plan.step(reads.reader, reads.rng) {
        reads
            .fresh
            .stale_read(plan.acc.bytes - before, reads.reader, reads.rng);
        before = plan.acc.bytes;
    }
    // What a bucket could not read (files that would not open, too few
    // extents) moves the canary on too: else it falls behind, and is read
    // last after all.
    let unread = budget.saturating_sub(plan.acc.bytes);
    reads.fresh.stale_read(unread, reads.reader, reads.rng);
    plan.acc
}

/// The canary's reads in step with the stale data's, so that both see
/// the round's load alike.
///
/// A burst of load (another process's reads, a host short of CPU) lasts
/// seconds and slows every read made under it. The canary used to be read
/// last, in the round's last second or so: a burst over the stale reads
/// alone read as age, one over the canary alone as youth, and rounds on
/// a loaded testbed measured stale data's excess off by ±0.03 where the
/// data's own was 0.1–0.2 (`.ci/stress` logs, 2026-11-28; canary and
/// stale deviations across rounds did not move together). In step, they
/// share a round's load, and the forecast can tell a shared move from
/// a canary's own noise ([`crate::policy::forecast`]).
///
/// After each of the buckets' reads (stale or not: "stale" here is the
/// aged data the canary is measured against), the canary reads until its
/// share of its budget is the buckets' share of theirs, past the first
/// [`SETTLE`] of them (what a bucket leaves unread counts as read): the
/// canary was written and `fdatasync`ed moments before, and a drive that
/// acknowledged it from a cache has that long to move it out. How long
/// that is depends on the budget and the drive (1–2 s on the testbed at
/// the default 256 MiB; before 2026-11-28, all of the buckets' reads); a
/// drive that serves reads of fresh writes from its cache for longer is
/// not something this was measured on. What is left when the buckets'
/// reads are through (all of it with none) is read at the end.
pub(super) struct InStep<'c> {
    canary: Option<Plan<'c>>,
    stale_budget: u64,
    stale_read: u64,
}

/// The share of the stale reads before the canary's first.
pub(super) const SETTLE: f64 = 0.25;

impl<'c> InStep<'c> {
    pub(super) fn new(canary: Option<Plan<'c>>, stale_budget: u64) -> InStep<'c> {
        InStep {
            canary,
            stale_budget,
            stale_read: 0,
        }
    }

    /// The canary's share due when the stale reads have read `done` of
    /// theirs.
    fn due(done: f64) -> f64 {
        ((done - SETTLE) / (1.0 - SETTLE)).clamp(0.0, 1.0)
    }

    fn stale_read(&mut self, bytes: u64, reader: &mut Reader, rng: &mut SmallRng) {
        self.stale_read += bytes;
        let Some(canary) = &mut self.canary else {
            return;
        };
        if self.stale_budget == 0 {
            return;
        }
        let due = Self::due(self.stale_read as f64 / self.stale_budget as f64);
        while canary.done() < due && canary.step(reader, rng) {}
    }

    /// The canary's reads, the rest of them read now; `None` without one.
    pub(super) fn finish(self, reader: &mut Reader, rng: &mut SmallRng) -> Option<Acc> {
        let mut canary = self.canary?;
        while canary.step(reader, rng) {}
        Some(canary.acc)
    }
}
