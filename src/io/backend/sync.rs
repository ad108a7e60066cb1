//! The fallback backend: pread/pwrite, one request at a time, where
//! io_uring is not allowed (a seccomp filter, `kernel.io_uring_disabled`).

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use super::types::{check_request, BackendKind, Completion, IoBackend, Op, Request};
use crate::io::buffers::BufferPool;

/// pread/pwrite, one request at a time: the fallback.
#[derive(Debug)]
pub struct SyncBackend {
    pool: BufferPool,
    done: VecDeque<Completion>,
    epoch: u32,
}

impl SyncBackend {
    pub fn new(pool: BufferPool) -> SyncBackend {
        SyncBackend {
            pool,
            done: VecDeque::new(),
            epoch: 0,
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

    unsafe fn submit(&mut self, req: Request) -> io::Result<()> {
        check_request(&self.pool, &req)?;
        // SAFETY: the caller keeps the fd open until the completion is
        // reaped (this fn's contract); here it is used right away.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(req.fd) };
        let (off, len) = (req.offset, req.len);
        let result = match req.op {
            Op::Read => rustix::io::pread(fd, &mut self.pool.get_mut(req.buf)[..len], off),
            Op::Write => rustix::io::pwrite(fd, &self.pool.get(req.buf)[..len], off),
        };
        self.done.push_back(Completion {
            epoch: req.epoch,
            buf: req.buf,
            op: req.op,
            result: result.map_err(io::Error::from),
        });
        Ok(())
    }

    fn wait(&mut self, _timeout: Duration) -> io::Result<Option<Completion>> {
        Ok(self.done.pop_front())
    }

    fn in_flight(&self) -> usize {
        self.done.len()
    }

    fn next_epoch(&mut self) -> u32 {
        self.epoch = self.epoch.wrapping_add(1).max(1);
        self.epoch
    }
}
