//! The unaligned pieces of a file (its tail, pieces O_DIRECT cannot
//! reach), rewritten exactly through the page cache under the same lease.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Instant;

use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};

use crate::engine::pacing::throttle::Throttle;
use crate::engine::report::{Range, ReadError};
use crate::engine::safety::plan::Chunk;
use crate::engine::safety::watch::{NoWriteInFlight, StopReason, Watch};
use crate::io::syscalls::read_exact_at;

pub(super) struct BufferedResult {
    pub(super) written: u64,
    pub(super) bad: Vec<ReadError>,
}

pub(super) enum BufferedError {
    Stop(StopReason, u64),
    Io(String),
}

/// Unaligned pieces (heads, and the tail up to EOF) go through the page
/// cache so exactly those bytes are written: the file never grows.
pub(super) struct Buffered<'a> {
    pub(super) fd: BorrowedFd<'a>,
    pub(super) throttle: &'a mut Throttle,
    pub(super) watch: &'a mut dyn Watch,
    pub(super) verify: bool,
    pub(super) progress: &'a mut dyn FnMut(u64),
    pub(super) exposed: &'a mut Vec<Range>,
}

impl Buffered<'_> {
    pub(super) fn rewrite(&mut self, pieces: &[Chunk]) -> Result<BufferedResult, BufferedError> {
        let flags = fcntl_getfl(self.fd).map_err(|e| io_err("fcntl", e))?;
        fcntl_setfl(self.fd, flags - OFlags::DIRECT).map_err(|e| io_err("clearing O_DIRECT", e))?;
        let result = self.pieces(pieces);
        let restore = fcntl_setfl(self.fd, flags);
        let out = result?;
        restore.map_err(|e| io_err("restoring O_DIRECT", e))?;
        Ok(out)
    }

    fn pieces(&mut self, pieces: &[Chunk]) -> Result<BufferedResult, BufferedError> {
        let fd = self.fd;
        let mut out = BufferedResult {
            written: 0,
            bad: vec![],
        };
        let mut saved: Vec<(Chunk, Vec<u8>)> = Vec::new();
        for c in pieces {
            if let Some(why) = self.watch.should_stop() {
                return Err(BufferedError::Stop(why, c.offset));
            }
            self.watch
                .space_for(c.len)
                .map_err(|why| BufferedError::Stop(why, c.offset))?;
            let mut buf = vec![0u8; c.len as usize];
            // Through the page cache: the drive counts it, we cannot.
            let read = self
                .throttle
                .uncounted(|| read_exact_at(fd, &mut buf, c.offset));
            if let Err(e) = read {
                out.bad.push(ReadError {
                    offset: c.offset,
                    len: c.len,
                    error: e.to_string(),
                });
                continue;
            }
            self.throttle
                .take_watching(c.len, self.watch)
                .map_err(|why| BufferedError::Stop(why, c.offset))?;
            self.watch.writing();
            let (written, proof) = NoWriteInFlight::write_all_at(fd, &buf, c.offset);
            self.watch.quiescent(proof);
            if self
                .watch
                .lease_deadline()
                .is_some_and(|d| Instant::now() > d)
            {
                self.exposed.push(Range {
                    offset: c.offset,
                    len: c.len,
                });
            }
            written.map_err(|e| {
                BufferedError::Io(format!(
                    "writing {} bytes at offset {}: {e}",
                    c.len, c.offset
                ))
            })?;
            out.written += c.len;
            (self.progress)(c.len);
            if self.verify {
                saved.push((*c, buf));
            }
        }
        rustix::fs::fdatasync(fd).map_err(|e| io_err("fdatasync", e))?;
        for c in pieces {
            // Leave no cached pages behind (they are clean now).
            let _ = rustix::fs::fadvise(
                fd,
                c.offset,
                std::num::NonZeroU64::new(c.len),
                rustix::fs::Advice::DontNeed,
            );
        }
        for (c, want) in saved {
            let mut got = vec![0u8; c.len as usize];
            let read = self
                .throttle
                .uncounted(|| read_exact_at(fd, &mut got, c.offset));
            read.map_err(|e| {
                BufferedError::Io(format!("verify read at offset {}: {e}", c.offset))
            })?;
            if got != want {
                return Err(BufferedError::Io(format!(
                    "verify: {} bytes at offset {} read back differently",
                    c.len, c.offset
                )));
            }
        }
        Ok(out)
    }
}

fn io_err(op: &str, e: rustix::io::Errno) -> BufferedError {
    BufferedError::Io(format!("{op}: {}", io::Error::from(e)))
}
