//! The per-file I/O handle: the only safe way to submit requests. It binds
//! every request to one open file and one epoch, and drains the backend
//! when it is dropped, on every path (`?`, early return, panic unwinding).
//!
//! Why this is sound, and why no completion can be taken for another
//! file's request:
//! - The handle borrows the file's fd for its whole life, so the fd cannot
//!   be closed (nor the lease released: `Opened::release` consumes the
//!   `Opened`) while the handle exists, and its `Drop` reaps every request
//!   before the borrow ends.
//! - Safe code may leak the handle (`mem::forget`), skipping `Drop`. So a
//!   new handle first reaps whatever an earlier one left in flight, and the
//!   backend's requests carry the handle's epoch: completions of another
//!   epoch are discarded, never handed to this file's state machine.
//! - If the backend cannot be drained (the ring itself fails, or the kernel
//!   does not complete within [`DRAIN_DEADLINE`]), the handle marks it
//!   poisoned; the engine then discards it and builds a new ring, and the
//!   discarded ring leaks its buffers rather than free memory the kernel
//!   may still write into (see `UringBackend`'s `Drop`).
//! - Buffers are only reached through `&`/`&mut` borrows of the handle, and
//!   the executor never touches a buffer between its submit and its
//!   completion (its slot state machine).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::account::OwnIo;
use super::backend::{Completion, IoBackend, Op, Request};
use super::buffers::BufferPool;
use super::error::IoError;

/// How long a drain waits for the kernel before it gives the ring up.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(60);

/// A backend that may be poisoned by a handle that could not drain it.
#[derive(Debug)]
pub struct Ring {
    backend: Box<dyn IoBackend>,
    poisoned: bool,
    /// Where completed requests are counted for the pacer, and the
    /// priorities requests carry.
    own: Arc<OwnIo>,
    /// Per buffer: when its request started, its length, and whether
    /// nothing else of ours was in flight then.
    started: Vec<Option<Started>>,
}

#[derive(Debug, Clone, Copy)]
struct Started {
    at: Instant,
    op: Op,
    len: u64,
    alone: bool,
}

impl Ring {
    pub fn new(backend: Box<dyn IoBackend>, own: Arc<OwnIo>) -> Ring {
        Ring {
            backend,
            poisoned: false,
            own,
            started: Vec::new(),
        }
    }

    /// After a drain reaped everything: the requests it discarded are no
    /// longer ours in flight (the pacer tells the application's reads in
    /// flight from ours by this count).
    fn drained(&mut self) {
        for s in self.started.iter_mut().filter_map(Option::take) {
            match s.op {
                Op::Read => self.own.read_ended(s.len),
                Op::Write => self.own.write_ended(),
            }
        }
    }

    /// Counts a completion for the pacer.
    fn account(&mut self, c: &Completion) {
        let Some(s) = self.started.get_mut(c.buf).and_then(Option::take) else {
            return;
        };
        let done = c.result.is_ok();
        match s.op {
            Op::Read => {
                self.own.read_ended(s.len);
                if done {
                    self.own.read_done(s.len, s.at.elapsed(), s.alone);
                }
            }
            Op::Write => {
                self.own.write_ended();
                if done {
                    self.own.write_done(s.len);
                }
            }
        }
    }

    /// Whether requests may still be in the kernel: the ring must be
    /// discarded (and its buffers leaked) before anything else uses it.
    pub fn poisoned(&self) -> bool {
        self.poisoned || self.backend.in_flight() > 0
    }

    pub fn backend(&self) -> &dyn IoBackend {
        self.backend.as_ref()
    }

    /// Opens a handle for one file. Fails when the ring is poisoned or
    /// leftovers of a leaked handle cannot be reaped.
    pub fn file<'a>(&'a mut self, fd: BorrowedFd<'a>) -> Result<FileIo<'a>, IoError> {
        if self.poisoned {
            return Err(IoError::Poisoned);
        }
        #[cfg(test)]
        let guarded = !test_switch::no_drain();
        #[cfg(not(test))]
        let guarded = true;
        if guarded && self.backend.in_flight() > 0 {
            if let Err(e) = drain(self.backend.as_mut(), DRAIN_DEADLINE) {
                self.poisoned = true;
                return Err(IoError::Drain(e));
            }
            self.drained();
        }
        let epoch = self.backend.next_epoch();
        Ok(FileIo {
            ring: self,
            fd,
            epoch,
        })
    }
}

impl Drop for Ring {
    /// A ring discarded (poisoned: its requests could not be reaped) or
    /// ended: the requests it started are no longer ours in flight to the
    /// pacer, which would otherwise wait on them at every learning (the
    /// engine's next ring counts into the same `OwnIo`).
    fn drop(&mut self) {
        self.drained();
    }
}

/// Reaps everything in flight, discarding the completions.
fn drain(backend: &mut dyn IoBackend, deadline: Duration) -> io::Result<()> {
    let end = Instant::now() + deadline;
    let mut cancelled = false;
    while backend.in_flight() > 0 {
        if !cancelled {
            backend.cancel_all();
            cancelled = true;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{} requests still in the kernel after {deadline:?}",
                    backend.in_flight()
                ),
            ));
        }
        backend.wait(left.min(Duration::from_millis(200)))?;
    }
    Ok(())
}

/// Proof that no write of ours to the file is in flight, so its times are
/// what our completed writes left (a look at them while one is in flight
/// may see them half stored: ctime of the write, mtime not yet). Made by
/// who counts the writes, from a count of zero (the per-file I/O handle
/// [`FileIo`], the executor's write window: `counted` is for those two
/// counters), or by a synchronous write as it returns. A failed wait can
/// leave a write in flight; then none is made.
#[derive(Debug)]
pub struct NoWriteInFlight(());

impl NoWriteInFlight {
    /// When `writes_in_flight` (the caller's own count) is zero.
    pub(crate) fn counted(writes_in_flight: usize) -> Option<NoWriteInFlight> {
        (writes_in_flight == 0).then_some(NoWriteInFlight(()))
    }

    /// A synchronous write of `buf` at `offset`, and once it returned
    /// (whatever it returned), the proof.
    pub(crate) fn write_all_at(
        fd: BorrowedFd<'_>,
        buf: &[u8],
        offset: u64,
    ) -> (io::Result<()>, NoWriteInFlight) {
        let written = super::syscalls::write_all_at(fd, buf, offset);
        (written, NoWriteInFlight(()))
    }
}

/// Requests for one open file. See the module doc for the invariants.
#[derive(Debug)]
pub struct FileIo<'a> {
    ring: &'a mut Ring,
    fd: BorrowedFd<'a>,
    epoch: u32,
}

impl FileIo<'_> {
    pub fn pool(&self) -> &BufferPool {
        self.ring.backend.pool()
    }

    pub fn pool_mut(&mut self) -> &mut BufferPool {
        self.ring.backend.pool_mut()
    }

    /// Starts `op` of `len` bytes at `offset` with buffer `buf`. The caller
    /// must not touch the buffer until its completion comes back.
    pub fn submit(&mut self, buf: usize, op: Op, offset: u64, len: usize) -> Result<(), IoError> {
        let req = Request {
            epoch: self.epoch,
            fd: self.fd.as_raw_fd(),
            buf,
            op,
            offset,
            len,
            ioprio: match op {
                Op::Write => self.ring.own.write_ioprio(),
                Op::Read => self.ring.own.read_ioprio(),
            },
        };
        let alone = self.ring.backend.in_flight() == 0;
        // SAFETY: the fd is borrowed for the handle's life and `Drop`
        // reaps every request before that ends; a leaked handle's requests
        // are reaped by the next `Ring::file` before anything else runs.
        unsafe { self.ring.backend.submit(req) }.map_err(|source| IoError::Submit {
            op: op.name(),
            offset,
            len,
            source,
        })?;
        match op {
            Op::Read => self.ring.own.read_started(len as u64),
            Op::Write => self.ring.own.write_started(),
        }
        let r = &mut self.ring.started;
        if r.len() <= buf {
            r.resize(buf + 1, None);
        }
        r[buf] = Some(Started {
            at: Instant::now(),
            op,
            len: len as u64,
            alone,
        });
        Ok(())
    }

    /// The next completion of this file, waiting at most `timeout`.
    /// Completions of other epochs (a leaked handle's) are dropped.
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<Completion>, IoError> {
        loop {
            let c = self.ring.backend.wait(timeout).map_err(IoError::Wait);
            #[cfg(test)]
            if test_switch::no_drain() {
                return c;
            }
            let c = c?;
            if let Some(c) = &c {
                self.ring.account(c);
            }
            match c {
                Some(c) if c.epoch != self.epoch => {
                    tracing::error!(epoch = c.epoch, "dropped a completion of another file");
                }
                other => return Ok(other),
            }
        }
    }

    /// This file's requests not yet completed.
    pub fn in_flight(&self) -> usize {
        self.ring.backend.in_flight()
    }

    /// Nothing of this file's in flight, writes included: the proof a look
    /// at its times needs.
    pub fn no_write_in_flight(&self) -> Option<NoWriteInFlight> {
        NoWriteInFlight::counted(self.in_flight())
    }

    /// Reaps everything in flight (discarding the results); on failure the
    /// ring is poisoned.
    pub fn drain(&mut self) -> Result<(), IoError> {
        let r = drain(self.ring.backend.as_mut(), DRAIN_DEADLINE).map_err(IoError::Drain);
        match r {
            Ok(()) => self.ring.drained(),
            Err(_) => self.ring.poisoned = true,
        }
        r
    }

    /// One request, waited for. Only when nothing else is in flight. A
    /// failure of the ring and the request's own error read alike (the
    /// kind is kept).
    pub fn sync(&mut self, buf: usize, op: Op, offset: u64, len: usize) -> io::Result<usize> {
        debug_assert_eq!(self.in_flight(), 0, "sync request with others in flight");
        self.submit(buf, op, offset, len)?;
        loop {
            if let Some(c) = self.wait(Duration::from_millis(100))? {
                return c.result;
            }
        }
    }
}

impl Drop for FileIo<'_> {
    fn drop(&mut self) {
        #[cfg(test)]
        if test_switch::no_drain() {
            return;
        }
        if self.in_flight() > 0 {
            if let Err(e) = self.drain() {
                tracing::error!(
                    "could not reap the I/O of a finished file: {e}; rebuilding the ring"
                );
            }
        }
    }
}

/// Test-only: turn the drain discipline off (drop, leftovers, epochs) so a
/// test can show what it protects.
#[cfg(test)]
pub mod test_switch {
    use std::cell::Cell;

    thread_local! {
        static NO_DRAIN: Cell<bool> = const { Cell::new(false) };
    }

    pub fn no_drain() -> bool {
        NO_DRAIN.with(Cell::get)
    }

    pub fn set_no_drain(on: bool) {
        NO_DRAIN.with(|c| c.set(on));
    }
}
