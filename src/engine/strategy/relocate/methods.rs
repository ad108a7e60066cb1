//! The two kernel methods that move a unit's data to new blocks, and what
//! their refusals mean: ext4's `EXT4_IOC_MOVE_EXT` into a donor file, and
//! XFS/btrfs `FIDEDUPERANGE` from a temporary copy. See the parent module.

use crate::engine::report::FailKind;
use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use rustix::fs::FallocateFlags;

use super::unit::{ChunkResult, Relocator};
use crate::engine::report::{Outcome, ReadError, SkipReason};
use crate::engine::safety::plan::{self, Chunk};
use crate::io::syscalls::{self, Dedupe};

impl Relocator<'_, '_> {
    /// The kernel said no: a skip naming its answer and what to do.
    fn refused(&self, what: &str, e: &io::Error) -> ChunkResult {
        let advice = match e.raw_os_error() {
            Some(libc::EBUSY) => "the file's pages stay busy: mapped by another process in large folios, which this kernel's MOVE_EXT cannot move (Linux 6.18), or under writeback; a later run tries again, or refresh it in place when it is not in use",
            Some(libc::EPERM) => "the file is protected (fs-verity, immutable, swap or a DAX mapping); it cannot be relocated",
            Some(libc::EOPNOTSUPP | libc::ENOTTY) => "the filesystem does not support it here (data=journal, encryption, inline data, no reflink); refresh it in place when it is not in use",
            _ => "refresh it in place when it is not in use",
        };
        let moved = if self.moved > 0 {
            format!("; {} bytes were relocated before", self.moved)
        } else {
            String::new()
        };
        ChunkResult::Stop(Outcome::Skipped {
            reason: SkipReason::KernelRefused,
            detail: format!("{what} refused: {e}: {advice}{moved}"),
        })
    }

    pub(super) fn move_ext(&mut self, c: Chunk) -> ChunkResult {
        // Bring the chunk into the page cache first, in parallel; an
        // unreadable block is reported and its chunk left where it is.
        let failed = match self.read_chunk(c, false) {
            Ok(f) => f,
            Err(e) => return fail(FailKind::Io, format!("reading at offset {}: {e}", c.offset)),
        };
        if !failed.is_empty() {
            return match self.narrow(&failed, false) {
                Ok(bad) if !bad.is_empty() => ChunkResult::ReadErrors(bad),
                // Readable on the second try: leave it for the next run.
                Ok(_) => ChunkResult::Changed,
                Err(e) => fail(FailKind::Io, format!("reading at offset {}: {e}", c.offset)),
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
            let e = io::Error::from(e);
            return fail(
                space_or_io(&e),
                format!(
                    "allocating {} bytes of donor blocks: {e}",
                    blocks * self.block
                ),
            );
        }
        if let Some(stop) = self.swap_extents(c, b0, blocks) {
            return stop;
        }
        self.moved += c.len;
        // The kernel copied through the page cache: make it durable.
        if let Err(e) = rustix::fs::fdatasync(self.orig) {
            return fail(FailKind::Io, format!("fdatasync: {}", io::Error::from(e)));
        }
        ChunkResult::Moved
    }

    /// MOVE_EXT of `blocks` blocks from `b0` into the donor, retrying what
    /// the kernel finds busy; `None` when all moved.
    fn swap_extents(&mut self, c: Chunk, b0: u64, blocks: u64) -> Option<ChunkResult> {
        let mut moved = 0;
        let mut busy = 0;
        let mut small_pages = false;
        // After repeated EBUSY, one block per call: a smaller unit.
        let mut step = blocks;
        while moved < blocks {
            let n = step.min(blocks - moved);
            let at = (b0 + moved) * self.block;
            match syscalls::move_extents(self.orig, self.temp.as_fd(), b0 + moved, n) {
                // Nothing left to move there: another process truncated or
                // punched the range meanwhile.
                Ok(0) => return Some(ChunkResult::Changed),
                Ok(n) => moved += n,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && !small_pages => {
                    small_pages = true;
                    if let Err(e) = self.as_small_pages(c, at) {
                        return Some(fail(
                            FailKind::Io,
                            format!("reading at offset {}: {e}", c.offset),
                        ));
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && busy < 40 => {
                    // Pages under writeback: wait for it, then smaller units.
                    busy += 1;
                    if busy == 20 {
                        step = 1;
                    }
                    let _ = rustix::fs::fdatasync(self.orig);
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) if e.raw_os_error() == Some(libc::EIO) => {
                    return Some(ChunkResult::ReadErrors(vec![ReadError {
                        offset: at,
                        len: c.end().saturating_sub(at),
                        error: e.to_string(),
                    }]));
                }
                Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {
                    return Some(ChunkResult::Changed); // truncated meanwhile
                }
                Err(e) if is_space(&e) => {
                    return Some(fail(
                        FailKind::NoSpace,
                        format!("MOVE_EXT at offset {at}: {e}"),
                    ))
                }
                Err(e) => {
                    self.moved += moved * self.block;
                    return Some(self.refused("EXT4_IOC_MOVE_EXT", &e));
                }
            }
        }
        None
    }

    /// Large folios (the application wrote or read the file in big
    /// pieces) are refused by MOVE_EXT (Linux 6.18: EBUSY, every time).
    /// Drops the unit's clean, unmapped cached pages from `rest` on and
    /// reads them back as single pages (the orig fd reads with
    /// POSIX_FADV_RANDOM); the pages that were cached before are read
    /// back after the unit (`reread_evicted`), so the application's cache
    /// stays.
    fn as_small_pages(&mut self, c: Chunk, rest: u64) -> io::Result<()> {
        let _ = rustix::fs::fdatasync(self.orig);
        let _ = rustix::fs::fadvise(
            self.orig,
            rest,
            std::num::NonZeroU64::new(c.end().saturating_sub(rest)),
            rustix::fs::Advice::DontNeed,
        );
        self.read_chunk(c, false).map(|_| ())
    }

    /// Reads the chunk (once, through the page cache) into the temp file;
    /// returns unreadable ranges, narrowed.
    fn copy(&mut self, c: Chunk) -> Result<Vec<ReadError>, io::Error> {
        let failed = self.read_chunk(c, true)?;
        self.narrow(&failed, true)
    }

    pub(super) fn dedupe(&mut self, c: Chunk) -> ChunkResult {
        match self.copy(c) {
            Ok(bad) if !bad.is_empty() => return ChunkResult::ReadErrors(bad),
            Ok(_) => {}
            Err(e) => {
                return fail(
                    space_or_io(&e),
                    format!("writing the temporary copy at offset {}: {e}", c.offset),
                )
            }
        }
        if let Err(e) = rustix::fs::fdatasync(&self.temp) {
            return fail(
                FailKind::Io,
                format!("fdatasync of the temporary copy: {}", io::Error::from(e)),
            );
        }
        // Checked after the copy was read: a hole punched (or a range
        // zeroed) before our read reads as zeros, which the kernel would
        // find identical and remap, filling the hole; one punched after
        // our read makes the bytes differ and the kernel refuses.
        match plan::still_plain_data(self.orig, c.offset..c.end()) {
            _ if self.no_layout_recheck => {}
            Ok(true) => {}
            Ok(false) => return ChunkResult::Changed,
            Err(e) => {
                return fail(
                    FailKind::Io,
                    format!("checking the layout at offset {}: {e}", c.offset),
                )
            }
        }
        let mut pos = c.offset;
        while pos < c.end() {
            match syscalls::dedupe(self.temp.as_fd(), self.orig, pos, c.end() - pos) {
                // The range is not there any more (truncated meanwhile).
                Ok(Dedupe::Same(0)) => return ChunkResult::Changed,
                Ok(Dedupe::Same(n)) => {
                    pos += n;
                    self.moved += n;
                }
                Ok(Dedupe::Differs) => return ChunkResult::Changed,
                // The file was truncated or its EOF moved under us.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return ChunkResult::Changed,
                Err(e) if is_space(&e) => {
                    return fail(
                        FailKind::NoSpace,
                        format!("FIDEDUPERANGE at offset {pos}: {e}"),
                    )
                }
                Err(e) if e.raw_os_error() == Some(libc::EIO) => {
                    return fail(FailKind::Io, format!("FIDEDUPERANGE at offset {pos}: {e}"))
                }
                Err(e) => return self.refused("FIDEDUPERANGE (reflink)", &e),
            }
        }
        ChunkResult::Moved
    }
}

fn space_or_io(e: &io::Error) -> FailKind {
    if is_space(e) {
        FailKind::NoSpace
    } else {
        FailKind::Io
    }
}

fn fail(kind: FailKind, reason: String) -> ChunkResult {
    ChunkResult::Stop(Outcome::Failed { kind, reason })
}

fn is_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}
