//! Per-drive read sampling: how fast does this drive read its stale data,
//! compared with data it wrote moments ago?
//!
//! A round, within a read budget (`sample_bytes`):
//! 1. **Fresh reference.** A canary: an unnamed `O_TMPFILE` in the sampled
//!    tree's root (same filesystem, so the same drive), filled with
//!    incompressible bytes by O_DIRECT writes and `fdatasync`ed. It is
//!    written first and read in step with the stale data, from a quarter
//!    of the way through their reads on, so that both see the round's
//!    load alike and the drive has had time to move it out of any write
//!    cache ([`read::InStep`]); it vanishes when closed.
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
mod candidate;
mod read;

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rustix::fs::{Mode, OFlags};

use crate::inventory::FileRecord;
use crate::io::buffers::BufferPool;
use crate::units::ByteSize;
pub use buckets::Buckets;
use candidate::{candidate, Candidate, Unreadable};
use read::{measure, Acc, InStep, Plan, Reader, Reads, REGION, REQ};
pub use refreshd_protocol::sample::{
    bucket_label, bucket_of, BucketSample, DriveSample, Measurement, Percentiles, BUCKET_EDGES,
    MONTH,
};

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
    let canary_plan =
        (canary.as_ref().ok()).map(|c| Plan::new(std::slice::from_ref(c), canary_len));
    let mut in_step = InStep::new(canary_plan, per_bucket * used);
    let mut buckets = vec![];
    let mut stale = StaleTally::default();
    let mut total_read = 0;
    let mut reads = Reads {
        reader: &mut reader,
        rng: &mut rng,
        fresh: &mut in_step,
    };
    for (i, g) in groups.into_iter().enumerate() {
        if g.files == 0 {
            continue;
        }
        let (b, read) = measure_bucket(i, g, &mut reads, per_bucket, &mut stale);
        total_read += read;
        buckets.push(b);
    }
    let fresh_acc = in_step.finish(&mut reader, &mut rng);
    let (fresh, fresh_missing) = match canary {
        Ok(_) => {
            // There is a plan, so an account, whenever there is a canary.
            let acc = fresh_acc.unwrap_or_default();
            total_read += acc.bytes;
            (Some(acc.finish()), None)
        }
        Err(why) => (None, Some(why)),
    };
    let canary_bytes = if fresh.is_some() { canary_len } else { 0 };
    if stale.acc.bytes == 0 {
        if let Some(e) = stale.unreadable.into_error(stale.tried) {
            return Err(e);
        }
    }
    Ok(DriveSample {
        fresh,
        fresh_missing,
        buckets,
        stale: stale.acc.finish(),
        stale_files: stale.files,
        stale_bytes: stale.bytes,
        bytes_read: total_read,
        canary_bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The stale buckets of a round together.
#[derive(Default)]
struct StaleTally {
    acc: Acc,
    files: u64,
    bytes: u64,
    /// Stale files tried, and those that could not be opened.
    tried: u64,
    unreadable: Unreadable,
}

/// Measures bucket `i` within `budget` bytes: up to 64 of its files,
/// drawn by allocated bytes. Returns it and the bytes read.
fn measure_bucket(
    i: usize,
    g: buckets::Group,
    reads: &mut Reads,
    budget: u64,
    tally: &mut StaleTally,
) -> (BucketSample, u64) {
    let stale = g.all_stale();
    let (files, bytes, mean_months) = (g.files, g.bytes, g.mean_months());
    tally.files += g.stale_files;
    tally.bytes += g.stale_bytes;
    let mut cands: Vec<Candidate> = vec![];
    for f in &g.candidates() {
        if cands.len() == 64 {
            break;
        }
        tally.tried += u64::from(stale);
        match candidate(f) {
            Ok(Some(c)) => cands.push(c),
            Ok(None) => {}
            Err(e) if stale => tally.unreadable.note(f, e),
            Err(_) => {}
        }
    }
    let acc = measure(reads, &cands, budget);
    if stale {
        tally.acc.merge(&acc);
    }
    let b = BucketSample {
        label: bucket_label(i),
        min_months: BUCKET_EDGES[i],
        files,
        bytes,
        stale,
        measured: acc.finish(),
        mean_months,
    };
    (b, acc.bytes)
}

#[cfg(test)]
mod tests;
