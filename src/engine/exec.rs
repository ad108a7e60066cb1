//! Runs a file's direct chunks through a backend: reads run ahead into free
//! buffers, writes of the same bytes follow as the throttle allows, so the
//! read of chunk N+1 overlaps the write of chunk N. Between any two steps the
//! watch is asked whether to stop (lease break, cancel, low space).
//!
//! Invariant: a buffer is written only after a read of exactly the chunk's
//! bytes into it succeeded. Failed reads are narrowed to the smallest failing
//! aligned ranges; the readable rest is refreshed.

use std::collections::VecDeque;
use std::io;
use std::ops::Range;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use xxhash_rust::xxh3::xxh3_64;

use super::backend::{IoBackend, Op};
use super::plan::Chunk;
use super::throttle::TokenBucket;

/// How often, at most, the executor looks at the lease and the stop flag
/// while it waits for I/O or for the throttle.
pub const POLL: Duration = Duration::from_millis(20);

/// Why a file stopped before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// Another process opened or truncated the file.
    LeaseBroken,
    /// Shutdown or Ctrl-C.
    Cancelled,
    /// Free space fell to the watermark.
    LowSpace { free: u64, watermark: u64 },
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::LeaseBroken => write!(f, "another process opened the file"),
            StopReason::Cancelled => write!(f, "cancelled"),
            StopReason::LowSpace { free, watermark } => write!(
                f,
                "free space {} is below the watermark {}",
                crate::units::format_size(*free),
                crate::units::format_size(*watermark)
            ),
        }
    }
}

/// What the executor asks between steps.
pub trait Watch {
    /// Stop now? (lease break, cancel)
    fn should_stop(&mut self) -> Option<StopReason>;
    /// May `len` more bytes be written? (free space on copy-on-write)
    fn space_for(&mut self, len: u64) -> Result<(), StopReason>;
}

/// The rate limit shared by every file an engine refreshes.
#[derive(Debug)]
pub struct Throttle {
    bucket: Option<TokenBucket>,
    epoch: Instant,
}

impl Throttle {
    pub fn new(rate: Option<u64>, burst: u64) -> Throttle {
        let bucket = rate.map(|r| TokenBucket::new(r, burst, Duration::ZERO));
        Throttle {
            bucket,
            epoch: Instant::now(),
        }
    }

    pub fn rate(&self) -> Option<u64> {
        self.bucket.as_ref().map(TokenBucket::rate)
    }

    pub fn try_take(&mut self, n: u64) -> Result<(), Duration> {
        let now = self.epoch.elapsed();
        match &mut self.bucket {
            Some(b) => b.take(n, now),
            None => Ok(()),
        }
    }

    /// Waits for `n` bytes of budget, still answering the watch.
    pub fn take_watching(&mut self, n: u64, watch: &mut dyn Watch) -> Result<(), StopReason> {
        loop {
            if let Some(why) = watch.should_stop() {
                return Err(why);
            }
            match self.try_take(n) {
                Ok(()) => return Ok(()),
                Err(wait) => std::thread::sleep(wait.min(POLL)),
            }
        }
    }
}

/// Options of one run.
#[derive(Debug, Clone, Copy)]
pub struct ExecParams {
    /// Number of buffers in use (requests in flight at most).
    pub depth: usize,
    /// Direct-I/O alignment, the unit read errors are narrowed to.
    pub align: u64,
    /// Read each written chunk back and compare.
    pub verify: bool,
    /// Test-only: write chunks whose read failed (breaks "never write what
    /// was not read").
    pub unsafe_write_failed_reads: bool,
}

/// A fatal problem: the file is reported failed.
#[derive(Debug)]
pub enum ExecError {
    Write {
        offset: u64,
        len: u64,
        source: io::Error,
    },
    Verify {
        offset: u64,
        len: u64,
    },
    Io {
        op: &'static str,
        source: io::Error,
    },
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecError::Write {
                offset,
                len,
                source,
            } => {
                write!(f, "writing {len} bytes at offset {offset}: {source}")
            }
            ExecError::Verify { offset, len } => write!(
                f,
                "verify: {len} bytes at offset {offset} read back differently twice"
            ),
            ExecError::Io { op, source } => write!(f, "{op}: {source}"),
        }
    }
}

/// What happened to the chunks.
#[derive(Debug, Default)]
pub struct ExecResult {
    /// Bytes read and written back (and verified, with verify).
    pub written: u64,
    /// Set when the run stopped early.
    pub stop: Option<StopReason>,
    /// Everything below this offset was handled (only with `stop`).
    pub resume_offset: Option<u64>,
    /// Ranges that could not be read: never written.
    pub bad_ranges: Vec<(Range<u64>, io::ErrorKind, Option<i32>)>,
    pub error: Option<ExecError>,
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    Free,
    Reading(usize),
    Held(usize, u64),
    Writing {
        chunk: usize,
        hash: u64,
        retried: bool,
    },
    Verifying {
        chunk: usize,
        hash: u64,
        retried: bool,
    },
}

/// Runs `chunks` (all direct) against `fd`.
pub fn run_direct(
    backend: &mut dyn IoBackend,
    fd: RawFd,
    chunks: &[Chunk],
    throttle: &mut Throttle,
    watch: &mut dyn Watch,
    params: ExecParams,
    progress: &mut dyn FnMut(u64),
) -> ExecResult {
    let depth = params.depth.clamp(
        1,
        backend.pool().count() / if params.verify { 2 } else { 1 },
    );
    let mut slots = vec![Slot::Free; depth];
    let mut held: VecDeque<usize> = VecDeque::new();
    let mut done = vec![false; chunks.len()];
    let mut bad: Vec<usize> = Vec::new();
    let mut next = 0usize;
    let mut res = ExecResult::default();
    let mut stopping: Option<StopReason> = None;
    let mut fatal = false;

    loop {
        if stopping.is_none() && !fatal {
            stopping = watch.should_stop();
        }
        let mut token_wait = POLL;
        if stopping.is_none() && !fatal {
            // Reads run ahead into free buffers.
            while next < chunks.len() {
                let Some(s) = slots.iter().position(|s| matches!(s, Slot::Free)) else {
                    break;
                };
                if let Err(why) = watch.space_for(chunks[next].len) {
                    stopping = Some(why);
                    break;
                }
                let c = chunks[next];
                if let Err(e) = backend.submit(fd, s, Op::Read, c.offset, c.len as usize) {
                    res.error = Some(ExecError::Io {
                        op: "submitting a read",
                        source: e,
                    });
                    fatal = true;
                    break;
                }
                slots[s] = Slot::Reading(next);
                next += 1;
            }
            // Writes follow, in order, as the budget allows.
            while let Some(&s) = held.front() {
                if stopping.is_some() || fatal {
                    break;
                }
                let Slot::Held(ci, hash) = slots[s] else {
                    unreachable!("held slot not held")
                };
                let c = chunks[ci];
                match throttle.try_take(c.len) {
                    Ok(()) => {
                        if let Err(e) = backend.submit(fd, s, Op::Write, c.offset, c.len as usize) {
                            res.error = Some(ExecError::Io {
                                op: "submitting a write",
                                source: e,
                            });
                            fatal = true;
                            break;
                        }
                        slots[s] = Slot::Writing {
                            chunk: ci,
                            hash,
                            retried: false,
                        };
                        held.pop_front();
                    }
                    Err(wait) => {
                        token_wait = wait.min(POLL);
                        break;
                    }
                }
            }
        }
        if stopping.is_some() || fatal {
            // Data read but not yet written is simply dropped.
            for s in held.drain(..) {
                slots[s] = Slot::Free;
            }
        }
        if backend.in_flight() == 0 {
            let finished = next == chunks.len() && held.is_empty();
            if finished || stopping.is_some() || fatal {
                break;
            }
            std::thread::sleep(token_wait);
            continue;
        }
        let completion = match backend.wait(token_wait) {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            Err(e) => {
                // The ring itself failed: in-flight requests are lost to us,
                // so the fd and buffers must not be reused. Stop here.
                res.error = Some(ExecError::Io {
                    op: "waiting for I/O",
                    source: e,
                });
                return res;
            }
        };
        // Verify reads land in buffer depth + slot.
        let s = if completion.buf >= depth {
            completion.buf - depth
        } else {
            completion.buf
        };
        match (slots[s], completion.op) {
            (Slot::Reading(ci), Op::Read) => {
                let c = chunks[ci];
                let ok = matches!(completion.result, Ok(n) if n as u64 == c.len);
                if !ok && !params.unsafe_write_failed_reads {
                    // Never written: narrowed after the pass.
                    bad.push(ci);
                    done[ci] = true;
                    slots[s] = Slot::Free;
                } else if stopping.is_some() || fatal {
                    slots[s] = Slot::Free;
                } else {
                    let hash = if params.verify {
                        xxh3_64(&backend.pool().get(s)[..c.len as usize])
                    } else {
                        0
                    };
                    slots[s] = Slot::Held(ci, hash);
                    held.push_back(s);
                }
            }
            (
                Slot::Writing {
                    chunk: ci,
                    hash,
                    retried,
                },
                Op::Write,
            ) => {
                let c = chunks[ci];
                match completion.result {
                    Ok(n) if n as u64 == c.len => {
                        if params.verify {
                            let vb = depth + s;
                            if let Err(e) =
                                backend.submit(fd, vb, Op::Read, c.offset, c.len as usize)
                            {
                                res.error = Some(ExecError::Io {
                                    op: "submitting a verify read",
                                    source: e,
                                });
                                fatal = true;
                                slots[s] = Slot::Free;
                            } else {
                                slots[s] = Slot::Verifying {
                                    chunk: ci,
                                    hash,
                                    retried,
                                };
                            }
                        } else {
                            finish_chunk(&mut done, ci, c.len, &mut res, progress);
                            slots[s] = Slot::Free;
                        }
                    }
                    Ok(n) => {
                        res.error = Some(ExecError::Write {
                            offset: c.offset,
                            len: c.len,
                            source: io::Error::other(format!("short write of {n} bytes")),
                        });
                        fatal = true;
                        slots[s] = Slot::Free;
                    }
                    Err(e) => {
                        res.error = Some(ExecError::Write {
                            offset: c.offset,
                            len: c.len,
                            source: e,
                        });
                        fatal = true;
                        slots[s] = Slot::Free;
                    }
                }
            }
            (
                Slot::Verifying {
                    chunk: ci,
                    hash,
                    retried,
                },
                Op::Read,
            ) => {
                let c = chunks[ci];
                let vb = depth + s;
                let same = matches!(completion.result, Ok(n) if n as u64 == c.len)
                    && xxh3_64(&backend.pool().get(vb)[..c.len as usize]) == hash;
                if same {
                    finish_chunk(&mut done, ci, c.len, &mut res, progress);
                    slots[s] = Slot::Free;
                } else if !retried && stopping.is_none() && !fatal {
                    // The original bytes are still in the data buffer: write
                    // them once more.
                    tracing::warn!(
                        offset = c.offset,
                        len = c.len,
                        "verify mismatch; rewriting once"
                    );
                    if let Err(e) = backend.submit(fd, s, Op::Write, c.offset, c.len as usize) {
                        res.error = Some(ExecError::Io {
                            op: "submitting a write",
                            source: e,
                        });
                        fatal = true;
                        slots[s] = Slot::Free;
                    } else {
                        slots[s] = Slot::Writing {
                            chunk: ci,
                            hash,
                            retried: true,
                        };
                    }
                } else {
                    res.error = Some(ExecError::Verify {
                        offset: c.offset,
                        len: c.len,
                    });
                    fatal = true;
                    slots[s] = Slot::Free;
                }
            }
            (state, op) => unreachable!("completion {op:?} for buffer in state {state:?}"),
        }
    }

    if stopping.is_none() && !fatal {
        for ci in bad {
            let c = chunks[ci];
            if let Err(why) = narrow(
                backend,
                fd,
                c.offset..c.end(),
                throttle,
                watch,
                params,
                &mut res,
                progress,
            ) {
                stopping = Some(why);
                break;
            }
        }
    } else {
        for ci in bad {
            let c = chunks[ci];
            res.bad_ranges
                .push((c.offset..c.end(), io::ErrorKind::Other, None));
        }
    }
    res.bad_ranges.sort_by_key(|(r, _, _)| r.start);
    merge_bad(&mut res.bad_ranges);
    if let Some(why) = stopping {
        let first_open = done.iter().position(|d| !d).unwrap_or(chunks.len());
        res.resume_offset = Some(
            chunks
                .get(first_open)
                .map_or_else(|| chunks.last().map_or(0, Chunk::end), |c| c.offset),
        );
        res.stop = Some(why);
    }
    res
}

fn finish_chunk(
    done: &mut [bool],
    ci: usize,
    len: u64,
    res: &mut ExecResult,
    progress: &mut dyn FnMut(u64),
) {
    done[ci] = true;
    res.written += len;
    progress(len);
}

/// Reads `range` in halves until each failing piece is one alignment unit;
/// readable pieces are written back, failing ones recorded and left alone.
#[allow(clippy::too_many_arguments)]
fn narrow(
    backend: &mut dyn IoBackend,
    fd: RawFd,
    range: Range<u64>,
    throttle: &mut Throttle,
    watch: &mut dyn Watch,
    params: ExecParams,
    res: &mut ExecResult,
    progress: &mut dyn FnMut(u64),
) -> Result<(), StopReason> {
    let mut work = vec![range];
    while let Some(r) = work.pop() {
        if let Some(why) = watch.should_stop() {
            return Err(why);
        }
        let len = r.end - r.start;
        let read = sync_io(backend, fd, Op::Read, r.start, len);
        match read {
            Ok(n) if n as u64 == len => {
                watch.space_for(len)?;
                throttle.take_watching(len, watch)?;
                match sync_io(backend, fd, Op::Write, r.start, len) {
                    Ok(n) if n as u64 == len => {
                        res.written += len;
                        progress(len);
                    }
                    Ok(n) => {
                        res.error = Some(ExecError::Write {
                            offset: r.start,
                            len,
                            source: io::Error::other(format!("short write of {n} bytes")),
                        });
                        return Ok(());
                    }
                    Err(e) => {
                        res.error = Some(ExecError::Write {
                            offset: r.start,
                            len,
                            source: e,
                        });
                        return Ok(());
                    }
                }
            }
            other => {
                if len <= params.align {
                    let (kind, errno) = match &other {
                        Err(e) => (e.kind(), e.raw_os_error()),
                        Ok(_) => (io::ErrorKind::UnexpectedEof, None),
                    };
                    tracing::warn!(offset = r.start, len, error = ?other, "unreadable range left alone");
                    res.bad_ranges.push((r, kind, errno));
                } else {
                    let mid = r.start + (len / 2).div_ceil(params.align) * params.align;
                    let mid = mid.min(r.end - params.align).max(r.start + params.align);
                    // Pop order: low half first.
                    work.push(mid..r.end);
                    work.push(r.start..mid);
                }
            }
        }
    }
    Ok(())
}

/// One request through the backend's buffer 0, waited for.
fn sync_io(
    backend: &mut dyn IoBackend,
    fd: RawFd,
    op: Op,
    offset: u64,
    len: u64,
) -> io::Result<usize> {
    backend.submit(fd, 0, op, offset, len as usize)?;
    loop {
        if let Some(c) = backend.wait(POLL)? {
            return c.result;
        }
    }
}

fn merge_bad(v: &mut Vec<(Range<u64>, io::ErrorKind, Option<i32>)>) {
    let mut out: Vec<(Range<u64>, io::ErrorKind, Option<i32>)> = Vec::with_capacity(v.len());
    for (r, k, e) in v.drain(..) {
        match out.last_mut() {
            Some((last, lk, le)) if last.end == r.start && *lk == k && *le == e => last.end = r.end,
            _ => out.push((r, k, e)),
        }
    }
    *v = out;
}

#[cfg(test)]
mod tests;
