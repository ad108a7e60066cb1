//! The backends' common vocabulary: which ran, a request and its
//! completion, and the trait both implement.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use serde::Serialize;

use crate::io::buffers::BufferPool;

/// Which backend ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackendKind {
    IoUring,
    Sync,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::IoUring => "io_uring",
            BackendKind::Sync => "pread/pwrite",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
        }
    }
}

/// One request: which file handle (epoch), buffer, operation and range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The epoch of the [`crate::io::fileio::FileIo`] that submitted it.
    pub epoch: u32,
    pub fd: RawFd,
    pub buf: usize,
    pub op: Op,
    pub offset: u64,
    pub len: usize,
    /// I/O priority for the kernel (`ioprio`), 0 for the task's own.
    pub ioprio: u16,
}

/// A finished request: its epoch, buffer, what it did, bytes moved or the error.
#[derive(Debug)]
pub struct Completion {
    pub epoch: u32,
    pub buf: usize,
    pub op: Op,
    pub result: io::Result<usize>,
}

/// Moves bytes between files and the pool's buffers.
pub trait IoBackend: Send + std::fmt::Debug {
    fn kind(&self) -> BackendKind;
    fn pool(&self) -> &BufferPool;
    fn pool_mut(&mut self) -> &mut BufferPool;
    /// Queues `req`. `Ok` means the request is now owned by the backend: it
    /// will show up in [`IoBackend::wait`] (or the backend is broken and
    /// must be discarded). `Err` means it was never queued.
    ///
    /// # Safety
    /// `req.fd` must stay open, and buffer `req.buf` untouched by the
    /// caller, until the request's completion has been returned by `wait`.
    /// [`crate::io::fileio::FileIo`] guarantees both.
    unsafe fn submit(&mut self, req: Request) -> io::Result<()>;
    /// Next completion of any epoch, waiting at most `timeout`; `None` on
    /// timeout or when nothing is in flight.
    fn wait(&mut self, timeout: Duration) -> io::Result<Option<Completion>>;
    /// Requests queued or in the kernel, not yet returned by `wait`.
    fn in_flight(&self) -> usize;
    /// Asks the kernel to cancel every request in flight (best effort:
    /// block I/O already at the device completes normally).
    fn cancel_all(&mut self) {}
    /// A new epoch for a file handle (never 0 after the first wrap).
    fn next_epoch(&mut self) -> u32;
}

/// io_uring with registered buffers where the kernel allows it.
///
/// A request must name one of the pool's buffers and fit in it.
pub(super) fn check_request(pool: &BufferPool, req: &Request) -> io::Result<()> {
    if req.len > pool.buf_len() || req.buf >= pool.count() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "request outside the buffer pool",
        ));
    }
    Ok(())
}
