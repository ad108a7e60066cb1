//! Kernel-mediated relocation: refreshes files that other processes keep
//! open (a search engine's mmapped index), where no lease can be had and a
//! user-space rewrite would race with them. The kernel moves the data to
//! newly written blocks under its own locks, atomically with respect to
//! every reader, writer and mapping:
//!
//! - **ext4**: `EXT4_IOC_MOVE_EXT` with a donor `O_TMPFILE` whose blocks
//!   for the chunk are preallocated: the kernel copies the chunk into them
//!   and swaps the extents (what `e4defrag` does on live files). The old
//!   blocks end up in the donor and are punched out at once.
//! - **XFS, btrfs**: the chunk is read once through the page cache, written
//!   to an `O_TMPFILE` and `fdatasync`ed, then `FIDEDUPERANGE` from the
//!   temp file onto the original: the kernel compares the bytes under its
//!   locks (against the pages just read: the slow media is read once) and
//!   remaps only if they are identical. "Differs" means someone wrote
//!   meanwhile: the chunk is retried once, then left (and reported) — data
//!   somebody just wrote is fresh anyway.
//!
//! Pages this brings into the page cache are dropped again; pages that
//! were cached before (the application's working set) are left alone.
//! Chunks are bounded (`relocate_chunk`), free space is checked against the
//! watermark before each one (the donor/temp chunk needs room until the
//! swap), holes, unwritten and shared extents are never touched (the same
//! plan as in-place), and nothing here changes size, mtime or atime: the
//! kernel's remap does not touch them and our reads use O_NOATIME.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;

use rustix::fs::{fcntl_getfl, fcntl_setfl, Advice, Mode, OFlags};

mod methods;
mod pieces;
mod unit;

pub use pieces::read_pieces;
use unit::{ChunkResult, Method, Relocator, PIECE};

pub use crate::engine::types::DEFAULT_RELOCATE_CHUNK;

use crate::engine::report::{FailKind, Interruption, Outcome, SkipReason};
use crate::engine::safety::plan::{self, Chunk, Plan, PlanParams};
use crate::engine::safety::watch::{StopReason, Watch};
use crate::engine::strategy::{Done, FileJob};
use crate::io::fileio::FileIo;
use crate::io::syscalls::FsKind;

/// With a rate, a unit is at most this long a share of it, so that an
/// application's I/O never waits long behind one swap.
pub const UNIT_SECONDS: f64 = 0.5;

/// The relocation unit: `relocate_chunk`, or half a second of the rate if
/// that is smaller, in whole blocks.
pub fn unit_len(relocate_chunk: u64, rate: Option<u64>, block: u64) -> u64 {
    let cap = rate.map_or(relocate_chunk, |r| {
        ((r as f64 * UNIT_SECONDS) as u64).min(relocate_chunk)
    });
    (cap / block * block).max(block)
}

struct CancelWatch<'a>(&'a std::sync::atomic::AtomicBool);

impl Watch for CancelWatch<'_> {
    fn should_stop(&mut self) -> Option<StopReason> {
        self.0
            .load(Ordering::Relaxed)
            .then_some(StopReason::Cancelled)
    }
    fn space_for(&mut self, _len: u64) -> Result<(), StopReason> {
        Ok(())
    }
}

fn free_bytes(fd: BorrowedFd<'_>) -> u64 {
    rustix::fs::fstatvfs(fd).map_or(0, |s| s.f_bavail.saturating_mul(s.f_frsize))
}

/// Whether `fs` can relocate at all.
pub fn supported(fs: FsKind) -> bool {
    matches!(fs, FsKind::Ext4 | FsKind::Xfs | FsKind::Btrfs)
}

/// Relocates the planned data of the file (open without a lease).
pub(crate) fn run(fio: &mut FileIo<'_>, job: &mut FileJob<'_, '_>) -> Done {
    job.report.strategy = "relocate";
    Done::new(relocate(fio, job), false)
}

fn relocate(fio: &mut FileIo<'_>, job: &mut FileJob<'_, '_>) -> Outcome {
    let o = job.opened;
    let cfg = job.cfg;
    let orig = o.fd.as_fd();
    let method = match o.fs {
        FsKind::Ext4 => Method::MoveExt,
        FsKind::Xfs | FsKind::Btrfs => Method::Dedupe,
    };
    let block = rustix::fs::fstatvfs(orig).map_or(4096, |s| s.f_bsize.max(512));
    let chunk = unit_len(cfg.relocate_chunk.max(block), job.throttle.rate(), block);
    let params = PlanParams {
        size: o.meta.size,
        align: block,
        chunk,
        rewrite_shared: cfg.rewrite_shared,
        unsafe_write_holes: false,
        unsafe_direct_tail: false,
    };
    // FIEMAP may read extent blocks: not an application's reads.
    let p = match job.throttle.uncounted(|| plan::for_file(orig, &params)) {
        Ok(p) => p,
        Err(e) => return Outcome::failed(FailKind::Io, e.to_string()),
    };
    job.report.excluded = p.excluded;
    job.report.bytes_planned = p.bytes();
    if p.chunks.is_empty() {
        return plan::nothing_planned(&p, o.meta.size);
    }
    if cfg.dry_run {
        return Outcome::WouldRefresh;
    }
    let units = match units_of(p, chunk, block, job.skip) {
        Ok(u) => u,
        Err(o) => return o,
    };
    let temp = match temp_file(job) {
        Ok(t) => t,
        Err(o) => return o,
    };
    let fl = match read_through_cache(orig) {
        Ok(fl) => fl,
        Err(o) => return o,
    };
    let r = Relocator {
        orig,
        temp,
        method,
        block,
        buf: vec![0u8; PIECE],
        io: fio,
        moved: 0,
        no_layout_recheck: cfg.unsafe_switches.no_layout_recheck(),
    };
    let outcome = relocate_units(r, &units, job);
    let _ = fcntl_setfl(orig, fl);
    let _ = rustix::fs::fadvise(orig, 0, None, Advice::Normal);
    outcome
}

/// Units of work: the plan's chunks, past what a previous run did; an
/// unaligned piece right after an aligned chunk (the tail) joins it when
/// the two fit in one chunk. Unaligned data is a skip.
fn units_of(p: Plan, chunk: u64, block: u64, mut skip: u64) -> Result<Vec<Chunk>, Outcome> {
    let mut units: Vec<Chunk> = vec![];
    for c in p.chunks {
        match units.last_mut() {
            Some(u) if u.end() == c.offset && u.len + c.len <= chunk + block => u.len += c.len,
            _ => units.push(c),
        }
    }
    plan::skip_done(&mut units, &mut skip);
    if let Some(u) = units.iter().find(|u| u.offset % block != 0) {
        return Err(Outcome::Skipped {
            reason: SkipReason::StrategyUnavailable,
            detail: format!("data at offset {} is not block-aligned", u.offset),
        });
    }
    Ok(units)
}

/// The donor / temporary file: unnamed, beside the file, of its size.
fn temp_file(job: &FileJob<'_, '_>) -> Result<OwnedFd, Outcome> {
    let temp = rustix::fs::openat(
        job.target.dir.as_fd(),
        ".",
        OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| Outcome::Skipped {
        reason: SkipReason::StrategyUnavailable,
        detail: format!(
            "cannot create a temporary file next to it: {}",
            io::Error::from(e)
        ),
    })?;
    rustix::fs::ftruncate(&temp, job.opened.meta.size).map_err(|e| {
        Outcome::failed(
            FailKind::Io,
            format!("sizing the temporary file: {}", io::Error::from(e)),
        )
    })?;
    Ok(temp)
}

/// Both methods read through the page cache: O_DIRECT off for our file
/// description, and no readahead (FADV_RANDOM, also ours only): we read
/// exactly the chunk, in parallel, into small folios the kernel's
/// MOVE_EXT can use as they are (with readahead's large folios it read
/// every block again, one at a time: 20x slower, measured). The dedupe
/// path compares page-cache pages: reading them once keeps the slow
/// media read once. Returns the flags to put back.
fn read_through_cache(orig: BorrowedFd<'_>) -> Result<OFlags, Outcome> {
    let fl = fcntl_getfl(orig).unwrap_or(OFlags::empty());
    fcntl_setfl(orig, fl - OFlags::DIRECT).map_err(|e| {
        Outcome::failed(
            FailKind::Io,
            format!("turning O_DIRECT off: {}", io::Error::from(e)),
        )
    })?;
    let _ = rustix::fs::fadvise(orig, 0, None, Advice::Random);
    Ok(fl)
}

fn relocate_units(mut r: Relocator<'_, '_>, units: &[Chunk], job: &mut FileJob<'_, '_>) -> Outcome {
    let cfg = job.cfg;
    let watermark = cfg.min_free.map_or_else(
        || rustix::fs::fstatvfs(r.orig).map_or(0, |s| s.f_blocks.saturating_mul(s.f_frsize) / 20),
        |b| b.0,
    );
    let mut watch = CancelWatch(&cfg.cancel);
    let mut outcome = None;
    let mut changed: Vec<(u64, u64)> = vec![];
    let mut pending: VecDeque<Chunk> = units.iter().copied().collect();
    let mut first = true;
    while let Some(next) = pending.pop_front() {
        // While yielding the rate is lower: so is the unit (0.5 s of it),
        // and with it the time the kernel holds the file's locks.
        let now = job.throttle.allowance().rate;
        let u = &Chunk {
            len: next.len.min(unit_len(cfg.relocate_chunk, now, r.block)),
            ..next
        };
        if u.len < next.len {
            pending.push_front(Chunk {
                offset: u.end(),
                len: next.len - u.len,
                direct: next.direct,
            });
        }
        if let Some(stop) = before_unit(r.orig, u, job, watermark, first) {
            outcome = Some(stop);
            break;
        }
        first = false;
        if let Err(why) = job.throttle.take_unit_watching(u.len, &mut watch) {
            outcome = Some(Outcome::interrupted(u.offset, why.cause(), why.to_string()));
            break;
        }
        let largest = job.report.largest_unit.get_or_insert(0);
        *largest = (*largest).max(u.len);
        // The kernel's copy and compare cannot be told from other I/O on
        // the drive: the pacer leaves what the drive counts meanwhile out.
        let moved = job.throttle.uncounted(|| r.chunk(*u));
        match moved {
            ChunkResult::Moved => {
                job.report.bytes_refreshed += u.len;
                (job.progress)(u.len);
            }
            ChunkResult::Changed => changed.push((u.offset, u.len)),
            ChunkResult::ReadErrors(bad) => job.report.read_errors.extend(bad),
            ChunkResult::Stop(o) => {
                outcome = Some(o);
                break;
            }
        }
    }
    job.report.changed_meanwhile = changed
        .into_iter()
        .map(|(offset, len)| crate::engine::report::Range { offset, len })
        .collect();
    outcome.unwrap_or_else(|| job.report.done_outcome())
}

/// Why the next unit must not start: cancelled, the file truncated by
/// another process, or too little free space (a skip before the first
/// unit, an interruption after).
fn before_unit(
    orig: BorrowedFd<'_>,
    u: &Chunk,
    job: &FileJob<'_, '_>,
    watermark: u64,
    first: bool,
) -> Option<Outcome> {
    let cfg = job.cfg;
    if cfg.cancel.load(Ordering::Relaxed) {
        let why = StopReason::Cancelled;
        return Some(Outcome::interrupted(u.offset, why.cause(), why.to_string()));
    }
    let size_now = rustix::fs::fstat(orig).map_or(0, |s| s.st_size as u64);
    if size_now < job.opened.meta.size {
        return Some(Outcome::interrupted(
            u.offset,
            Interruption::Changed,
            format!("another process truncated the file to {size_now} bytes; left as it is"),
        ));
    }
    let free = free_bytes(orig);
    if cfg.unsafe_switches.no_space_check() || free >= watermark.saturating_add(u.len) {
        return None;
    }
    let why = StopReason::LowSpace { free, watermark }.to_string();
    Some(if first {
        Outcome::Skipped {
            reason: SkipReason::LowSpace,
            detail: why,
        }
    } else {
        Outcome::interrupted(u.offset, Interruption::LowSpace, why)
    })
}
