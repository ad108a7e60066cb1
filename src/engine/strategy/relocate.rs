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

use crate::engine::report::FailKind;
use std::collections::VecDeque;
use std::io;
use std::num::NonZeroU64;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::Duration;

use rustix::fs::{fcntl_getfl, fcntl_setfl, Advice, FallocateFlags, Mode, OFlags};

mod methods;

pub use crate::engine::types::DEFAULT_RELOCATE_CHUNK;

use crate::engine::report::{Interruption, Outcome, ReadError, SkipReason};
use crate::engine::safety::plan::{self, Chunk, PlanParams};
use crate::engine::safety::watch::{StopReason, Watch};
use crate::engine::strategy::{Done, FileJob};
use crate::io::backend::Op;
use crate::io::fileio::FileIo;
use crate::io::syscalls::{self, read_exact_at, write_all_at, FsKind};
const PIECE: usize = 1 << 20;
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

/// Reads `c` in pieces of one buffer with every buffer of `io` in flight,
/// handing each piece read whole to `sink` (offset, bytes). Returns the
/// pieces that failed to read. On an error (a submit, a wait, or the
/// sink's: ENOSPC, EDQUOT) it stops submitting and reaps everything still
/// in flight before it returns: no read of this chunk outlives the call.
pub fn read_pieces(
    io: &mut FileIo<'_>,
    c: Chunk,
    sink: &mut dyn FnMut(u64, &[u8]) -> io::Result<()>,
) -> io::Result<Vec<(u64, usize)>> {
    let piece = io.pool().buf_len() as u64;
    let mut free: Vec<usize> = (0..io.pool().count()).collect();
    let mut at: Vec<(u64, usize)> = vec![(0, 0); free.len()];
    let mut next = c.offset;
    let mut failed = vec![];
    let mut error: Option<io::Error> = None;
    loop {
        while error.is_none() && next < c.end() {
            let Some(b) = free.pop() else { break };
            let n = (c.end() - next).min(piece) as usize;
            if let Err(e) = io.submit(b, Op::Read, next, n) {
                free.push(b);
                error = Some(e.into());
                break;
            }
            at[b] = (next, n);
            next += n as u64;
        }
        if io.in_flight() == 0 {
            break;
        }
        let done = match io.wait(Duration::from_secs(1)) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(e) => {
                // The handle drains (or poisons the ring) on its own.
                let _ = io.drain();
                return Err(error.unwrap_or_else(|| e.into()));
            }
        };
        let Some(&(off, n)) = at.get(done.buf) else {
            error.get_or_insert_with(|| io::Error::other("completion for an unknown buffer"));
            continue;
        };
        free.push(done.buf);
        match done.result {
            Ok(got) if got == n => {
                if error.is_none() {
                    if let Err(e) = sink(off, &io.pool().get(done.buf)[..n]) {
                        error = Some(e);
                    }
                }
            }
            _ => failed.push((off, n)),
        }
    }
    if let Some(e) = error {
        return Err(e);
    }
    failed.sort_unstable();
    Ok(failed)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    MoveExt,
    Dedupe,
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

/// Drops from the page cache the pages of `[off, off+len)` that were not
/// resident before (`before`, one flag per page from `off` rounded down).
fn drop_new_pages(fd: BorrowedFd<'_>, off: u64, len: u64, before: &[bool]) {
    let first = off / 4096;
    let last = (off + len).div_ceil(4096);
    let mut p = first;
    while p < last {
        let was = |q: u64| before.get((q - first) as usize).copied().unwrap_or(true);
        if was(p) {
            p += 1;
            continue;
        }
        let start = p;
        while p < last && !was(p) {
            p += 1;
        }
        let _ = rustix::fs::fadvise(
            fd,
            start * 4096,
            NonZeroU64::new((p - start) * 4096),
            Advice::DontNeed,
        );
    }
}

/// Which pages of the range are cached; none known when `mincore` fails
/// (a sandbox may refuse it: said once, counted, see `refused`).
fn resident(fd: BorrowedFd<'_>, off: u64, len: u64) -> Vec<bool> {
    match syscalls::resident_pages(fd, off, len) {
        Ok(v) => v,
        Err(e) => {
            if crate::io::refused::is_refusal(&e) {
                crate::io::refused::note(crate::io::refused::Call::Mincore, &e);
            } else {
                tracing::debug!("mincore: {e}");
            }
            vec![]
        }
    }
}

/// What happened to one chunk.
enum ChunkResult {
    Moved,
    /// Somebody changed the bytes meanwhile: left as they are.
    Changed,
    ReadErrors(Vec<ReadError>),
    Stop(Outcome),
}

struct Relocator<'a, 'f> {
    orig: BorrowedFd<'a>,
    temp: OwnedFd,
    method: Method,
    block: u64,
    buf: Vec<u8>,
    io: &'a mut FileIo<'f>,
    /// Bytes moved in this file so far (for a refusal's report).
    moved: u64,
    /// Test switch: see `UnsafeSwitches::no_layout_recheck`.
    no_layout_recheck: bool,
}

impl Relocator<'_, '_> {
    /// Reads `c` through the page cache with the engine's ring, all its
    /// buffers in flight (a drive with parallel channels serves them in
    /// parallel; the kernel's page-by-page MOVE_EXT would read one block at
    /// a time). With `to_temp`, each piece is also written to the temp
    /// file. Returns the pieces that failed to read.
    fn read_chunk(&mut self, c: Chunk, to_temp: bool) -> io::Result<Vec<(u64, usize)>> {
        let temp = self.temp.as_fd();
        let mut sink = |off: u64, bytes: &[u8]| {
            if to_temp {
                write_all_at(temp, bytes, off)
            } else {
                Ok(())
            }
        };
        read_pieces(self.io, c, &mut sink)
    }

    /// Re-reads failed pieces block by block: good blocks go to the temp
    /// file (when `to_temp`), bad ones are returned, merged.
    fn narrow(&mut self, failed: &[(u64, usize)], to_temp: bool) -> io::Result<Vec<ReadError>> {
        let mut bad: Vec<ReadError> = vec![];
        for &(off, n) in failed {
            let mut b = off;
            while b < off + n as u64 {
                let m = (off + n as u64 - b).min(self.block) as usize;
                match read_exact_at(self.orig, &mut self.buf[..m], b) {
                    Ok(()) if to_temp => write_all_at(self.temp.as_fd(), &self.buf[..m], b)?,
                    Ok(()) => {}
                    Err(e) => match bad.last_mut() {
                        Some(r) if r.offset + r.len == b => r.len += m as u64,
                        _ => bad.push(ReadError {
                            offset: b,
                            len: m as u64,
                            error: e.to_string(),
                        }),
                    },
                }
                b += m as u64;
            }
        }
        Ok(bad)
    }

    fn chunk(&mut self, c: Chunk) -> ChunkResult {
        let before = resident(self.orig, c.offset, c.len);
        let r = match self.method {
            Method::MoveExt => self.move_ext(c),
            Method::Dedupe => {
                let mut r = self.dedupe(c);
                if matches!(r, ChunkResult::Changed) {
                    // Once more, with the bytes as they are now.
                    r = self.dedupe(c);
                }
                r
            }
        };
        drop_new_pages(self.orig, c.offset, c.len, &before);
        self.reread_evicted(c, &before);
        let _ = rustix::fs::fadvise(
            &self.temp,
            c.offset,
            NonZeroU64::new(c.len),
            Advice::DontNeed,
        );
        // Free the donor's old blocks / the temp file's reference now.
        let b0 = c.offset / self.block * self.block;
        let b1 = c.end().next_multiple_of(self.block);
        let _ = rustix::fs::fallocate(
            &self.temp,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            b0,
            b1 - b0,
        );
        r
    }

    /// Pages of the application's that the remap dropped (XFS and btrfs
    /// invalidate the whole range) are read back in, from the new blocks:
    /// the application finds its working set where it left it.
    fn reread_evicted(&mut self, c: Chunk, before: &[bool]) {
        if before.is_empty() {
            return;
        }
        let after = resident(self.orig, c.offset, c.len);
        let first = c.offset / 4096 * 4096;
        let evicted = |p: usize| before[p] && !after.get(p).copied().unwrap_or(true);
        let mut p = 0;
        while p < before.len() {
            if !evicted(p) {
                p += 1;
                continue;
            }
            let start = p;
            while p < before.len() && p - start < PIECE / 4096 && evicted(p) {
                p += 1;
            }
            let off = first + start as u64 * 4096;
            let len = ((p - start) * 4096).min(self.buf.len());
            // Buffered (our description has O_DIRECT off), FADV_RANDOM: just
            // these pages. A short read at EOF is fine.
            let _ = rustix::io::pread(self.orig, &mut self.buf[..len], off);
        }
    }
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
    let p = match plan::for_file(orig, &params) {
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
    // Units of work: the plan's chunks; an unaligned piece right after an
    // aligned chunk (the tail) joins it when the two fit in one chunk.
    let mut units: Vec<Chunk> = vec![];
    for c in p.chunks {
        match units.last_mut() {
            Some(u) if u.end() == c.offset && u.len + c.len <= chunk + block => u.len += c.len,
            _ => units.push(c),
        }
    }
    let mut skip = job.skip;
    plan::skip_done(&mut units, &mut skip);
    if let Some(u) = units.iter().find(|u| u.offset % block != 0) {
        return Outcome::Skipped {
            reason: SkipReason::StrategyUnavailable,
            detail: format!("data at offset {} is not block-aligned", u.offset),
        };
    }
    let temp = match rustix::fs::openat(
        job.target.dir.as_fd(),
        ".",
        OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    ) {
        Ok(fd) => fd,
        Err(e) => {
            return Outcome::Skipped {
                reason: SkipReason::StrategyUnavailable,
                detail: format!(
                    "cannot create a temporary file next to it: {}",
                    io::Error::from(e)
                ),
            }
        }
    };
    if let Err(e) = rustix::fs::ftruncate(&temp, o.meta.size) {
        return Outcome::Failed {
            kind: crate::engine::report::FailKind::Io,
            reason: format!("sizing the temporary file: {}", io::Error::from(e)),
        };
    }
    // Both methods read through the page cache: O_DIRECT off for our file
    // description, and no readahead (FADV_RANDOM, also ours only): we read
    // exactly the chunk, in parallel, into small folios the kernel's
    // MOVE_EXT can use as they are (with readahead's large folios it read
    // every block again, one at a time: 20x slower, measured). The dedupe
    // path compares page-cache pages: reading them once keeps the slow
    // media read once.
    let fl = fcntl_getfl(orig).unwrap_or(OFlags::empty());
    if let Err(e) = fcntl_setfl(orig, fl - OFlags::DIRECT) {
        return Outcome::Failed {
            kind: crate::engine::report::FailKind::Io,
            reason: format!("turning O_DIRECT off: {}", io::Error::from(e)),
        };
    }
    let _ = rustix::fs::fadvise(orig, 0, None, Advice::Random);
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

fn relocate_units(mut r: Relocator<'_, '_>, units: &[Chunk], job: &mut FileJob<'_, '_>) -> Outcome {
    let o = job.opened;
    let cfg = job.cfg;
    let orig = r.orig;
    let watermark = cfg.min_free.map_or_else(
        || rustix::fs::fstatvfs(orig).map_or(0, |s| s.f_blocks.saturating_mul(s.f_frsize) / 20),
        |b| b.0,
    );
    let mut watch = CancelWatch(&cfg.cancel);
    let mut outcome = None;
    let mut changed: Vec<(u64, u64)> = vec![];
    let mut pending: VecDeque<Chunk> = units.iter().copied().collect();
    let mut i = 0;
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
        i += 1;
        if cfg.cancel.load(Ordering::Relaxed) {
            let why = StopReason::Cancelled;
            outcome = Some(Outcome::interrupted(u.offset, why.cause(), why.to_string()));
            break;
        }
        let size_now = rustix::fs::fstat(orig).map_or(0, |s| s.st_size as u64);
        if size_now < o.meta.size {
            outcome = Some(Outcome::interrupted(
                u.offset,
                Interruption::Changed,
                format!("another process truncated the file to {size_now} bytes; left as it is"),
            ));
            break;
        }
        let free = free_bytes(orig);
        if !cfg.unsafe_switches.no_space_check() && free < watermark.saturating_add(u.len) {
            let why = StopReason::LowSpace { free, watermark }.to_string();
            outcome = Some(if i == 1 {
                Outcome::Skipped {
                    reason: SkipReason::LowSpace,
                    detail: why,
                }
            } else {
                Outcome::interrupted(u.offset, Interruption::LowSpace, why)
            });
            break;
        }
        if let Err(why) = job.throttle.take_unit_watching(u.len, &mut watch) {
            outcome = Some(Outcome::interrupted(u.offset, why.cause(), why.to_string()));
            break;
        }
        let largest = job.report.largest_unit.get_or_insert(0);
        *largest = (*largest).max(u.len);
        // The kernel's copy and compare cannot be told from other I/O on
        // the drive: the pacer ignores the ticks they fall in.
        job.throttle.uncounted_io();
        let moved = r.chunk(*u);
        job.throttle.uncounted_io();
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
