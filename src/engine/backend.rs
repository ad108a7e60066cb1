//! The two ways the engine moves bytes: an io_uring ring with registered
//! buffers and several requests in flight, or plain pread/pwrite (one at a
//! time) where io_uring is not allowed. Both own the buffer pool.

use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use io_uring::{opcode, types, IoUring};
use serde::Serialize;

use super::buffers::BufferPool;

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

/// A finished request: which buffer, what it did, bytes moved or the error.
#[derive(Debug)]
pub struct Completion {
    pub buf: usize,
    pub op: Op,
    pub result: io::Result<usize>,
}

/// Moves bytes between a file and the pool's buffers.
pub trait IoBackend: Send + std::fmt::Debug {
    fn kind(&self) -> BackendKind;
    fn pool(&self) -> &BufferPool;
    fn pool_mut(&mut self) -> &mut BufferPool;
    /// Starts `op` of `len` bytes at `offset` using buffer `buf`.
    fn submit(&mut self, fd: RawFd, buf: usize, op: Op, offset: u64, len: usize) -> io::Result<()>;
    /// Next completion, waiting at most `timeout`; `None` on timeout or when
    /// nothing is in flight.
    fn wait(&mut self, timeout: Duration) -> io::Result<Option<Completion>>;
    fn in_flight(&self) -> usize;
}

/// io_uring with registered buffers where the kernel allows it.
pub struct UringBackend {
    ring: IoUring,
    pool: BufferPool,
    fixed: bool,
    in_flight: usize,
}

impl std::fmt::Debug for UringBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringBackend")
            .field("fixed", &self.fixed)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl UringBackend {
    /// Sets up a ring for `pool.count()` requests in flight. Fails with the
    /// kernel's error (EPERM, ENOSYS) when io_uring is not available.
    pub fn new(pool: BufferPool) -> io::Result<UringBackend> {
        let entries = (pool.count() as u32).next_power_of_two().max(8);
        let ring = IoUring::builder().build(entries)?;
        // Registered buffers save a page pin per request; without them (a
        // low RLIMIT_MEMLOCK) plain reads and writes still work.
        let iovecs = pool.iovecs();
        // SAFETY: the iovecs describe the pool's allocation, which lives as
        // long as the ring (both are fields of self and dropped together;
        // the ring is declared first and so dropped first).
        let fixed = unsafe { ring.submitter().register_buffers(&iovecs) }.is_ok();
        if !fixed {
            tracing::debug!("io_uring buffer registration refused; using unregistered buffers");
        }
        Ok(UringBackend {
            ring,
            pool,
            fixed,
            in_flight: 0,
        })
    }
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

    fn submit(&mut self, fd: RawFd, buf: usize, op: Op, offset: u64, len: usize) -> io::Result<()> {
        assert!(len <= self.pool.buf_len(), "request larger than its buffer");
        let ptr = self.pool.ptr(buf);
        let len = u32_len(len)?;
        let idx = u16::try_from(buf).map_err(|_| io::Error::other("too many buffers"))?;
        let fd = types::Fd(fd);
        let entry = match (op, self.fixed) {
            (Op::Read, true) => opcode::ReadFixed::new(fd, ptr, len, idx)
                .offset(offset)
                .build(),
            (Op::Write, true) => opcode::WriteFixed::new(fd, ptr, len, idx)
                .offset(offset)
                .build(),
            (Op::Read, false) => opcode::Read::new(fd, ptr, len).offset(offset).build(),
            (Op::Write, false) => opcode::Write::new(fd, ptr, len).offset(offset).build(),
        };
        let tag = (buf as u64) << 1 | u64::from(op == Op::Write);
        // SAFETY: the buffer stays valid and untouched by us until its
        // completion is reaped (the executor owns the slot state machine);
        // the fd outlives every request because the executor drains all
        // requests before it returns.
        unsafe { self.ring.submission().push(&entry.user_data(tag)) }
            .map_err(|_| io::Error::other("submission queue full"))?;
        self.ring.submit()?;
        self.in_flight += 1;
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<Option<Completion>> {
        loop {
            if let Some(cqe) = self.ring.completion().next() {
                self.in_flight -= 1;
                let tag = cqe.user_data();
                let res = cqe.result();
                let result = if res < 0 {
                    Err(io::Error::from_raw_os_error(-res))
                } else {
                    Ok(res as usize)
                };
                let op = if tag & 1 == 1 { Op::Write } else { Op::Read };
                return Ok(Some(Completion {
                    buf: (tag >> 1) as usize,
                    op,
                    result,
                }));
            }
            if self.in_flight == 0 {
                return Ok(None);
            }
            let ts = types::Timespec::from(timeout);
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ETIME) => {
                    if self.ring.completion().is_empty() {
                        return Ok(None);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }
}

/// pread/pwrite, one request at a time: the fallback.
#[derive(Debug)]
pub struct SyncBackend {
    pool: BufferPool,
    done: VecDeque<Completion>,
}

impl SyncBackend {
    pub fn new(pool: BufferPool) -> SyncBackend {
        SyncBackend {
            pool,
            done: VecDeque::new(),
        }
    }
}

impl IoBackend for SyncBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Sync
    }

    fn pool(&self) -> &BufferPool {
        &self.pool
    }

    fn pool_mut(&mut self) -> &mut BufferPool {
        &mut self.pool
    }

    fn submit(&mut self, fd: RawFd, buf: usize, op: Op, offset: u64, len: usize) -> io::Result<()> {
        // SAFETY: the executor keeps the fd open while requests are pending.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let result = match op {
            Op::Read => {
                let b = &mut self.pool.get_mut(buf)[..len];
                rustix::io::pread(fd, b, offset).map_err(io::Error::from)
            }
            Op::Write => {
                let b = &self.pool.get(buf)[..len];
                rustix::io::pwrite(fd, b, offset).map_err(io::Error::from)
            }
        };
        self.done.push_back(Completion { buf, op, result });
        Ok(())
    }

    fn wait(&mut self, _timeout: Duration) -> io::Result<Option<Completion>> {
        Ok(self.done.pop_front())
    }

    fn in_flight(&self) -> usize {
        self.done.len()
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
) -> io::Result<(Box<dyn IoBackend>, Option<String>)> {
    match choice {
        BackendChoice::Sync => Ok((
            Box::new(SyncBackend::new(pool)),
            Some("pread/pwrite requested".to_string()),
        )),
        BackendChoice::IoUring => Ok((Box::new(UringBackend::new(pool)?), None)),
        BackendChoice::Auto => {
            // Probe with a small ring first: the pool is moved into the real one.
            match IoUring::new(2) {
                Ok(_) => Ok((Box::new(UringBackend::new(pool)?), None)),
                Err(e) => Ok((
                    Box::new(SyncBackend::new(pool)),
                    Some(format!("io_uring unavailable ({e}); using pread/pwrite")),
                )),
            }
        }
    }
}
