//! One relocation unit: read through the page cache with the engine's
//! ring, moved by the filesystem's method (see `methods`), and the page
//! cache left as the application had it.

use std::io;
use std::num::NonZeroU64;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{Advice, FallocateFlags};

use super::pieces::read_pieces;
use crate::engine::report::{Outcome, ReadError};
use crate::engine::safety::plan::Chunk;
use crate::io::fileio::FileIo;
use crate::io::syscalls::{self, read_exact_at, write_all_at};

/// The buffer for narrowing and re-reading, one piece at a time.
pub(super) const PIECE: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Method {
    MoveExt,
    Dedupe,
}

/// What happened to one chunk.
pub(super) enum ChunkResult {
    Moved,
    /// Somebody changed the bytes meanwhile: left as they are.
    Changed,
    ReadErrors(Vec<ReadError>),
    Stop(Outcome),
}

pub(super) struct Relocator<'a, 'f> {
    pub(super) orig: BorrowedFd<'a>,
    pub(super) temp: OwnedFd,
    pub(super) method: Method,
    pub(super) block: u64,
    pub(super) buf: Vec<u8>,
    pub(super) io: &'a mut FileIo<'f>,
    /// Bytes moved in this file so far (for a refusal's report).
    pub(super) moved: u64,
    /// Test switch: see `UnsafeSwitches::no_layout_recheck`.
    pub(super) no_layout_recheck: bool,
}

impl Relocator<'_, '_> {
    /// Reads `c` through the page cache with the engine's ring, all its
    /// buffers in flight (a drive with parallel channels serves them in
    /// parallel; the kernel's page-by-page MOVE_EXT would read one block at
    /// a time). With `to_temp`, each piece is also written to the temp
    /// file. Returns the pieces that failed to read.
    pub(super) fn read_chunk(&mut self, c: Chunk, to_temp: bool) -> io::Result<Vec<(u64, usize)>> {
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
    pub(super) fn narrow(
        &mut self,
        failed: &[(u64, usize)],
        to_temp: bool,
    ) -> io::Result<Vec<ReadError>> {
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

    pub(super) fn chunk(&mut self, c: Chunk) -> ChunkResult {
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
