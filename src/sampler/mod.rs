//! Per-drive read sampling: how fast does this drive read its stale data,
//! compared with data it wrote moments ago?
//!
//! A round, within a read budget (`sample_bytes`):
//! 1. **Fresh reference.** A canary: an unnamed `O_TMPFILE` in the sampled
//!    tree's root (same filesystem, so the same drive), filled with
//!    incompressible bytes by O_DIRECT writes and `fdatasync`ed. It is
//!    written first and read last, after the stale data, so the drive has
//!    had time to move it out of any write cache; it vanishes when closed.
//!    (Recently written user files would be a free reference, but there may
//!    be none, and they are not fresh once the drive has aged them.) If no
//!    canary can be written (no space, read-only) the round has no
//!    reference and only the absolute floor applies.
//! 2. **Stale data by age bucket.** The budget is split evenly over the
//!    non-empty data-age buckets; within one, files are chosen at random
//!    weighted by allocated bytes, then a random data extent (FIEMAP; holes,
//!    unwritten, delalloc and inline extents excluded) and a region in it.
//!    (a) sequential: regions of up to 4 MiB read as 1 MiB requests, 8 in
//!    flight (as readahead or a bulk copy would), throughput per region;
//!    (b) latency: 4 KiB reads at random aligned offsets, one at a time.
//!
//! Every read is O_DIRECT and O_NOATIME: nothing enters the page cache,
//! access times do not move. Bytes read never exceed the budget.

mod buckets;

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rustix::fs::{Mode, OFlags};

use crate::engine::BackendChoice;
use crate::inventory::FileRecord;
use crate::io::backend::{open_backend, Op};
use crate::io::buffers::BufferPool;
use crate::io::fileio::Ring;
use crate::io::syscalls::{
    self, FIEMAP_EXTENT_DATA_INLINE, FIEMAP_EXTENT_DELALLOC, FIEMAP_EXTENT_ENCODED,
    FIEMAP_EXTENT_NOT_ALIGNED, FIEMAP_EXTENT_UNKNOWN, FIEMAP_EXTENT_UNWRITTEN,
};
use crate::units::ByteSize;
pub use buckets::Buckets;
pub use refreshd_protocol::sample::{
    bucket_label, bucket_of, BucketSample, DriveSample, Measurement, Percentiles, BUCKET_EDGES,
    MONTH,
};

const ALIGN: u64 = 4096;
const REQ: usize = 1 << 20;
const DEPTH: usize = 8;
const REGION: u64 = 4 << 20;
const SMALL: usize = 4096;

/// How to sample.
#[derive(Debug, Clone)]
pub struct SampleOptions {
    pub budget: ByteSize,
    pub stale_after: Duration,
    /// Where the canary goes (a directory on the drive's filesystem).
    pub canary_dir: Option<PathBuf>,
    /// Space that must stay free on the filesystem after the canary.
    pub canary_reserve: ByteSize,
    pub seed: u64,
    pub now: i64,
}

/// A file's readable data extents.
struct Candidate {
    fd: OwnedFd,
    /// (logical offset, length), aligned to 4 KiB, within the file size.
    extents: Vec<(u64, u64)>,
    total: u64,
}

/// Opens the inventory's file for O_DIRECT reads, or nothing: the name is
/// first resolved to an `O_PATH` descriptor (no symlink anywhere; opening
/// it that way is not an open of the file), its identity compared with the
/// inventory's, and only then the inode itself reopened for reading. A
/// file replaced since the scan is never opened.
fn open_direct(f: &FileRecord) -> io::Result<OwnedFd> {
    let path_fd = crate::io::resolve::open_absolute(
        &f.path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let m = crate::engine::safety::guard::meta(path_fd.as_fd())?;
    let want = f.identity();
    let inode = crate::engine::safety::guard::Identity {
        fs: want.fs,
        ino: m.ino,
        btime: m.btime,
        generation: None,
    };
    if !want.same_inode(&inode) {
        return Err(io::Error::other(REPLACED));
    }
    let flags = OFlags::RDONLY | OFlags::DIRECT | OFlags::CLOEXEC;
    let fd = crate::engine::safety::guard::reopen(path_fd.as_fd(), flags)?;
    // The filesystem, once open (the ioctls need a real descriptor).
    if !want.fs.holds(&crate::io::fsid::of(fd.as_fd())?, m.dev) {
        return Err(io::Error::other(REPLACED));
    }
    Ok(fd)
}

/// A file's readable data, `None` when it has none or is gone (deleted
/// or replaced since the scan: not the drive's fault); an error when it
/// is there and cannot be read (a refused call, permissions).
fn candidate(f: &FileRecord) -> io::Result<Option<Candidate>> {
    let fd = match open_direct(f) {
        Ok(fd) => fd,
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let st = rustix::fs::fstat(&fd)?;
    let size = u64::try_from(st.st_size).unwrap_or(0);
    let skip = FIEMAP_EXTENT_UNKNOWN
        | FIEMAP_EXTENT_DELALLOC
        | FIEMAP_EXTENT_ENCODED
        | FIEMAP_EXTENT_NOT_ALIGNED
        | FIEMAP_EXTENT_DATA_INLINE
        | FIEMAP_EXTENT_UNWRITTEN;
    let extents: Vec<(u64, u64)> = syscalls::fiemap(fd.as_fd())?
        .into_iter()
        .filter(|e| e.flags & skip == 0)
        .filter_map(|e| {
            let start = e.logical.next_multiple_of(ALIGN);
            let end = (e.logical + e.length).min(size) / ALIGN * ALIGN;
            (end > start).then_some((start, end - start))
        })
        .collect();
    let total = extents.iter().map(|e| e.1).sum();
    Ok((total > 0).then_some(Candidate { fd, extents, total }))
}

/// The file is not there any more (or another one is): skipped quietly.
fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.to_string() == REPLACED
}

const REPLACED: &str = "replaced since the scan";

/// Files of a round that could not be opened for reading: when none of a
/// round's stale files could be, the round fails with the first reason
/// (a sampling failure is a state with its reason, never "no stale data").
#[derive(Default)]
struct Unreadable {
    count: u64,
    first: Option<(PathBuf, io::Error)>,
}

impl Unreadable {
    fn note(&mut self, f: &FileRecord, e: io::Error) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some((f.path.clone(), e));
        }
    }

    fn into_error(self, tried: u64) -> Option<io::Error> {
        let (path, e) = self.first?;
        Some(io::Error::new(
            e.kind(),
            format!(
                "none of the stale files could be opened for reading ({} of {tried} failed); \
                 first {}: {e}",
                self.count,
                crate::pathtext::text(&path)
            ),
        ))
    }
}

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
struct Reader {
    ring: Ring,
}

impl Reader {
    fn new() -> io::Result<Reader> {
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
struct Acc {
    regions: Vec<f64>,
    seq_bytes: u64,
    seq_secs: f64,
    lat_ms: Vec<f64>,
    bytes: u64,
    errors: u64,
}

impl Acc {
    fn merge(&mut self, o: &Acc) {
        self.regions.extend(&o.regions);
        self.seq_bytes += o.seq_bytes;
        self.seq_secs += o.seq_secs;
        self.lat_ms.extend(&o.lat_ms);
        self.bytes += o.bytes;
        self.errors += o.errors;
    }

    fn finish(&self) -> Measurement {
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
fn measure(reader: &mut Reader, cands: &[Candidate], budget: u64, rng: &mut SmallRng) -> Acc {
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

/// Writes the canary: `len` incompressible bytes, O_DIRECT, fdatasync.
/// The daemon's canary leaves at least this much free, or `min_free` when
/// smaller: its own small reserve, not the refresh watermark (the canary
/// is an unnamed file that lives for one round's seconds). `refreshd
/// survey --min-free` is the reserve itself: what the operator said.
pub const CANARY_RESERVE: u64 = 64 << 20;

/// The canary's length on a filesystem with `free` bytes free: `want`, or
/// less (whole regions, at least one) so that `reserve` stays free.
pub fn canary_fits(want: u64, free: u64, reserve: u64) -> Option<u64> {
    let room = free.saturating_sub(reserve) / REGION * REGION;
    let len = want.min(room);
    (len >= REGION).then_some(len)
}

fn write_canary(
    dir: &Path,
    want: u64,
    reserve: u64,
    rng: &mut SmallRng,
) -> Result<Candidate, String> {
    let vfs = rustix::fs::statvfs(dir)
        .map_err(|e| format!("statvfs {}: {e}", crate::pathtext::text(dir)))?;
    let free = vfs.f_bavail.saturating_mul(vfs.f_frsize);
    let Some(len) = canary_fits(want, free, reserve) else {
        return Err(format!(
            "only {} free on {}: no room for a {} canary above a {} reserve",
            crate::units::format_size(free),
            crate::pathtext::text(dir),
            crate::units::format_size(REGION),
            crate::units::format_size(reserve)
        ));
    };
    let fd = crate::io::resolve::open_absolute(
        dir,
        OFlags::TMPFILE | OFlags::RDWR | OFlags::DIRECT | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| format!("O_TMPFILE in {}: {e}", crate::pathtext::text(dir)))?;
    let mut pool = BufferPool::new(1, REQ);
    let mut off = 0;
    while off < len {
        let n = (len - off).min(REQ as u64) as usize;
        rng.fill(&mut pool.get_mut(0)[..n]);
        let w = rustix::io::pwrite(&fd, &pool.get(0)[..n], off)
            .map_err(|e| format!("writing the canary: {e}"))?;
        if w != n {
            return Err("short canary write".into());
        }
        off += n as u64;
    }
    rustix::fs::fdatasync(&fd).map_err(|e| format!("fdatasync of the canary: {e}"))?;
    Ok(Candidate {
        fd,
        extents: vec![(0, len)],
        total: len,
    })
}

/// One sampling round over `files` (all on one drive).
pub fn sample(files: &[FileRecord], opts: &SampleOptions) -> io::Result<DriveSample> {
    let mut b = Buckets::new(opts.now, opts.stale_after, opts.seed);
    for f in files {
        b.add(f.clone());
    }
    sample_buckets(b, opts)
}

/// [`sample`] from buckets filled while the inventory streamed by (the
/// daemon keeps no list of files).
pub fn sample_buckets(b: Buckets, opts: &SampleOptions) -> io::Result<DriveSample> {
    let started = Instant::now();
    let mut rng = SmallRng::seed_from_u64(opts.seed);
    let mut reader = Reader::new()?;
    // The canary takes a quarter of the budget (4–32 MiB) when it fits.
    let budget = opts.budget.0;
    let canary_len = (budget / 4 / REGION * REGION).clamp(REGION, 32 << 20);
    let canary = match (&opts.canary_dir, budget >= 2 * canary_len) {
        (Some(dir), true) => write_canary(dir, canary_len, opts.canary_reserve.0, &mut rng),
        (Some(_), false) => Err("the sample budget is too small for a fresh reference".into()),
        (None, _) => Err("no directory for a canary".into()),
    };
    let groups = b.into_groups();
    let used = groups.iter().filter(|g| g.alloc > 0).count() as u64;
    // It may have shrunk to what the filesystem can spare.
    let canary_len = canary.as_ref().map_or(canary_len, |c| c.total);
    let left = budget - if canary.is_ok() { canary_len } else { 0 };
    let per_bucket = left.checked_div(used).unwrap_or(0);
    let mut buckets = vec![];
    let mut stale_acc = Acc::default();
    let (mut stale_files, mut stale_bytes, mut total_read) = (0, 0, 0);
    let mut unreadable = Unreadable::default();
    let mut stale_tried = 0;
    for (i, g) in groups.into_iter().enumerate() {
        if g.files == 0 {
            continue;
        }
        let stale = g.all_stale();
        let (files, bytes, mean_months) = (g.files, g.bytes, g.mean_months());
        stale_files += g.stale_files;
        stale_bytes += g.stale_bytes;
        // Up to 64 files, drawn by allocated bytes, then measured.
        let mut cands: Vec<Candidate> = vec![];
        for f in &g.candidates() {
            if cands.len() == 64 {
                break;
            }
            stale_tried += u64::from(stale);
            match candidate(f) {
                Ok(Some(c)) => cands.push(c),
                Ok(None) => {}
                Err(e) if stale => unreadable.note(f, e),
                Err(_) => {}
            }
        }
        let acc = measure(&mut reader, &cands, per_bucket, &mut rng);
        total_read += acc.bytes;
        if stale {
            stale_acc.merge(&acc);
        }
        buckets.push(BucketSample {
            label: bucket_label(i),
            min_months: BUCKET_EDGES[i],
            files,
            bytes,
            stale,
            measured: acc.finish(),
            mean_months,
        });
    }
    let (fresh, fresh_missing) = match canary {
        Ok(c) => {
            let cands = [c];
            let acc = measure(&mut reader, &cands, canary_len, &mut rng);
            total_read += acc.bytes;
            (Some(acc.finish()), None)
        }
        Err(why) => (None, Some(why)),
    };
    let canary_bytes = if fresh.is_some() { canary_len } else { 0 };
    if stale_acc.bytes == 0 {
        if let Some(e) = unreadable.into_error(stale_tried) {
            return Err(e);
        }
    }
    Ok(DriveSample {
        fresh,
        fresh_missing,
        buckets,
        stale: stale_acc.finish(),
        stale_files,
        stale_bytes,
        bytes_read: total_read,
        canary_bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests;
