//! The io_uring backend: registered buffers, several requests in flight,
//! every completion tagged with its file handle's epoch.

use std::io;
use std::mem::ManuallyDrop;
use std::time::Duration;

use io_uring::{opcode, types, IoUring};

use super::types::{check_request, BackendKind, Completion, IoBackend, Op, Request};
use crate::io::buffers::BufferPool;

/// Packs epoch, buffer and op into io_uring's 64-bit user data.
pub(super) fn tag(epoch: u32, buf: usize, op: Op) -> u64 {
    (u64::from(epoch) << 32) | ((buf as u64) << 1) | u64::from(op == Op::Write)
}

pub(super) fn untag(t: u64) -> (u32, usize, Op) {
    let op = if t & 1 == 1 { Op::Write } else { Op::Read };
    ((t >> 32) as u32, ((t & 0xffff_ffff) >> 1) as usize, op)
}

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
pub(super) const CANCEL_TAG: u64 = u64::MAX;

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
