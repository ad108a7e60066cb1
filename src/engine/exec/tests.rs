//! The executor against an in-memory device: failing reads, completions out
//! of order, lease breaks, verify mismatches.
#![allow(clippy::single_range_in_vec_init)] // lists of ranges that happen to hold one

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::*;
use crate::engine::backend::{BackendKind, Completion};
use crate::engine::buffers::BufferPool;
use crate::engine::plan::Chunk;

#[derive(Debug)]
struct MemDevice {
    pool: BufferPool,
    data: Vec<u8>,
    bad: Vec<Range<u64>>,
    pending: VecDeque<(usize, Op, u64, usize)>,
    /// Every write as (sequence number, range).
    writes: Vec<(u64, Range<u64>)>,
    seq: Arc<AtomicU64>,
    /// Complete newest first, to mix up completion order.
    lifo: bool,
    /// Corrupt this many writes (simulates a device that drops writes).
    corrupt_writes: usize,
}

impl MemDevice {
    fn new(data: Vec<u8>, depth: usize, buf: usize, seq: Arc<AtomicU64>) -> MemDevice {
        MemDevice {
            pool: BufferPool::new(depth * 2, buf),
            data,
            bad: vec![],
            pending: VecDeque::new(),
            writes: vec![],
            seq,
            lifo: false,
            corrupt_writes: 0,
        }
    }
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
    fn submit(
        &mut self,
        _fd: RawFd,
        buf: usize,
        op: Op,
        offset: u64,
        len: usize,
    ) -> io::Result<()> {
        let n = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        if op == Op::Write {
            self.writes.push((n, offset..offset + len as u64));
        }
        self.pending.push_back((buf, op, offset, len));
        Ok(())
    }
    fn wait(&mut self, _timeout: Duration) -> io::Result<Option<Completion>> {
        let next = if self.lifo {
            self.pending.pop_back()
        } else {
            self.pending.pop_front()
        };
        let Some((buf, op, offset, len)) = next else {
            return Ok(None);
        };
        let r = offset..offset + len as u64;
        let result = match op {
            Op::Read => {
                if self.bad.iter().any(|b| b.start < r.end && r.start < b.end) {
                    Err(io::Error::from_raw_os_error(libc::EIO))
                } else {
                    let src = &self.data[offset as usize..offset as usize + len];
                    self.pool.get_mut(buf)[..len].copy_from_slice(src);
                    Ok(len)
                }
            }
            Op::Write => {
                let src = self.pool.get(buf)[..len].to_vec();
                self.data[offset as usize..offset as usize + len].copy_from_slice(&src);
                if self.corrupt_writes > 0 {
                    self.corrupt_writes -= 1;
                    self.data[offset as usize] ^= 0xff;
                }
                Ok(len)
            }
        };
        Ok(Some(Completion { buf, op, result }))
    }
    fn in_flight(&self) -> usize {
        self.pending.len()
    }
}

/// Stops after `after` polls; records when it first said stop.
struct TestWatch {
    after: Option<u64>,
    polls: u64,
    stopped_at: Option<u64>,
    seq: Arc<AtomicU64>,
}

impl Watch for TestWatch {
    fn should_stop(&mut self) -> Option<StopReason> {
        self.polls += 1;
        match self.after {
            Some(n) if self.polls > n => {
                self.stopped_at
                    .get_or_insert(self.seq.load(Ordering::SeqCst));
                Some(StopReason::LeaseBroken)
            }
            _ => None,
        }
    }
    fn space_for(&mut self, _len: u64) -> Result<(), StopReason> {
        Ok(())
    }
}

const ALIGN: u64 = 512;
const CHUNK: u64 = 4096;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4096) as u8).collect()
}

fn chunks(len: u64) -> Vec<Chunk> {
    (0..len / CHUNK)
        .map(|i| Chunk {
            offset: i * CHUNK,
            len: CHUNK,
            direct: true,
        })
        .collect()
}

fn params() -> ExecParams {
    ExecParams {
        depth: 4,
        align: ALIGN,
        verify: false,
        unsafe_write_failed_reads: false,
    }
}

fn run(dev: &mut MemDevice, watch: &mut TestWatch, p: ExecParams, len: u64) -> ExecResult {
    let mut throttle = Throttle::new(None, CHUNK);
    let mut bytes = 0;
    let r = run_direct(dev, -1, &chunks(len), &mut throttle, watch, p, &mut |n| {
        bytes += n
    });
    assert_eq!(bytes, r.written, "progress reports every written byte");
    r
}

fn watch(seq: &Arc<AtomicU64>, after: Option<u64>) -> TestWatch {
    TestWatch {
        after,
        polls: 0,
        stopped_at: None,
        seq: seq.clone(),
    }
}

#[test]
fn rewrites_every_chunk_with_the_same_bytes() {
    for lifo in [false, true] {
        let seq = Arc::new(AtomicU64::new(0));
        let data = pattern(64 * 1024);
        let mut dev = MemDevice::new(data.clone(), 4, CHUNK as usize, seq.clone());
        dev.lifo = lifo;
        let r = run(&mut dev, &mut watch(&seq, None), params(), 64 * 1024);
        assert!(r.error.is_none() && r.stop.is_none());
        assert_eq!(r.written, 64 * 1024);
        assert_eq!(dev.data, data);
        let mut w: Vec<_> = dev.writes.iter().map(|(_, r)| r.clone()).collect();
        w.sort_by_key(|r| r.start);
        assert_eq!(
            w,
            chunks(64 * 1024)
                .iter()
                .map(|c| c.offset..c.end())
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn failed_reads_are_never_written_and_are_narrowed() {
    let seq = Arc::new(AtomicU64::new(0));
    let data = pattern(64 * 1024);
    let mut dev = MemDevice::new(data.clone(), 4, CHUNK as usize, seq.clone());
    dev.bad = vec![9000..9100, 40_000..41_000];
    let r = run(&mut dev, &mut watch(&seq, None), params(), 64 * 1024);
    assert!(r.error.is_none());
    for (_, w) in &dev.writes {
        for b in &dev.bad {
            assert!(
                w.end <= b.start || w.start >= b.end,
                "write {w:?} touches unreadable {b:?}"
            );
        }
    }
    let bad: Vec<_> = r.bad_ranges.iter().map(|(r, _, _)| r.clone()).collect();
    // Narrowed to the aligned cover of each bad range.
    assert_eq!(bad, vec![8704..9216, 39_936..41_472]);
    assert!(r.bad_ranges.iter().all(|(_, _, e)| *e == Some(libc::EIO)));
    assert_eq!(r.written, 64 * 1024 - 512 - 1536);
    assert_eq!(dev.data, data);
}

#[test]
fn guard_off_writing_failed_reads_corrupts_data() {
    // The guard above, switched off: the buffer of a failed read (holding a
    // previous chunk's bytes) is written, and data is destroyed.
    let seq = Arc::new(AtomicU64::new(0));
    let data = pattern(64 * 1024);
    let mut dev = MemDevice::new(data.clone(), 4, CHUNK as usize, seq.clone());
    dev.bad = vec![40_000..41_000];
    let mut p = params();
    p.unsafe_write_failed_reads = true;
    let _ = run(&mut dev, &mut watch(&seq, None), p, 64 * 1024);
    assert_ne!(
        dev.data, data,
        "writing unread buffers must corrupt the file"
    );
}

#[test]
fn stop_means_no_new_writes_and_a_resume_offset() {
    for after in [0, 1, 3, 6, 10] {
        let seq = Arc::new(AtomicU64::new(0));
        let data = pattern(128 * 1024);
        let mut dev = MemDevice::new(data.clone(), 4, CHUNK as usize, seq.clone());
        let mut w = watch(&seq, Some(after));
        let r = run(&mut dev, &mut w, params(), 128 * 1024);
        assert_eq!(r.stop, Some(StopReason::LeaseBroken));
        let stopped_at = w.stopped_at.expect("watch said stop");
        assert!(
            dev.writes.iter().all(|(s, _)| *s <= stopped_at),
            "a write was submitted after the stop"
        );
        let resume = r.resume_offset.expect("resume offset");
        // Everything below the resume offset was written.
        let mut covered: Vec<_> = dev.writes.iter().map(|(_, r)| r.clone()).collect();
        covered.sort_by_key(|r| r.start);
        let mut pos = 0;
        for c in covered {
            if c.start == pos {
                pos = c.end;
            }
        }
        assert!(resume <= pos, "resume {resume} beyond written prefix {pos}");
        assert_eq!(dev.data, data);
    }
}

#[test]
fn verify_rewrites_once_then_fails() {
    let seq = Arc::new(AtomicU64::new(0));
    let data = pattern(32 * 1024);
    let mut p = params();
    p.verify = true;
    let mut dev = MemDevice::new(data.clone(), 4, CHUNK as usize, seq.clone());
    dev.corrupt_writes = 1;
    let r = run(&mut dev, &mut watch(&seq, None), p, 32 * 1024);
    assert!(
        r.error.is_none(),
        "one bad write is repaired: {:?}",
        r.error
    );
    assert_eq!(dev.data, data);

    let mut dev = MemDevice::new(data.clone(), 4, CHUNK as usize, seq.clone());
    dev.corrupt_writes = usize::MAX;
    let r = run(&mut dev, &mut watch(&seq, None), p, 32 * 1024);
    assert!(matches!(r.error, Some(ExecError::Verify { .. })));
}
