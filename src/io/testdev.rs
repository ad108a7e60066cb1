//! Test-only: an in-memory device behind the [`IoBackend`] trait, with
//! several files (keyed by fake fds), completions in any order, and faults
//! injected at the N-th submit or wait. Data moves when a request
//! completes (as DMA does), so a completion reaped late lands late.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::ops::Range;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::backend::{BackendKind, Completion, IoBackend, Op, Request};
use super::buffers::BufferPool;

/// The files' bytes, shared by every device built on them (a rebuilt ring
/// sees the same disk).
pub type Disk = Arc<Mutex<HashMap<RawFd, Vec<u8>>>>;
pub type WriteLog = Arc<Mutex<Vec<(u64, RawFd, Range<u64>)>>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Fifo,
    Lifo,
    /// Pseudo-random with this seed.
    Mixed(u64),
    /// Writes before reads (the device may service them first), else FIFO.
    WritesFirst,
}

#[derive(Debug)]
pub struct MemDevice {
    pool: BufferPool,
    pub disk: Disk,
    /// Unreadable ranges, per file.
    pub bad: HashMap<RawFd, Vec<Range<u64>>>,
    /// Ranges whose writes fail with EIO (nothing written), per file.
    pub bad_writes: HashMap<RawFd, Vec<Range<u64>>>,
    /// Ranges whose writes are short: only the first half is written.
    pub short_writes: HashMap<RawFd, Vec<Range<u64>>>,
    pending: VecDeque<Request>,
    /// Every write submitted: (sequence number, fd, range), shared so a
    /// test can read it while a ring owns the device.
    pub writes: WriteLog,
    pub seq: Arc<std::sync::atomic::AtomicU64>,
    /// The most requests it has held at once.
    pub peak: Arc<std::sync::atomic::AtomicUsize>,
    pub order: Order,
    /// Corrupt this many writes (a device that drops writes).
    pub corrupt_writes: usize,
    submits: u64,
    waits: u64,
    /// The N-th submit (1-based) fails without queueing.
    pub fail_submit: Option<u64>,
    /// The N-th wait fails; with `broken`, every wait from then on.
    pub fail_wait: Option<u64>,
    pub broken: bool,
    /// Waits fail while a write at this offset is pending: once, or (with
    /// `.1`) every wait from then on (`broken`). The write stays pending.
    pub fail_wait_at_write: Option<(u64, bool)>,
    /// Writes held now, shared so a test can read it while a ring owns
    /// the device.
    pub writes_pending: Arc<std::sync::atomic::AtomicUsize>,
    epoch: u32,
}

impl MemDevice {
    pub fn new(disk: Disk, buffers: usize, buf_len: usize) -> MemDevice {
        MemDevice {
            pool: BufferPool::new(buffers, buf_len),
            disk,
            bad: HashMap::new(),
            bad_writes: HashMap::new(),
            short_writes: HashMap::new(),
            pending: VecDeque::new(),
            writes: WriteLog::default(),
            seq: Arc::default(),
            peak: Arc::default(),
            order: Order::Fifo,
            corrupt_writes: 0,
            submits: 0,
            waits: 0,
            fail_submit: None,
            fail_wait: None,
            broken: false,
            fail_wait_at_write: None,
            writes_pending: Arc::default(),
            epoch: 0,
        }
    }

    fn pick(&mut self) -> Option<Request> {
        match self.order {
            Order::Fifo => self.pending.pop_front(),
            Order::Lifo => self.pending.pop_back(),
            Order::WritesFirst => match self.pending.iter().position(|r| r.op == Op::Write) {
                Some(i) => self.pending.remove(i),
                None => self.pending.pop_front(),
            },
            Order::Mixed(ref mut s) => {
                if self.pending.is_empty() {
                    return None;
                }
                *s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let i = (*s >> 33) as usize % self.pending.len();
                self.pending.remove(i)
            }
        }
    }

    /// Whether this wait fails by [`MemDevice::fail_wait_at_write`].
    fn fails_at_write(&mut self) -> bool {
        let Some((offset, for_good)) = self.fail_wait_at_write else {
            return false;
        };
        let pending = self
            .pending
            .iter()
            .any(|r| r.op == Op::Write && r.offset == offset);
        if pending {
            self.fail_wait_at_write = None;
            self.broken = for_good;
        }
        pending
    }

    fn count_pending_writes(&self) {
        let writes = self.pending.iter().filter(|r| r.op == Op::Write).count();
        self.writes_pending
            .store(writes, std::sync::atomic::Ordering::SeqCst);
    }

    fn complete(&mut self, r: Request) -> Completion {
        let range = r.offset..r.offset + r.len as u64;
        let mut disk = self.disk.lock().unwrap_or_else(|e| e.into_inner());
        let data = disk.entry(r.fd).or_default();
        let end = (range.end as usize).min(data.len());
        let start = (range.start as usize).min(end);
        let result = match r.op {
            Op::Read => {
                if overlaps(self.bad.get(&r.fd), &range) {
                    Err(io::Error::from_raw_os_error(libc::EIO))
                } else {
                    let n = end - start;
                    self.pool.get_mut(r.buf)[..n].copy_from_slice(&data[start..end]);
                    Ok(n)
                }
            }
            Op::Write if overlaps(self.bad_writes.get(&r.fd), &range) => {
                Err(io::Error::from_raw_os_error(libc::EIO))
            }
            Op::Write => {
                let mut n = end - start;
                if overlaps(self.short_writes.get(&r.fd), &range) {
                    n /= 2;
                }
                let end = start + n;
                data[start..end].copy_from_slice(&self.pool.get(r.buf)[..n]);
                if self.corrupt_writes > 0 && n > 0 {
                    self.corrupt_writes -= 1;
                    data[start] ^= 0xff;
                }
                Ok(n)
            }
        };
        Completion {
            epoch: r.epoch,
            buf: r.buf,
            op: r.op,
            result,
        }
    }
}

fn overlaps(bad: Option<&Vec<Range<u64>>>, r: &Range<u64>) -> bool {
    bad.is_some_and(|b| b.iter().any(|b| b.start < r.end && r.start < b.end))
}

impl IoBackend for MemDevice {
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
        self.submits += 1;
        if self.fail_submit == Some(self.submits) {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        let n = self.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if req.op == Op::Write {
            let r = req.offset..req.offset + req.len as u64;
            self.writes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((n, req.fd, r));
        }
        self.pending.push_back(req);
        self.count_pending_writes();
        self.peak
            .fetch_max(self.pending.len(), std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
    fn wait(&mut self, _timeout: Duration) -> io::Result<Option<Completion>> {
        self.waits += 1;
        if self.broken || self.fail_wait == Some(self.waits) || self.fails_at_write() {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        let done = self.pick().map(|r| self.complete(r));
        self.count_pending_writes();
        Ok(done)
    }
    fn in_flight(&self) -> usize {
        self.pending.len()
    }
    fn next_epoch(&mut self) -> u32 {
        self.epoch += 1;
        self.epoch
    }
}

impl Drop for MemDevice {
    /// A discarded ring: the kernel still finishes what it was given.
    fn drop(&mut self) {
        while let Some(r) = self.pending.pop_front() {
            self.complete(r);
        }
    }
}
