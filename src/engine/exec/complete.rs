//! A completion, handled: a read fills its chunk's buffer (or is
//! narrowed when it failed), a write finishes the chunk (or is reported
//! exposed when it may have landed after the lease), a verify read
//! compares the bytes written with those read.

use crate::engine::pacing::throttle::Throttle;
use std::io;
use std::time::Instant;

use xxhash_rust::xxh3::xxh3_64;

use super::{internal, Exec, ExecError, Narrow, Slot};
use crate::engine::safety::watch::Watch;
use crate::io::backend::Op;

impl Exec<'_, '_> {
    pub(super) fn on_completion(
        &mut self,
        c: crate::io::backend::Completion,
        watch: &mut dyn Watch,
        progress: &mut dyn FnMut(u64),
    ) {
        // Verify reads land in buffer depth + slot.
        let s = if c.buf >= self.depth {
            c.buf - self.depth
        } else {
            c.buf
        };
        if s >= self.slots.len() {
            self.fail(internal("completion for a buffer out of range"));
            return;
        }
        match (self.slots[s], c.op) {
            (Slot::Reading(ci), Op::Read) => self.read_done(s, ci, c.result),
            (
                Slot::Writing {
                    chunk,
                    hash,
                    retried,
                },
                Op::Write,
            ) => {
                let now = Instant::now();
                let ch = self.chunks[chunk];
                self.window.finished(ch.len, now);
                if watch.lease_deadline().is_some_and(|d| now > d) {
                    self.res.exposed.push(ch.offset..ch.end());
                }
                self.write_done(s, chunk, hash, retried, c.result, progress);
                if let Some(proof) = self.window.no_write_in_flight() {
                    watch.quiescent(proof);
                }
            }
            (
                Slot::Verifying {
                    chunk,
                    hash,
                    retried,
                },
                Op::Read,
            ) => self.verify_done(s, chunk, hash, retried, c.result, progress),
            (state, op) => {
                tracing::error!(
                    ?state,
                    ?op,
                    buf = c.buf,
                    "completion does not match its buffer"
                );
                self.fail(internal("completion does not match its buffer"));
            }
        }
    }

    fn read_done(&mut self, s: usize, ci: usize, result: io::Result<usize>) {
        let c = self.chunks[ci];
        let ok = matches!(result, Ok(n) if n as u64 == c.len);
        if !ok && !self.params.unsafe_write_failed_reads {
            // Never written: narrowed after the pass.
            self.bad.push(ci);
            self.done[ci] = true;
            self.slots[s] = Slot::Free;
        } else if !self.running() {
            self.slots[s] = Slot::Free;
        } else {
            let hash = if self.params.verify {
                xxh3_64(&self.io.pool().get(s)[..c.len as usize])
            } else {
                0
            };
            self.slots[s] = Slot::Held {
                chunk: ci,
                hash,
                retried: false,
            };
            self.held.push_back(s);
        }
    }

    fn write_done(
        &mut self,
        s: usize,
        ci: usize,
        hash: u64,
        retried: bool,
        result: io::Result<usize>,
        progress: &mut dyn FnMut(u64),
    ) {
        let c = self.chunks[ci];
        self.slots[s] = Slot::Free;
        match result {
            Ok(n) if n as u64 == c.len => {
                if !self.params.verify {
                    self.finish_chunk(ci, progress);
                    return;
                }
                let vb = self.depth + s;
                match self.io.submit(vb, Op::Read, c.offset, c.len as usize) {
                    Ok(()) => {
                        self.slots[s] = Slot::Verifying {
                            chunk: ci,
                            hash,
                            retried,
                        }
                    }
                    Err(e) => self.fail(ExecError::Io {
                        op: "submitting a verify read",
                        source: e,
                    }),
                }
            }
            Ok(n) => self.fail(ExecError::Write {
                offset: c.offset,
                len: c.len,
                source: io::Error::other(format!("short write of {n} bytes")),
            }),
            Err(e) => self.fail(ExecError::Write {
                offset: c.offset,
                len: c.len,
                source: e,
            }),
        }
    }

    fn verify_done(
        &mut self,
        s: usize,
        ci: usize,
        hash: u64,
        retried: bool,
        result: io::Result<usize>,
        progress: &mut dyn FnMut(u64),
    ) {
        let c = self.chunks[ci];
        let vb = self.depth + s;
        let same = matches!(result, Ok(n) if n as u64 == c.len)
            && xxh3_64(&self.io.pool().get(vb)[..c.len as usize]) == hash;
        self.slots[s] = Slot::Free;
        if same {
            self.finish_chunk(ci, progress);
        } else if !retried && self.running() {
            // The original bytes are still in the data buffer: write them
            // once more, first in line, through the same gate as every
            // write (the write window, the budget, the lease looked at
            // right before).
            tracing::warn!(
                offset = c.offset,
                len = c.len,
                "verify mismatch; rewriting once"
            );
            self.slots[s] = Slot::Held {
                chunk: ci,
                hash,
                retried: true,
            };
            self.held.push_front(s);
        } else {
            self.fail(ExecError::Verify {
                offset: c.offset,
                len: c.len,
            });
        }
    }

    fn finish_chunk(&mut self, ci: usize, progress: &mut dyn FnMut(u64)) {
        let len = self.chunks[ci].len;
        self.done[ci] = true;
        self.res.written += len;
        progress(len);
    }

    /// Failed chunks, narrowed (only when the run went through).
    pub(super) fn narrow_bad(
        &mut self,
        throttle: &mut Throttle,
        watch: &mut dyn Watch,
        progress: &mut dyn FnMut(u64),
    ) {
        let bad = std::mem::take(&mut self.bad);
        for (i, &ci) in bad.iter().enumerate() {
            let c = self.chunks[ci];
            if !self.running() || self.io.in_flight() > 0 {
                for &cj in &bad[i..] {
                    let c = self.chunks[cj];
                    self.res
                        .bad_ranges
                        .push((c.offset..c.end(), io::ErrorKind::Other, None));
                }
                return;
            }
            let mut n = Narrow {
                io: &mut *self.io,
                throttle: &mut *throttle,
                watch: &mut *watch,
                align: self.params.align,
                res: &mut self.res,
                progress: &mut *progress,
            };
            if let Err(why) = n.range(c.offset..c.end()) {
                self.stopping = Some(why);
            }
            if self.res.error.is_some() {
                self.fatal = true;
            }
        }
    }
}
