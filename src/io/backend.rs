//! The two ways the engine moves bytes: an io_uring ring with registered
//! buffers and several requests in flight, or plain pread/pwrite (one at a
//! time) where io_uring is not allowed. Both own the buffer pool.
//!
//! Nothing outside this module and [`super::fileio`] submits requests: the
//! raw [`IoBackend::submit`] is `unsafe` (its fd must outlive the request),
//! and [`super::fileio::FileIo`] is the safe way in. Every request carries
//! the epoch of the file handle it was submitted for, so a completion can
//! never be taken for another file's request.

use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::RawFd;
use std::time::Duration;

use io_uring::{opcode, types, IoUring};
use serde::Serialize;

use super::buffers::BufferPool;
use super::error::IoError;

mod sync;
pub use sync::SyncBackend;

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
    /// The epoch of the [`super::fileio::FileIo`] that submitted it.
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

/// Packs epoch, buffer and op into io_uring's 64-bit user data.
fn tag(epoch: u32, buf: usize, op: Op) -> u64 {
    (u64::from(epoch) << 32) | ((buf as u64) << 1) | u64::from(op == Op::Write)
}

fn untag(t: u64) -> (u32, usize, Op) {
    let op = if t & 1 == 1 { Op::Write } else { Op::Read };
    ((t >> 32) as u32, ((t & 0xffff_ffff) >> 1) as usize, op)
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
    /// [`super::fileio::FileIo`] guarantees both.
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
/// Why the raw pointers handed to the kernel stay valid: the buffers live in
/// `pool`, which is only freed in `Drop` after the ring is closed and every
/// request reaped; if any request could not be reaped, the pool is leaked
/// instead (the kernel may still DMA into it). File descriptors are
/// resolved by the kernel when the request is issued, which happens inside
/// `io_uring_enter` for the requests we build (no `IOSQE_ASYNC`, no links),
/// and the caller keeps them open until then anyway (see `submit`'s
/// contract and `FileIo`).
pub struct UringBackend {
    ring: ManuallyDrop<IoUring>,
    pool: ManuallyDrop<BufferPool>,
    fixed: bool,
    in_flight: usize,
    epoch: u32,
    /// `io_uring_enter` failed after a request was queued: the request is
    /// still in the submission queue; the next `wait` submits it again.
    enter_error: Option<io::Error>,
}

impl std::fmt::Debug for UringBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringBackend")
            .field("fixed", &self.fixed)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

/// The wait for stragglers when a ring is discarded.
const DROP_DRAIN: Duration = Duration::from_secs(30);

impl UringBackend {
    /// Sets up a ring for `pool.count()` requests in flight. Fails with the
    /// kernel's error (EPERM, ENOSYS) when io_uring is not available.
    pub fn new(pool: BufferPool) -> io::Result<UringBackend> {
        // Room for every buffer plus the cancel requests of a drain.
        let entries = (pool.count() as u32 + 1).next_power_of_two().max(8);
        let ring = IoUring::builder().build(entries)?;
        // Registered buffers save a page pin per request; without them (a
        // low RLIMIT_MEMLOCK) plain reads and writes still work.
        let iovecs = pool.iovecs();
        // SAFETY: the iovecs describe the pool's allocation, which outlives
        // the ring: `Drop` closes the ring first and frees the pool only
        // when no request is in flight (else it leaks it).
        let fixed = unsafe { ring.submitter().register_buffers(&iovecs) }.is_ok();
        if !fixed {
            tracing::debug!("io_uring buffer registration refused; using unregistered buffers");
        }
        Ok(UringBackend {
            ring: ManuallyDrop::new(ring),
            pool: ManuallyDrop::new(pool),
            fixed,
            in_flight: 0,
            epoch: 0,
            enter_error: None,
        })
    }

    fn reap(&mut self) -> Option<Completion> {
        let cqe = self.ring.completion().next()?;
        let t = cqe.user_data();
        if t == CANCEL_TAG {
            return self.reap();
        }
        self.in_flight -= 1;
        let (epoch, buf, op) = untag(t);
        let res = cqe.result();
        let result = if res < 0 {
            Err(io::Error::from_raw_os_error(-res))
        } else {
            Ok(res as usize)
        };
        Some(Completion {
            epoch,
            buf,
            op,
            result,
        })
    }
}

/// User data of cancel requests (never a valid request tag: buffer index
/// all ones in a write).
const CANCEL_TAG: u64 = u64::MAX;

/// A request must name one of the pool's buffers and fit in it.
fn check_request(pool: &BufferPool, req: &Request) -> io::Result<()> {
    if req.len > pool.buf_len() || req.buf >= pool.count() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "request outside the buffer pool",
        ));
    }
    Ok(())
}

fn u32_len(len: usize) -> io::Result<u32> {
    u32::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "request too large"))
}

impl IoBackend for UringBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::IoUring
    }

    fn pool(&self) -> &BufferPool {
        &self.pool
    }

    fn pool_mut(&mut self) -> &mut BufferPool {
        &mut self.pool
    }

    unsafe fn submit(&mut self, req: Request) -> io::Result<()> {
        check_request(&self.pool, &req)?;
        let ptr = self.pool.ptr(req.buf);
        let len = u32_len(req.len)?;
        let idx = u16::try_from(req.buf).map_err(|_| io::Error::other("too many buffers"))?;
        let fd = types::Fd(req.fd);
        let entry = match (req.op, self.fixed) {
            (Op::Read, true) => opcode::ReadFixed::new(fd, ptr, len, idx)
                .offset(req.offset)
                .ioprio(req.ioprio)
                .build(),
            (Op::Write, true) => opcode::WriteFixed::new(fd, ptr, len, idx)
                .offset(req.offset)
                .ioprio(req.ioprio)
                .build(),
            (Op::Read, false) => opcode::Read::new(fd, ptr, len)
                .offset(req.offset)
                .ioprio(req.ioprio)
                .build(),
            (Op::Write, false) => opcode::Write::new(fd, ptr, len)
                .offset(req.offset)
                .ioprio(req.ioprio)
                .build(),
        };
        let entry = entry.user_data(tag(req.epoch, req.buf, req.op));
        // SAFETY: the buffer is the pool's and outlives the request (see
        // the type's doc); the caller keeps the fd open and the buffer
        // untouched until the completion is reaped (this fn's contract).
        unsafe { self.ring.submission().push(&entry) }
            .map_err(|_| io::Error::other("submission queue full"))?;
        // From here on the request is ours to reap, whatever enter says.
        self.in_flight += 1;
        match self.ring.submit() {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) => {}
            Err(e) => self.enter_error = Some(e),
        }
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<Option<Completion>> {
        loop {
            if let Some(c) = self.reap() {
                return Ok(Some(c));
            }
            if self.in_flight == 0 {
                return Ok(None);
            }
            let ts = types::Timespec::from(timeout);
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => self.enter_error = None,
                Err(e) if e.raw_os_error() == Some(libc::ETIME) => {
                    if self.ring.completion().is_empty() {
                        return Ok(None);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(self.enter_error.take().unwrap_or(e)),
            }
        }
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn cancel_all(&mut self) {
        if self.in_flight == 0 {
            return;
        }
        let entry = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(CANCEL_TAG);
        // SAFETY: a cancel request refers to no buffer or fd of ours.
        if unsafe { self.ring.submission().push(&entry) }.is_ok() {
            let _ = self.ring.submit();
        }
    }

    fn next_epoch(&mut self) -> u32 {
        self.epoch = self.epoch.wrapping_add(1).max(1);
        self.epoch
    }
}

impl Drop for UringBackend {
    fn drop(&mut self) {
        if self.in_flight > 0 {
            self.cancel_all();
            let deadline = std::time::Instant::now() + DROP_DRAIN;
            while self.in_flight > 0 && std::time::Instant::now() < deadline {
                if self.wait(Duration::from_millis(100)).is_err() {
                    break;
                }
            }
        }
        // SAFETY: each field is dropped exactly once, here, and never used
        // again; the ring goes first so the kernel stops using the buffers'
        // registration before they are freed.
        unsafe { ManuallyDrop::drop(&mut self.ring) };
        if self.in_flight == 0 {
            // SAFETY: as above; no request can reach the buffers any more.
            unsafe { ManuallyDrop::drop(&mut self.pool) };
        } else {
            tracing::error!(
                in_flight = self.in_flight,
                "discarding an io_uring ring with requests the kernel never completed; \
                 leaking its buffers so no late DMA can land in reused memory"
            );
        }
    }
}

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum BackendChoice {
    /// io_uring, falling back to pread/pwrite when the kernel refuses it.
    #[default]
    Auto,
    /// io_uring or fail.
    IoUring,
    /// pread/pwrite only.
    Sync,
}

/// Builds the backend; the second value is why io_uring was not used.
pub fn open_backend(
    choice: BackendChoice,
    pool: BufferPool,
) -> Result<(Box<dyn IoBackend>, Option<String>), IoError> {
    match choice {
        BackendChoice::Sync => Ok((
            Box::new(SyncBackend::new(pool)),
            Some("pread/pwrite requested".to_string()),
        )),
        BackendChoice::IoUring => Ok((
            Box::new(UringBackend::new(pool).map_err(IoError::Setup)?),
            None,
        )),
        BackendChoice::Auto => {
            // Probe with a small ring first: the pool is moved into the real one.
            match IoUring::new(2) {
                Ok(_) => Ok((
                    Box::new(UringBackend::new(pool).map_err(IoError::Setup)?),
                    None,
                )),
                Err(e) => Ok((
                    Box::new(SyncBackend::new(pool)),
                    Some(format!("io_uring unavailable ({e}); using pread/pwrite")),
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests;
