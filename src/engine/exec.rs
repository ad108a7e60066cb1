//! Runs a file's direct chunks through a backend: reads run ahead into free
//! buffers, writes of the same bytes follow as the throttle allows, so the
//! read of chunk N+1 overlaps the write of chunk N. Between any two steps the
//! watch is asked whether to stop (lease break, cancel, low space).
//!
//! Invariants: a buffer is written only after a read of exactly the chunk's
//! bytes into it succeeded (failed reads are narrowed to the smallest
//! failing aligned ranges; the readable rest is refreshed); and, under a
//! lease, the bytes of writes in flight are bounded so they finish far
//! inside the kernel's lease-break time ([`WriteWindow`]). A write that
//! completed after the lease could have been revoked is reported in
//! [`ExecResult::exposed`]: it may have landed on another writer's data.

use std::collections::VecDeque;
use std::io;
use std::ops::Range;
use std::time::{Duration, Instant};

pub use outcome::{ExecError, ExecParams, ExecResult};

use crate::engine::pacing::pace::Allowance;
use crate::engine::pacing::throttle::Throttle;
use crate::engine::safety::lease::WriteWindow;
use crate::engine::safety::plan::Chunk;
use crate::engine::safety::watch::{StopReason, Watch, POLL};
use crate::io::backend::Op;
use crate::io::fileio::FileIo;

#[derive(Debug, Clone, Copy)]
enum Slot {
    Free,
    Reading(usize),
    /// Read (or to be written once more after a verify mismatch), waiting
    /// for its write.
    Held {
        chunk: usize,
        hash: u64,
        retried: bool,
    },
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

/// One run's state: which buffer holds what.
struct Exec<'r, 'f> {
    io: &'r mut FileIo<'f>,
    /// Chunks started so far (slots and `done` index them).
    chunks: Vec<Chunk>,
    /// Chunks not started yet: cut to the pacer's request size when they
    /// start.
    pending: VecDeque<Chunk>,
    params: ExecParams,
    depth: usize,
    slots: Vec<Slot>,
    held: VecDeque<usize>,
    done: Vec<bool>,
    bad: Vec<usize>,
    res: ExecResult,
    stopping: Option<StopReason>,
    fatal: bool,
    window: WriteWindow,
}

/// Runs `chunks` (all direct) through `io`. Returns only when nothing of
/// this run is in flight (or the handle could not drain: then the ring is
/// poisoned and every write still in flight is reported exposed).
pub fn run_direct(
    io: &mut FileIo<'_>,
    chunks: &[Chunk],
    throttle: &mut Throttle,
    watch: &mut dyn Watch,
    params: ExecParams,
    progress: &mut dyn FnMut(u64),
) -> ExecResult {
    let depth = params
        .depth
        .clamp(1, io.pool().count() / if params.verify { 2 } else { 1 });
    let window = WriteWindow::new(if params.unsafe_unbounded_writes {
        None
    } else {
        params.lease_break
    });
    let mut x = Exec {
        io,
        chunks: Vec::with_capacity(chunks.len()),
        pending: chunks.iter().copied().collect(),
        params,
        depth,
        slots: vec![Slot::Free; depth],
        held: VecDeque::new(),
        done: Vec::with_capacity(chunks.len()),
        bad: Vec::new(),
        res: ExecResult::default(),
        stopping: None,
        fatal: false,
        window,
    };
    x.main_loop(throttle, watch, progress);
    x.narrow_bad(throttle, watch, progress);
    x.finish()
}

impl Exec<'_, '_> {
    fn running(&self) -> bool {
        self.stopping.is_none() && !self.fatal
    }

    fn fail(&mut self, e: ExecError) {
        self.res.error.get_or_insert(e);
        self.fatal = true;
    }

    fn main_loop(
        &mut self,
        throttle: &mut Throttle,
        watch: &mut dyn Watch,
        progress: &mut dyn FnMut(u64),
    ) {
        loop {
            if self.running() {
                self.stopping = watch.should_stop();
            }
            let mut wait = POLL;
            throttle.tick();
            if self.running() {
                // Writes first: data read is written before more is read
                // (when the depth counts both, a read would take the
                // place of the write that frees its buffer).
                wait = self.start_writes(throttle, watch);
                if self.running() {
                    self.start_reads(throttle, watch);
                }
            }
            if !self.running() {
                self.drop_held();
            }
            if self.io.in_flight() == 0 {
                let finished = self.pending.is_empty() && self.held.is_empty();
                if finished || !self.running() {
                    return;
                }
                std::thread::sleep(wait);
                continue;
            }
            match self.io.wait(wait) {
                Ok(Some(c)) => self.on_completion(c, watch, progress),
                Ok(None) => {}
                Err(e) => {
                    self.fail(ExecError::Io {
                        op: "waiting for I/O",
                        source: e,
                    });
                    self.give_up(watch);
                    return;
                }
            }
        }
    }

    /// Stopping: data read but not yet written is simply dropped (the
    /// resume offset covers it); a chunk waiting to be written once more
    /// after a verify mismatch is a verify failure (what the drive holds
    /// there is not what was read, and the lease is no longer ours).
    fn drop_held(&mut self) {
        for s in std::mem::take(&mut self.held) {
            if let Slot::Held {
                chunk,
                retried: true,
                ..
            } = self.slots[s]
            {
                let c = self.chunks[chunk];
                self.res.error.get_or_insert(ExecError::Verify {
                    offset: c.offset,
                    len: c.len,
                });
            }
            self.slots[s] = Slot::Free;
        }
    }

    /// The ring failed while requests were in flight: reap what can be
    /// reaped; writes not provably done inside the lease are exposed.
    fn give_up(&mut self, watch: &mut dyn Watch) {
        let drained = self.io.drain().is_ok();
        let late = watch.lease_deadline().is_some_and(|d| Instant::now() > d);
        for s in 0..self.slots.len() {
            if let Slot::Writing { chunk, .. } = self.slots[s] {
                if !drained || late {
                    let c = self.chunks[chunk];
                    self.res.exposed.push(c.offset..c.end());
                }
            }
            self.slots[s] = Slot::Free;
        }
    }

    /// Requests of ours at the device that the pacer's depth bounds: our
    /// reads (old data reads slowly and queues), and our writes too while
    /// the drive is shared ([`Allowance::depth_bounds_writes`]). Alone, writes of
    /// fresh data are quick and overlap reads; the write window bounds
    /// them.
    fn busy(&self, allow: &Allowance) -> usize {
        self.slots
            .iter()
            .filter(|s| match s {
                Slot::Reading(_) | Slot::Verifying { .. } => true,
                Slot::Writing { .. } => allow.depth_bounds_writes,
                _ => false,
            })
            .count()
    }

    /// Reads run ahead into free buffers, as many and as large as the
    /// pacer allows.
    fn start_reads(&mut self, throttle: &Throttle, watch: &mut dyn Watch) {
        let allow = throttle.allowance();
        while let Some(&next) = self.pending.front() {
            if self.busy(&allow) >= allow.depth {
                return;
            }
            let Some(s) = self.slots.iter().position(|s| matches!(s, Slot::Free)) else {
                return;
            };
            let c = self.cut(next, allow.request);
            if let Err(why) = watch.space_for(c.len) {
                self.stopping = Some(why);
                return;
            }
            if let Err(e) = self.io.submit(s, Op::Read, c.offset, c.len as usize) {
                self.fail(ExecError::Io {
                    op: "submitting a read",
                    source: e,
                });
                return;
            }
            self.pending.pop_front();
            if c.len < next.len {
                self.pending.push_front(Chunk {
                    offset: c.end(),
                    len: next.len - c.len,
                    direct: next.direct,
                });
            }
            self.slots[s] = Slot::Reading(self.chunks.len());
            self.chunks.push(c);
            self.done.push(false);
        }
    }

    /// The head of `c` no longer than `request` (whole alignment units).
    fn cut(&self, c: Chunk, request: Option<u64>) -> Chunk {
        let align = self.params.align.max(1);
        let max = request.map_or(c.len, |r| (r / align * align).max(align));
        Chunk {
            len: c.len.min(max),
            ..c
        }
    }

    /// Writes follow, in order, as the budget and the write window allow.
    /// Returns how long to wait for more budget.
    fn start_writes(&mut self, throttle: &mut Throttle, watch: &mut dyn Watch) -> Duration {
        while let Some(&s) = self.held.front() {
            // Again each time: taking budget lets the pacer look at the
            // drive, and it may have gone silent to learn.
            let allow = throttle.allowance();
            if allow.depth_bounds_writes && self.busy(&allow) >= allow.depth {
                return POLL;
            }
            let Slot::Held {
                chunk: ci,
                hash,
                retried,
            } = self.slots[s]
            else {
                self.fail(internal("held buffer in another state"));
                return POLL;
            };
            let c = self.chunks[ci];
            if !self.window.admits(c.len) {
                return POLL;
            }
            if let Err(wait) = throttle.try_take(c.len) {
                return wait.min(POLL);
            }
            // Right before the write: is the lease still ours?
            if let Some(why) = watch.should_stop() {
                self.stopping = Some(why);
                return POLL;
            }
            watch.writing();
            if let Err(e) = self.io.submit(s, Op::Write, c.offset, c.len as usize) {
                self.fail(ExecError::Io {
                    op: "submitting a write",
                    source: e,
                });
                return POLL;
            }
            self.window.started(c.len, Instant::now());
            self.slots[s] = Slot::Writing {
                chunk: ci,
                hash,
                retried,
            };
            self.held.pop_front();
        }
        POLL
    }

    fn finish(mut self) -> ExecResult {
        self.res.bad_ranges.sort_by_key(|(r, _, _)| r.start);
        merge_bad(&mut self.res.bad_ranges);
        if let Some(why) = self.stopping.take() {
            let first_open = self.done.iter().position(|d| !d);
            let resume = match first_open {
                Some(i) => self.chunks[i].offset,
                None => self
                    .pending
                    .front()
                    .map(|c| c.offset)
                    .or_else(|| self.chunks.last().map(Chunk::end))
                    .unwrap_or(0),
            };
            self.res.resume_offset = Some(resume);
            self.res.stop = Some(why);
        }
        self.res
    }
}

fn internal(what: &str) -> ExecError {
    ExecError::Internal(what.to_string())
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

mod complete;
mod narrow;
mod outcome;
#[cfg(test)]
mod tests;

use narrow::Narrow;
