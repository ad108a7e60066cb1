//! Read errors, narrowed: a chunk that failed to read is read again in
//! halves until each failing piece is one alignment unit; readable pieces
//! are written back, failing ones are recorded and never written.

use std::io;
use std::ops::Range;
use std::time::Instant;

use super::outcome::{ExecError, ExecResult};
use crate::engine::pacing::throttle::Throttle;
use crate::engine::safety::watch::{StopReason, Watch};
use crate::io::backend::Op;
use crate::io::fileio::FileIo;

/// Reads a range in halves until each failing piece is one alignment unit;
/// readable pieces are written back, failing ones recorded and left alone.
pub(super) struct Narrow<'a, 'f> {
    pub io: &'a mut FileIo<'f>,
    pub throttle: &'a mut Throttle,
    pub watch: &'a mut dyn Watch,
    pub align: u64,
    pub res: &'a mut ExecResult,
    pub progress: &'a mut dyn FnMut(u64),
}

impl Narrow<'_, '_> {
    pub fn range(&mut self, range: Range<u64>) -> Result<(), StopReason> {
        let align = self.align;
        let mut work = vec![range];
        while let Some(r) = work.pop() {
            if let Some(why) = self.watch.should_stop() {
                return Err(why);
            }
            let len = r.end - r.start;
            match self.io.sync(0, Op::Read, r.start, len as usize) {
                Ok(n) if n as u64 == len => {
                    self.watch.space_for(len)?;
                    self.throttle.take_watching(len, self.watch)?;
                    if !self.write(r.start, len) {
                        return Ok(());
                    }
                }
                other if len <= align => {
                    let (kind, errno) = match &other {
                        Err(e) => (e.kind(), e.raw_os_error()),
                        Ok(_) => (io::ErrorKind::UnexpectedEof, None),
                    };
                    tracing::warn!(offset = r.start, len, error = ?other, "unreadable range left alone");
                    self.res.bad_ranges.push((r, kind, errno));
                }
                _ => {
                    let mid = r.start + (len / 2).div_ceil(align) * align;
                    let mid = mid.min(r.end - align).max(r.start + align);
                    // Pop order: low half first.
                    work.push(mid..r.end);
                    work.push(r.start..mid);
                }
            }
        }
        Ok(())
    }

    /// Writes back one readable piece; false on a write error (recorded).
    fn write(&mut self, offset: u64, len: u64) -> bool {
        self.watch.writing();
        let result = self.io.sync(0, Op::Write, offset, len as usize);
        // A failed wait can leave the write in flight: reaped here (the
        // run returns with nothing in flight); not reaped, it is exposed
        // and its times are not looked at (they may be half stored).
        if let Err(e) = self.io.drain() {
            tracing::warn!(offset, len, "a write of a narrowed range not reaped: {e}");
        }
        let reaped = match self.io.no_write_in_flight() {
            Some(proof) => {
                self.watch.quiescent(proof);
                true
            }
            None => false,
        };
        if !reaped
            || self
                .watch
                .lease_deadline()
                .is_some_and(|d| Instant::now() > d)
        {
            self.res.exposed.push(offset..offset + len);
        }
        let source = match result {
            Ok(n) if n as u64 == len => {
                self.res.written += len;
                (self.progress)(len);
                return true;
            }
            Ok(n) => io::Error::other(format!("short write of {n} bytes")),
            Err(e) => e,
        };
        self.res.error = Some(ExecError::Write {
            offset,
            len,
            source,
        });
        false
    }
}
