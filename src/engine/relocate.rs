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

use std::io;
use std::num::NonZeroU64;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;

use rustix::fs::{fcntl_getfl, fcntl_setfl, Advice, FallocateFlags, Mode, OFlags};

use super::backend::{IoBackend, Op};
use super::exec::{StopReason, Watch};
use super::guard::{Opened, Target};
use super::inplace::{read_exact_at, write_all_at};
use super::plan::{self, Chunk, PlanParams};
use super::report::{FileReport, Outcome, ReadError, SkipReason};
use super::sys::{self, Dedupe, FsKind};
use super::EngineConfig;

/// Default largest relocation unit.
pub const DEFAULT_RELOCATE_CHUNK: u64 = 64 << 20;
const PIECE: usize = 1 << 20;

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

/// What happened to one chunk.
enum ChunkResult {
    Moved,
    /// Somebody changed the bytes meanwhile: left as they are.
    Changed,
    ReadErrors(Vec<ReadError>),
    Stop(Outcome),
}

struct Relocator<'a> {
    orig: BorrowedFd<'a>,
    temp: OwnedFd,
    method: Method,
    block: u64,
    buf: Vec<u8>,
    io: &'a mut dyn IoBackend,
}

impl Relocator<'_> {
    /// Reads `c` through the page cache with the engine's ring, all its
    /// buffers in flight (a drive with parallel channels serves them in
    /// parallel; the kernel's page-by-page MOVE_EXT would read one block at
    /// a time). With `to_temp`, each piece is also written to the temp
    /// file. Returns the pieces that failed to read.
    fn read_chunk(&mut self, c: Chunk, to_temp: bool) -> io::Result<Vec<(u64, usize)>> {
        let piece = self.io.pool().buf_len() as u64;
        let mut free: Vec<usize> = (0..self.io.pool().count()).collect();
        let mut at: Vec<(u64, usize)> = vec![(0, 0); free.len()];
        let mut next = c.offset;
        let mut failed = vec![];
        let raw = std::os::fd::AsRawFd::as_raw_fd(&self.orig);
        loop {
            while next < c.end() {
                let Some(b) = free.pop() else { break };
                let n = (c.end() - next).min(piece) as usize;
                self.io.submit(raw, b, Op::Read, next, n)?;
                at[b] = (next, n);
                next += n as u64;
            }
            if self.io.in_flight() == 0 {
                break;
            }
            let Some(done) = self.io.wait(std::time::Duration::from_secs(60))? else {
                continue;
            };
            let (off, n) = at[done.buf];
            match done.result {
                Ok(got) if got == n => {
                    if to_temp {
                        write_all_at(self.temp.as_fd(), &self.io.pool().get(done.buf)[..n], off)?;
                    }
                }
                _ => failed.push((off, n)),
            }
            free.push(done.buf);
        }
        failed.sort_unstable();
        Ok(failed)
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

    fn chunk(&mut self, c: Chunk, first: bool) -> ChunkResult {
        let before = sys::resident_pages(self.orig, c.offset, c.len).unwrap_or_default();
        let r = match self.method {
            Method::MoveExt => self.move_ext(c, first),
            Method::Dedupe => {
                let mut r = self.dedupe(c, first);
                if matches!(r, ChunkResult::Changed) {
                    // Once more, with the bytes as they are now.
                    r = self.dedupe(c, first);
                }
                r
            }
        };
        drop_new_pages(self.orig, c.offset, c.len, &before);
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

    fn unavailable(&self, what: &str, e: io::Error) -> ChunkResult {
        ChunkResult::Stop(Outcome::Skipped {
            reason: SkipReason::StrategyUnavailable,
            detail: format!("{what} is not supported for this file: {e}"),
        })
    }

    fn move_ext(&mut self, c: Chunk, first: bool) -> ChunkResult {
        // Bring the chunk into the page cache first, in parallel; an
        // unreadable block is reported and its chunk left where it is.
        let failed = match self.read_chunk(c, false) {
            Ok(f) => f,
            Err(e) => {
                return ChunkResult::Stop(Outcome::Failed {
                    reason: format!("reading at offset {}: {e}", c.offset),
                })
            }
        };
        if !failed.is_empty() {
            return match self.narrow(&failed, false) {
                Ok(bad) if !bad.is_empty() => ChunkResult::ReadErrors(bad),
                // Readable on the second try: leave it for the next run.
                Ok(_) => ChunkResult::Changed,
                Err(e) => ChunkResult::Stop(Outcome::Failed {
                    reason: format!("reading at offset {}: {e}", c.offset),
                }),
            };
        }
        let b0 = c.offset / self.block;
        let blocks = c.end().div_ceil(self.block) - b0;
        if let Err(e) = rustix::fs::fallocate(
            &self.temp,
            FallocateFlags::empty(),
            b0 * self.block,
            blocks * self.block,
        ) {
            return ChunkResult::Stop(Outcome::Interrupted {
                offset: c.offset,
                reason: format!("allocating the donor blocks: {}", io::Error::from(e)),
            });
        }
        let mut moved = 0;
        let mut busy = 0;
        while moved < blocks {
            match sys::move_extents(self.orig, self.temp.as_fd(), b0 + moved, blocks - moved) {
                Ok(0) => {
                    return ChunkResult::Stop(Outcome::Failed {
                        reason: format!("MOVE_EXT made no progress at offset {}", c.offset),
                    })
                }
                Ok(n) => moved += n,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && busy < 20 => {
                    // Pages under writeback: wait for it.
                    busy += 1;
                    let _ = rustix::fs::fdatasync(self.orig);
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) if e.raw_os_error() == Some(libc::EIO) => {
                    let off = (b0 + moved) * self.block;
                    return ChunkResult::ReadErrors(vec![ReadError {
                        offset: off,
                        len: c.end().saturating_sub(off),
                        error: e.to_string(),
                    }]);
                }
                Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {
                    return ChunkResult::Changed; // truncated meanwhile
                }
                Err(e)
                    if first
                        && moved == 0
                        && matches!(
                            e.raw_os_error(),
                            Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOTTY | libc::EPERM)
                        ) =>
                {
                    return self.unavailable("EXT4_IOC_MOVE_EXT", e)
                }
                Err(e) => {
                    return ChunkResult::Stop(Outcome::Failed {
                        reason: format!("MOVE_EXT at offset {}: {e}", (b0 + moved) * self.block),
                    })
                }
            }
        }
        // The kernel copied through the page cache: make it durable.
        if let Err(e) = rustix::fs::fdatasync(self.orig) {
            return ChunkResult::Stop(Outcome::Failed {
                reason: format!("fdatasync: {}", io::Error::from(e)),
            });
        }
        ChunkResult::Moved
    }

    /// Reads the chunk (once, through the page cache) into the temp file;
    /// returns unreadable ranges, narrowed.
    fn copy(&mut self, c: Chunk) -> Result<Vec<ReadError>, io::Error> {
        let failed = self.read_chunk(c, true)?;
        self.narrow(&failed, true)
    }

    fn dedupe(&mut self, c: Chunk, first: bool) -> ChunkResult {
        match self.copy(c) {
            Ok(bad) if !bad.is_empty() => return ChunkResult::ReadErrors(bad),
            Ok(_) => {}
            Err(e) => {
                return ChunkResult::Stop(Outcome::Interrupted {
                    offset: c.offset,
                    reason: format!("writing the temporary copy: {e}"),
                })
            }
        }
        if let Err(e) = rustix::fs::fdatasync(&self.temp) {
            return ChunkResult::Stop(Outcome::Interrupted {
                offset: c.offset,
                reason: format!("fdatasync of the temporary copy: {}", io::Error::from(e)),
            });
        }
        let mut pos = c.offset;
        while pos < c.end() {
            match sys::dedupe(self.temp.as_fd(), self.orig, pos, c.end() - pos) {
                Ok(Dedupe::Same(0)) => {
                    return ChunkResult::Stop(Outcome::Failed {
                        reason: format!("FIDEDUPERANGE made no progress at offset {pos}"),
                    })
                }
                Ok(Dedupe::Same(n)) => pos += n,
                Ok(Dedupe::Differs) => return ChunkResult::Changed,
                Err(e)
                    if first
                        && pos == c.offset
                        && matches!(
                            e.raw_os_error(),
                            Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::EPERM | libc::EXDEV)
                        ) =>
                {
                    return self.unavailable("FIDEDUPERANGE (reflink)", e)
                }
                // The file was truncated or its EOF moved under us.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return ChunkResult::Changed,
                Err(e) => {
                    return ChunkResult::Stop(Outcome::Failed {
                        reason: format!("FIDEDUPERANGE at offset {pos}: {e}"),
                    })
                }
            }
        }
        ChunkResult::Moved
    }
}

/// Whether `fs` can relocate at all.
pub fn supported(fs: FsKind) -> bool {
    matches!(fs, FsKind::Ext4 | FsKind::Xfs | FsKind::Btrfs)
}

/// Relocates the planned data of `o` (open without a lease).
pub fn run(
    ctx: &mut super::inplace::Ctx,
    t: &Target,
    o: &Opened,
    cfg: &EngineConfig,
    skip: u64,
    report: &mut FileReport,
    progress: &mut dyn FnMut(u64),
) -> Outcome {
    report.strategy = "relocate";
    let orig = o.fd.as_fd();
    let method = match o.fs {
        FsKind::Ext4 => Method::MoveExt,
        FsKind::Xfs | FsKind::Btrfs => Method::Dedupe,
    };
    let block = rustix::fs::fstatvfs(orig).map_or(4096, |s| s.f_bsize.max(512));
    let (seek, extents) = match plan::data_layout(orig, o.meta.size) {
        Ok(l) => l,
        Err(reason) => return Outcome::Failed { reason },
    };
    let chunk = cfg.relocate_chunk.max(block) / block * block;
    let params = PlanParams {
        size: o.meta.size,
        align: block,
        chunk,
        rewrite_shared: cfg.rewrite_shared,
        unsafe_write_holes: false,
        unsafe_direct_tail: false,
    };
    let p = plan::plan(&params, &seek, &extents);
    report.excluded = p.excluded;
    report.bytes_planned = p.bytes();
    if p.chunks.is_empty() {
        return super::inplace::nothing_planned(&p, o.meta.size);
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
    let mut skip = skip;
    plan::skip_done(&mut units, &mut skip);
    if let Some(u) = units.iter().find(|u| u.offset % block != 0) {
        return Outcome::Skipped {
            reason: SkipReason::StrategyUnavailable,
            detail: format!("data at offset {} is not block-aligned", u.offset),
        };
    }
    let temp = match rustix::fs::openat(
        t.dir.as_fd(),
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
            reason: format!("sizing the temporary file: {}", io::Error::from(e)),
        };
    }
    // Buffered reads for the dedupe path (the kernel compares page-cache
    // pages; reading them once is what keeps the slow media read once).
    // Both methods read through the page cache: O_DIRECT off for our file
    // description, and no readahead (FADV_RANDOM, also ours only): we read
    // exactly the chunk, in parallel, into small folios the kernel's
    // MOVE_EXT can use as they are (with readahead's large folios it read
    // every block again, one at a time: 20x slower, measured).
    let fl = fcntl_getfl(orig).unwrap_or(OFlags::empty());
    if let Err(e) = fcntl_setfl(orig, fl - OFlags::DIRECT) {
        return Outcome::Failed {
            reason: format!("turning O_DIRECT off: {}", io::Error::from(e)),
        };
    }
    let _ = rustix::fs::fadvise(orig, 0, None, Advice::Random);
    let watermark = cfg.min_free.unwrap_or_else(|| {
        rustix::fs::fstatvfs(orig).map_or(0, |s| s.f_blocks.saturating_mul(s.f_frsize) / 20)
    });
    let mut r = Relocator {
        orig,
        temp,
        method,
        block,
        buf: vec![0u8; PIECE],
        io: ctx.backend.as_mut(),
    };
    let throttle = &mut ctx.throttle;
    let mut watch = CancelWatch(&cfg.cancel);
    let mut outcome = None;
    let mut changed: Vec<(u64, u64)> = vec![];
    for (i, u) in units.iter().enumerate() {
        if cfg.cancel.load(Ordering::Relaxed) {
            outcome = Some(Outcome::Interrupted {
                offset: u.offset,
                reason: StopReason::Cancelled.to_string(),
            });
            break;
        }
        let size_now = rustix::fs::fstat(orig).map_or(0, |s| s.st_size as u64);
        if size_now < o.meta.size {
            outcome = Some(Outcome::Interrupted {
                offset: u.offset,
                reason: format!(
                    "another process truncated the file to {size_now} bytes; left as it is"
                ),
            });
            break;
        }
        let free = free_bytes(orig);
        if !cfg.unsafe_switches.no_space_check && free < watermark.saturating_add(u.len) {
            let why = StopReason::LowSpace { free, watermark }.to_string();
            outcome = Some(if i == 0 {
                Outcome::Skipped {
                    reason: SkipReason::LowSpace,
                    detail: why,
                }
            } else {
                Outcome::Interrupted {
                    offset: u.offset,
                    reason: why,
                }
            });
            break;
        }
        if let Err(why) = throttle.take_watching(u.len, &mut watch) {
            outcome = Some(Outcome::Interrupted {
                offset: u.offset,
                reason: why.to_string(),
            });
            break;
        }
        match r.chunk(*u, i == 0) {
            ChunkResult::Moved => {
                report.bytes_refreshed += u.len;
                progress(u.len);
            }
            ChunkResult::Changed => changed.push((u.offset, u.len)),
            ChunkResult::ReadErrors(bad) => report.read_errors.extend(bad),
            ChunkResult::Stop(o) => {
                outcome = Some(o);
                break;
            }
        }
    }
    let _ = fcntl_setfl(orig, fl);
    let _ = rustix::fs::fadvise(orig, 0, None, Advice::Normal);
    if let Err(e) = rustix::fs::fsync(orig) {
        outcome.get_or_insert(Outcome::Failed {
            reason: format!("fsync: {}", io::Error::from(e)),
        });
    }
    report.changed_meanwhile = changed
        .into_iter()
        .map(|(offset, len)| super::report::Range { offset, len })
        .collect();
    if let Some(o) = outcome {
        return o;
    }
    report.done_outcome()
}
