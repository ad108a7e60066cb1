//! The disk's state: the flash (a memfd), each block's age, the model's
//! service times on the channels, faults, fade and counters.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use fuser::{Errno, INodeNo};

use super::channels::Channels;
use super::stats::{Counters, Stats};
use crate::model::Model;

pub const BLOCK: u64 = 4096;
pub const IMAGE_NAME: &str = "disk.img";
pub(super) const IMAGE_INO: INodeNo = INodeNo(2);
const NEVER: u32 = u32::MAX;

/// The disk's state, shared by the FUSE threads and the control socket.
#[derive(Debug)]
pub struct DiskState {
    pub model: Model,
    pub channels: u32,
    pub size: u64,
    backing: File,
    /// Per block: virtual write time in months (f32 bits), NEVER if unwritten.
    stamps: Vec<AtomicU32>,
    /// Virtual clock offset in months (f64 bits).
    offset: AtomicU64,
    start: Instant,
    month_seconds: Option<f64>,
    chans: Channels,
    faults: RwLock<Vec<Range<u64>>>,
    write_faults: RwLock<Vec<Range<u64>>>,
    faulty_writes: Mutex<Vec<(u64, u64)>>,
    pub(super) counters: Counters,
    /// The link's capacity, bytes/s (0: no cap), like a port negotiated
    /// down: every transfer also passes through it, one after another.
    link_cap: AtomicU64,
    link_free_at: Mutex<Option<Instant>>,
    /// Write-path fade ("SSD fade"): after `fade_after` bytes written
    /// since the last discard, every request is `fade_factor` times slower
    /// (garbage collection behind), until a discard (TRIM). 0: off.
    fade_after: AtomicU64,
    fade_factor: AtomicU64,
    written_since_discard: AtomicU64,
}

impl DiskState {
    fn new(
        backing: File,
        size: u64,
        model: Model,
        channels: u32,
        month_seconds: Option<f64>,
    ) -> DiskState {
        let blocks = size.div_ceil(BLOCK) as usize;
        DiskState {
            model,
            channels: channels.max(1),
            size,
            backing,
            stamps: (0..blocks).map(|_| AtomicU32::new(NEVER)).collect(),
            offset: AtomicU64::new(0f64.to_bits()),
            start: Instant::now(),
            month_seconds,
            chans: Channels {
                free: Mutex::new(channels.max(1)),
                cv: Condvar::new(),
            },
            faults: RwLock::new(vec![]),
            write_faults: RwLock::new(vec![]),
            faulty_writes: Mutex::new(vec![]),
            counters: Counters::default(),
            link_cap: AtomicU64::new(0),
            link_free_at: Mutex::new(None),
            fade_after: AtomicU64::new(0),
            fade_factor: AtomicU64::new(1),
            written_since_discard: AtomicU64::new(0),
        }
    }

    /// A disk whose flash is a sparse memfd of `size` bytes: in memory,
    /// never on the host's disk. A file there made the emulator as slow as
    /// the host whenever the host's page cache let go of it (this VM pages
    /// out memory untouched for a minute), and then a request's real I/O
    /// took longer than the model's service time: reads of data written a
    /// minute earlier ran at a fraction of the model's speed.
    pub fn in_memory(
        size: u64,
        model: Model,
        channels: u32,
        month_seconds: Option<f64>,
    ) -> std::io::Result<DiskState> {
        let fd = rustix::fs::memfd_create("agingssd-flash", rustix::fs::MemfdFlags::CLOEXEC)?;
        let flash = File::from(fd);
        flash.set_len(size)?;
        Ok(DiskState::new(flash, size, model, channels, month_seconds))
    }

    /// Bytes of memory the flash holds now (written and not discarded).
    pub fn flash_bytes(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        self.backing.metadata().map_or(0, |m| m.blocks() * 512)
    }

    /// The virtual time, in months.
    pub fn now_months(&self) -> f64 {
        let base = f64::from_bits(self.offset.load(Ordering::SeqCst));
        match self.month_seconds {
            Some(s) if s > 0.0 => base + self.start.elapsed().as_secs_f64() / s,
            _ => base,
        }
    }

    /// Time travel: everything written so far becomes `months` older.
    pub fn age(&self, months: f64) {
        let _ = self
            .offset
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| {
                Some((f64::from_bits(b) + months).to_bits())
            });
    }

    pub fn add_fault(&self, offset: u64, len: u64) {
        self.faults
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(offset..offset.saturating_add(len));
    }

    /// Writes touching `[offset, offset+len)` fail with EIO and change
    /// nothing (a drive that cannot program those pages).
    pub fn add_write_fault(&self, offset: u64, len: u64) {
        self.write_faults
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(offset..offset.saturating_add(len));
    }

    fn touches_write_fault(&self, r: &Range<u64>) -> bool {
        self.write_faults
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|f| f.start < r.end && r.start < f.end)
    }

    fn touches_fault(&self, r: &Range<u64>) -> bool {
        self.faults
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|f| f.start < r.end && r.start < f.end)
    }

    fn block_range(r: &Range<u64>) -> Range<usize> {
        (r.start / BLOCK) as usize..r.end.div_ceil(BLOCK) as usize
    }

    /// Age of block `i` in months, None if never written.
    pub fn block_age(&self, i: usize) -> Option<f64> {
        let bits = self.stamps.get(i)?.load(Ordering::Relaxed);
        (bits != NEVER).then(|| (self.now_months() - f64::from(f32::from_bits(bits))).max(0.0))
    }

    fn stamp(&self, r: &Range<u64>, value: u32) {
        let blocks = Self::block_range(r);
        for s in
            &self.stamps[blocks.start.min(self.stamps.len())..blocks.end.min(self.stamps.len())]
        {
            s.store(value, Ordering::Relaxed);
        }
    }

    /// Serves a read: data, or EIO, after the model's delay.
    pub fn read(&self, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        let end = offset.saturating_add(u64::from(size)).min(self.size);
        if offset >= end {
            return Ok(vec![]);
        }
        let r = offset..end;
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        if self.touches_fault(&r) {
            self.counters.read_errors.fetch_add(1, Ordering::Relaxed);
            return Err(Errno::EIO);
        }
        let ages = Self::block_range(&r).map(|i| self.block_age(i));
        let service = self.model.read_time(end - offset, ages, self.channels);
        let mut buf = vec![0u8; (end - offset) as usize];
        self.serve(service, end - offset, || {
            self.backing
                .read_exact_at(&mut buf, offset)
                .map_err(|_| Errno::EIO)
        })?;
        self.counters
            .read_bytes
            .fetch_add(end - offset, Ordering::Relaxed);
        Ok(buf)
    }

    /// Serves a write at fresh speed; the blocks become fresh.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        let end = offset.saturating_add(data.len() as u64);
        if end > self.size {
            return Err(Errno::ENOSPC);
        }
        let r = offset..end;
        if self.touches_write_fault(&r) {
            self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
            return Err(Errno::EIO);
        }
        if self.touches_fault(&r) {
            self.faulty_writes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((offset, data.len() as u64));
        }
        let service = self.model.write_time(data.len() as u64, self.channels);
        self.serve(service, data.len() as u64, || {
            self.backing
                .write_all_at(data, offset)
                .map_err(|_| Errno::EIO)
        })?;
        self.stamp(&r, (self.now_months() as f32).to_bits());
        self.written_since_discard
            .fetch_add(data.len() as u64, Ordering::SeqCst);
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.counters
            .write_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        u32::try_from(data.len()).map_err(|_| Errno::EINVAL)
    }

    /// Discard (TRIM): the blocks read as zeros and count as fresh.
    pub fn discard(&self, offset: u64, len: u64) -> Result<(), Errno> {
        let end = offset.saturating_add(len).min(self.size);
        rustix::fs::fallocate(
            &self.backing,
            rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
            offset,
            end.saturating_sub(offset),
        )
        .map_err(|_| Errno::EIO)?;
        // Whole blocks only: a partly discarded block keeps its age.
        let whole = offset.div_ceil(BLOCK) * BLOCK..end / BLOCK * BLOCK;
        if whole.start < whole.end {
            self.stamp(&whole, NEVER);
        }
        self.counters.discards.fetch_add(1, Ordering::Relaxed);
        // TRIM lets garbage collection catch up: the fade is gone.
        self.written_since_discard.store(0, Ordering::SeqCst);
        Ok(())
    }

    pub fn sync(&self) -> Result<(), Errno> {
        self.backing.sync_data().map_err(|_| Errno::EIO)
    }

    /// Holds one channel for `service`: waits for a free channel, does the
    /// real I/O, then sleeps for the rest of the modelled time.
    /// Caps the link at `bytes_per_sec` (0 removes the cap).
    pub fn set_link_cap(&self, bytes_per_sec: u64) {
        self.link_cap.store(bytes_per_sec, Ordering::SeqCst);
    }

    /// Turns write-path fade on (`after_bytes` > 0) or off (0).
    pub fn set_fade(&self, after_bytes: u64, factor: u64) {
        self.fade_after.store(after_bytes, Ordering::SeqCst);
        self.fade_factor.store(factor.max(1), Ordering::SeqCst);
    }

    /// The service time with fade applied, if the drive has faded.
    fn faded(&self, service: Duration) -> Duration {
        let after = self.fade_after.load(Ordering::SeqCst);
        if after > 0 && self.written_since_discard.load(Ordering::SeqCst) >= after {
            let f = self.fade_factor.load(Ordering::SeqCst);
            service.saturating_mul(u32::try_from(f).unwrap_or(u32::MAX))
        } else {
            service
        }
    }

    /// When a transfer of `len` bytes is through the link, if capped.
    fn link_slot(&self, len: u64) -> Option<Instant> {
        let cap = self.link_cap.load(Ordering::SeqCst);
        if cap == 0 {
            return None;
        }
        let mut free = self.link_free_at.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let start = free.filter(|t| *t > now).unwrap_or(now);
        let done = start + Duration::from_secs_f64(len as f64 / cap as f64);
        *free = Some(done);
        Some(done)
    }

    fn serve<T>(
        &self,
        service: Duration,
        len: u64,
        io: impl FnOnce() -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let service = self.faded(service);
        self.chans.acquire();
        let t0 = Instant::now();
        let link_done = self.link_slot(len);
        let result = io();
        let spent = t0.elapsed();
        self.counters.io_took(spent, service);
        if service > spent {
            std::thread::sleep(service - spent);
        }
        if let Some(done) = link_done {
            let now = Instant::now();
            if done > now {
                std::thread::sleep(done - now);
            }
        }
        self.chans.release();
        result
    }

    pub fn stats(&self) -> Stats {
        let mut hist: std::collections::BTreeMap<u32, u64> = Default::default();
        for i in 0..self.stamps.len() {
            if let Some(age) = self.block_age(i) {
                *hist.entry(age.floor() as u32).or_default() += 1;
            }
        }
        let c = &self.counters;
        Stats {
            model: self.model.name.to_string(),
            channels: self.channels,
            size: self.size,
            now_months: self.now_months(),
            reads: c.reads.load(Ordering::Relaxed),
            read_bytes: c.read_bytes.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            write_bytes: c.write_bytes.load(Ordering::Relaxed),
            read_errors: c.read_errors.load(Ordering::Relaxed),
            write_errors: c.write_errors.load(Ordering::Relaxed),
            write_faults: self
                .write_faults
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|r| (r.start, r.end - r.start))
                .collect(),
            discards: c.discards.load(Ordering::Relaxed),
            overruns: c.overruns.load(Ordering::Relaxed),
            overrun_us: c.overrun_us.load(Ordering::Relaxed),
            slowest_io_us: c.slowest_io_us.load(Ordering::Relaxed),
            age_histogram: hist.into_iter().collect(),
            faults: self
                .faults
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|r| (r.start, r.end - r.start))
                .collect(),
            faulty_writes: self
                .faulty_writes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }
}
