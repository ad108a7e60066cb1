//! The executor against the in-memory device: failing reads and writes,
//! completions out of order, lease breaks, verify mismatches, writes that
//! complete after the lease deadline.
#![allow(clippy::single_range_in_vec_init)] // lists of ranges that happen to hold one

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::*;
use crate::engine::safety::watch::NoWriteInFlight;
use crate::io::fileio::Ring;
use crate::io::testdev::{Disk, MemDevice, Order, WriteLog};

const FD: i32 = 3;

/// Stops after `after` polls; records when it first said stop.
struct TestWatch {
    after: Option<u64>,
    polls: u64,
    stopped_at: Option<u64>,
    seq: Arc<AtomicU64>,
    /// Lease deadline: set to the moment of the stop (the kernel revokes
    /// at once), when `revoke_at_stop`.
    revoke_at_stop: bool,
    deadline: Option<Instant>,
    /// Writes announced (`Watch::writing`: right after the lease was
    /// looked at, right before the submit).
    announced: u64,
    /// The device's writes held now, and at each look at the times
    /// (`Watch::quiescent`): each must be 0 (reads may be in flight).
    device_writes: Arc<AtomicUsize>,
    writes_at_looks: Vec<usize>,
}

impl Watch for TestWatch {
    fn should_stop(&mut self) -> Option<StopReason> {
        self.polls += 1;
        match self.after {
            Some(n) if self.polls > n => {
                self.stopped_at
                    .get_or_insert(self.seq.load(Ordering::SeqCst));
                if self.revoke_at_stop && self.deadline.is_none() {
                    self.deadline = Some(Instant::now());
                }
                Some(StopReason::LeaseBroken)
            }
            _ => None,
        }
    }
    fn space_for(&mut self, _len: u64) -> Result<(), StopReason> {
        Ok(())
    }
    fn writing(&mut self) {
        self.announced += 1;
    }
    fn quiescent(&mut self, _proof: NoWriteInFlight) {
        self.writes_at_looks
            .push(self.device_writes.load(Ordering::SeqCst));
    }
    fn lease_deadline(&self) -> Option<Instant> {
        if self.revoke_at_stop {
            Some(
                self.deadline
                    .unwrap_or(Instant::now() + Duration::from_secs(3600)),
            )
        } else {
            None
        }
    }
}

const ALIGN: u64 = 512;
const CHUNK: u64 = 4096;

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4096) as u8 ^ salt).collect()
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
        lease_break: None,
        unsafe_write_failed_reads: false,
        unsafe_unbounded_writes: false,
    }
}

/// A device holding one file `FD` with `data`.
fn device(data: &[u8]) -> (MemDevice, Disk) {
    let disk: Disk = Arc::default();
    disk.lock().expect("disk").insert(FD, data.to_vec());
    (MemDevice::new(disk.clone(), 8, CHUNK as usize), disk)
}

fn bytes_of(disk: &Disk, fd: i32) -> Vec<u8> {
    disk.lock().expect("disk")[&fd].clone()
}

/// Runs the executor on file `FD` of `ring`.
fn run_on(ring: &mut Ring, watch: &mut TestWatch, p: ExecParams, len: u64) -> ExecResult {
    run_throttled(ring, watch, p, len, Throttle::new(None, CHUNK))
}

/// [`run_on`] under `throttle`.
fn run_throttled(
    ring: &mut Ring,
    watch: &mut TestWatch,
    p: ExecParams,
    len: u64,
    throttle: Throttle,
) -> ExecResult {
    let ran = run_leaving(ring, watch, p, len, throttle);
    assert_eq!(
        ran.in_flight, 0,
        "the executor returns with nothing in flight"
    );
    ran.result
}

/// What a run left behind on its handle.
struct Ran {
    result: ExecResult,
    /// Writes still in flight (the ring could not reap them).
    in_flight: usize,
    /// Whether in place's last look after the run (inplace.rs) may look.
    last_look: bool,
}

/// [`run_throttled`], for runs that may leave a write in flight.
fn run_leaving(
    ring: &mut Ring,
    watch: &mut TestWatch,
    p: ExecParams,
    len: u64,
    mut throttle: Throttle,
) -> Ran {
    // SAFETY: a fake fd for the in-memory device; never passed to the kernel.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(FD) };
    let mut io = ring.file(fd).expect("handle");
    let mut bytes = 0;
    let result = run_direct(&mut io, &chunks(len), &mut throttle, watch, p, &mut |n| {
        bytes += n
    });
    assert_eq!(bytes, result.written, "progress reports every written byte");
    Ran {
        result,
        in_flight: io.in_flight(),
        last_look: io.no_write_in_flight().is_some(),
    }
}

fn watch(seq: &Arc<AtomicU64>, after: Option<u64>) -> TestWatch {
    TestWatch {
        after,
        polls: 0,
        stopped_at: None,
        seq: seq.clone(),
        revoke_at_stop: false,
        deadline: None,
        announced: 0,
        device_writes: Arc::default(),
        writes_at_looks: vec![],
    }
}

fn log_of(log: &WriteLog) -> Vec<(u64, i32, Range<u64>)> {
    log.lock().expect("log").clone()
}

#[test]
fn rewrites_every_chunk_with_the_same_bytes() {
    for order in [Order::Fifo, Order::Lifo, Order::Mixed(7)] {
        let data = pattern(64 * 1024, 0);
        let (mut dev, disk) = device(&data);
        dev.order = order;
        let (seq, log) = (dev.seq.clone(), dev.writes.clone());
        let mut ring = Ring::new(Box::new(dev), Default::default());
        let r = run_on(&mut ring, &mut watch(&seq, None), params(), 64 * 1024);
        assert!(r.error.is_none() && r.stop.is_none());
        assert_eq!(r.written, 64 * 1024);
        assert_eq!(bytes_of(&disk, FD), data);
        let mut w: Vec<_> = log_of(&log).into_iter().map(|(_, _, r)| r).collect();
        w.sort_by_key(|r| r.start);
        let want: Vec<_> = chunks(64 * 1024)
            .iter()
            .map(|c| c.offset..c.end())
            .collect();
        assert_eq!(w, want);
    }
}

#[test]
fn failed_reads_are_never_written_and_are_narrowed() {
    let data = pattern(64 * 1024, 0);
    let (mut dev, disk) = device(&data);
    let bad = vec![9000..9100, 40_000..41_000];
    dev.bad.insert(FD, bad.clone());
    let (seq, log) = (dev.seq.clone(), dev.writes.clone());
    let mut ring = Ring::new(Box::new(dev), Default::default());
    let r = run_on(&mut ring, &mut watch(&seq, None), params(), 64 * 1024);
    assert!(r.error.is_none());
    for (_, _, w) in log_of(&log) {
        for b in &bad {
            assert!(
                w.end <= b.start || w.start >= b.end,
                "write {w:?} touches unreadable {b:?}"
            );
        }
    }
    let got: Vec<_> = r.bad_ranges.iter().map(|(r, _, _)| r.clone()).collect();
    // Narrowed to the aligned cover of each bad range.
    assert_eq!(got, vec![8704..9216, 39_936..41_472]);
    assert!(r.bad_ranges.iter().all(|(_, _, e)| *e == Some(libc::EIO)));
    assert_eq!(r.written, 64 * 1024 - 512 - 1536);
    assert_eq!(bytes_of(&disk, FD), data);
}

#[test]
fn guard_off_writing_failed_reads_corrupts_data() {
    // The guard above, switched off: the buffer of a failed read (holding a
    // previous chunk's bytes) is written, and data is destroyed.
    let data = pattern(64 * 1024, 0);
    let (mut dev, disk) = device(&data);
    dev.bad.insert(FD, vec![40_000..41_000]);
    let seq = dev.seq.clone();
    let mut ring = Ring::new(Box::new(dev), Default::default());
    let mut p = params();
    p.unsafe_write_failed_reads = true;
    let _ = run_on(&mut ring, &mut watch(&seq, None), p, 64 * 1024);
    assert_ne!(
        bytes_of(&disk, FD),
        data,
        "writing unread buffers must corrupt the file"
    );
}

#[test]
fn a_write_error_fails_the_file_with_its_offset_and_writes_nothing_more() {
    let data = pattern(64 * 1024, 0);
    for order in [Order::Fifo, Order::Lifo] {
        let (mut dev, disk) = device(&data);
        dev.order = order;
        dev.bad_writes.insert(FD, vec![20_000..20_001]);
        let (seq, log) = (dev.seq.clone(), dev.writes.clone());
        let mut ring = Ring::new(Box::new(dev), Default::default());
        let mut w = watch(&seq, None);
        let r = run_on(&mut ring, &mut w, params(), 64 * 1024);
        let Some(ExecError::Write { offset, .. }) = r.error else {
            panic!("expected a write error, got {:?}", r.error);
        };
        assert_eq!(offset, 16_384, "the failing chunk's offset");
        assert_eq!(bytes_of(&disk, FD), data);
        // No write was submitted after the failing one completed: at most
        // the writes already in flight (depth 4) follow it in the log.
        let after = log_of(&log)
            .iter()
            .skip_while(|(_, _, r)| r.start != 16_384)
            .count();
        assert!(after <= 4, "{after} writes at or after the failed one");
    }
}

#[test]
fn a_short_write_fails_the_file_with_its_offset() {
    let data = pattern(64 * 1024, 0);
    let (mut dev, disk) = device(&data);
    dev.short_writes.insert(FD, vec![40_000..40_001]);
    let seq = dev.seq.clone();
    let mut ring = Ring::new(Box::new(dev), Default::default());
    let r = run_on(&mut ring, &mut watch(&seq, None), params(), 64 * 1024);
    match r.error {
        Some(ExecError::Write { offset, source, .. }) => {
            assert_eq!(offset, 36_864);
            assert!(
                source.to_string().contains("short write of 2048 bytes"),
                "{source}"
            );
        }
        other => panic!("expected a short write error, got {other:?}"),
    }
    assert!(r.written < 64 * 1024);
    assert_eq!(
        bytes_of(&disk, FD),
        data,
        "the same bytes, as far as written"
    );
}

#[test]
fn stop_means_no_new_writes_and_a_resume_offset() {
    for after in [0, 1, 3, 6, 10] {
        let data = pattern(128 * 1024, 0);
        let (dev, disk) = device(&data);
        let (seq, log) = (dev.seq.clone(), dev.writes.clone());
        let mut ring = Ring::new(Box::new(dev), Default::default());
        let mut w = watch(&seq, Some(after));
        let r = run_on(&mut ring, &mut w, params(), 128 * 1024);
        assert_eq!(r.stop, Some(StopReason::LeaseBroken));
        let stopped_at = w.stopped_at.expect("watch said stop");
        let writes = log_of(&log);
        assert!(
            writes.iter().all(|(s, _, _)| *s <= stopped_at),
            "a write was submitted after the stop"
        );
        let resume = r.resume_offset.expect("resume offset");
        // Everything below the resume offset was written.
        let mut covered: Vec<_> = writes.into_iter().map(|(_, _, r)| r).collect();
        covered.sort_by_key(|r| r.start);
        let mut pos = 0;
        for c in covered {
            if c.start == pos {
                pos = c.end;
            }
        }
        assert!(resume <= pos, "resume {resume} beyond written prefix {pos}");
        assert_eq!(bytes_of(&disk, FD), data);
    }
}

#[test]
fn writes_completing_after_the_lease_deadline_are_reported_exposed() {
    // The kernel revokes the lease the moment it breaks (deadline = the
    // break): every write still in flight then is exposed, and reported.
    let data = pattern(128 * 1024, 0);
    let (dev, _disk) = device(&data);
    let seq = dev.seq.clone();
    let mut ring = Ring::new(Box::new(dev), Default::default());
    let mut w = watch(&seq, Some(6));
    w.revoke_at_stop = true;
    let mut p = params();
    p.unsafe_unbounded_writes = true;
    let r = run_on(&mut ring, &mut w, p, 128 * 1024);
    assert_eq!(r.stop, Some(StopReason::LeaseBroken));
    assert!(!r.exposed.is_empty(), "writes in flight at the revocation");
    for e in &r.exposed {
        assert_eq!(e.start % CHUNK, 0);
    }
}

#[test]
fn under_a_lease_one_write_is_in_flight_until_the_device_is_measured() {
    let data = pattern(64 * 1024, 0);
    let (dev, disk) = device(&data);
    let seq = dev.seq.clone();
    let mut ring = Ring::new(Box::new(dev), Default::default());
    let mut p = params();
    p.lease_break = Some(Duration::ZERO);
    let r = run_on(&mut ring, &mut watch(&seq, None), p, 64 * 1024);
    assert!(r.error.is_none());
    assert_eq!(r.written, 64 * 1024);
    assert_eq!(bytes_of(&disk, FD), data);
}

/// While the drive is shared the pacer's depth counts our writes too: at
/// depth 1 the drive holds one request of ours at a time, a read or a
/// write. Switched off (writes beside reads, as when alone), a write and
/// the next read are at the drive together. (The in-memory device
/// completes a request at every wait, so a read is never still in flight
/// when a write's budget comes: `start_writes`' own look at the depth is
/// not reached here.)
#[test]
fn a_shared_drive_holds_one_request_of_ours_at_depth_one() {
    use crate::engine::pacing::pace::Allowance;
    for depth_bounds_writes in [true, false] {
        {
            let rate = None;
            let data = pattern(64 * 1024, 0);
            let (dev, disk) = device(&data);
            let (seq, peak) = (dev.seq.clone(), dev.peak.clone());
            let mut ring = Ring::new(Box::new(dev), Default::default());
            let shared = Allowance {
                rate,
                depth: 1,
                request: None,
                depth_bounds_writes,
            };
            let throttle = Throttle::new(rate, CHUNK).forcing(shared);
            let mut w = watch(&seq, None);
            let r = run_throttled(&mut ring, &mut w, params(), 64 * 1024, throttle);
            assert!(r.error.is_none(), "{:?}", r.error);
            assert_eq!(r.written, 64 * 1024);
            assert_eq!(bytes_of(&disk, FD), data);
            let most = peak.load(Ordering::SeqCst);
            if depth_bounds_writes {
                assert_eq!(most, 1, "one request of ours at a time (rate {rate:?})");
            } else {
                assert!(
                    most >= 2,
                    "switched off, a read beside a write: {most} (rate {rate:?})"
                );
            }
        }
    }
}

/// Every write passes the same gate (the write window, the budget, the
/// lease looked at right before): the rewrite after a verify mismatch
/// too. The device's log of writes against the watch's announcements.
#[test]
fn the_rewrite_after_a_verify_mismatch_is_announced_like_every_write() {
    let data = pattern(32 * 1024, 0);
    let mut p = params();
    p.verify = true;
    let (mut dev, disk) = device(&data);
    dev.corrupt_writes = 1;
    let (seq, log) = (dev.seq.clone(), dev.writes.clone());
    let mut ring = Ring::new(Box::new(dev), Default::default());
    let mut w = watch(&seq, None);
    let r = run_on(&mut ring, &mut w, p, 32 * 1024);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(bytes_of(&disk, FD), data);
    let writes = log_of(&log).len() as u64;
    assert_eq!(writes, 32 * 1024 / CHUNK + 1, "one chunk written twice");
    assert_eq!(w.announced, writes, "a write went out unannounced");
}

/// A stop at every point of a run whose first write the drive corrupts
/// (verify on): the drive's bytes are the file's, or the result names
/// the range that is not. A stop between the mismatch and its rewrite
/// drops the rewrite (the lease is no longer ours) and must say so.
#[test]
fn a_stop_before_the_rewrite_leaves_no_silent_mismatch() {
    let data = pattern(32 * 1024, 0);
    let mut p = params();
    p.verify = true;
    for after in 0..24 {
        let (mut dev, disk) = device(&data);
        dev.corrupt_writes = 1;
        let seq = dev.seq.clone();
        let mut ring = Ring::new(Box::new(dev), Default::default());
        let r = run_on(&mut ring, &mut watch(&seq, Some(after)), p, 32 * 1024);
        let now = bytes_of(&disk, FD);
        let differs: Vec<usize> = (0..data.len()).filter(|&i| now[i] != data[i]).collect();
        match (&r.error, differs.first()) {
            (_, None) => {}
            (Some(ExecError::Verify { offset, len }), Some(&i)) => {
                assert!(
                    (*offset..offset + len).contains(&(i as u64)),
                    "stop after {after} polls: byte {i} differs, the error names {offset}+{len}"
                );
            }
            (e, Some(i)) => panic!("stop after {after} polls: byte {i} differs, error {e:?}"),
        }
    }
}

#[test]
fn verify_rewrites_once_then_fails() {
    let data = pattern(32 * 1024, 0);
    let mut p = params();
    p.verify = true;
    let (mut dev, disk) = device(&data);
    dev.corrupt_writes = 1;
    let seq = dev.seq.clone();
    let mut ring = Ring::new(Box::new(dev), Default::default());
    let r = run_on(&mut ring, &mut watch(&seq, None), p, 32 * 1024);
    assert!(
        r.error.is_none(),
        "one bad write is repaired: {:?}",
        r.error
    );
    assert_eq!(bytes_of(&disk, FD), data);

    let (mut dev, _disk) = device(&data);
    dev.corrupt_writes = usize::MAX;
    let mut ring = Ring::new(Box::new(dev), Default::default());
    let r = run_on(&mut ring, &mut watch(&seq, None), p, 32 * 1024);
    assert!(matches!(r.error, Some(ExecError::Verify { .. })));
}

/// A narrowed range's write whose wait fails (once, or for good), with
/// the device holding the write: the file's times are looked at only once
/// it is reaped, never while a write is in flight (a look then may see
/// them half stored and call refreshd's own write another's). Guarded
/// since 38b78f4; switched off (a look after every narrowed write, as
/// before), the for-good case looks with the write held. Every byte of
/// the file is its own after. In every completion order.
#[test]
fn a_failed_wait_in_narrowing_reaps_the_write_before_the_times_are_looked_at() {
    let orders = [
        Order::Fifo,
        Order::Lifo,
        Order::WritesFirst,
        Order::Mixed(3),
    ];
    for (for_good, order) in [false, true]
        .into_iter()
        .flat_map(|g| orders.map(|o| (g, o)))
    {
        let data = pattern(64 * 1024, 0);
        let (mut dev, disk) = device(&data);
        dev.order = order;
        // The chunk 8192..12288 fails to read; its first readable piece,
        // 8192..8704, is the narrowing's first write.
        dev.bad.insert(FD, vec![9000..9100]);
        dev.fail_wait_at_write = Some((8192, for_good));
        let seq = dev.seq.clone();
        let mut w = watch(&seq, None);
        w.device_writes = dev.writes_pending.clone();
        let mut ring = Ring::new(Box::new(dev), Default::default());
        let throttle = Throttle::new(None, CHUNK);
        let ran = run_leaving(&mut ring, &mut w, params(), 64 * 1024, throttle);
        let (r, left, last_look) = (ran.result, ran.in_flight, ran.last_look);
        drop(ring); // a discarded device still finishes what it was given
        let case = format!("{} {order:?}", if for_good { "for good" } else { "once" });
        assert!(
            matches!(r.error, Some(ExecError::Write { offset: 8192, .. })),
            "{case}: the failed wait fails the file at its write: {:?}",
            r.error
        );
        assert!(
            !w.writes_at_looks.is_empty(),
            "{case}: the chunks before were looked at"
        );
        assert!(
            w.writes_at_looks.iter().all(|&n| n == 0),
            "{case}: a look at the times with a write in flight: {:?}",
            w.writes_at_looks
        );
        if for_good {
            assert_eq!(left, 1, "{case}: the write the ring could not reap");
            assert!(!last_look, "{case}: no last look while it is in flight");
            assert_eq!(
                r.exposed,
                vec![8192..8704],
                "{case}: an unreaped write is exposed"
            );
        } else {
            assert_eq!(left, 0, "{case}: reaped by narrowing");
            assert!(last_look, "{case}");
            assert!(r.exposed.is_empty(), "{case}: {:?}", r.exposed);
        }
        assert_eq!(bytes_of(&disk, FD), data, "{case}");
    }
}

/// Reads a handle drops in flight are drained, not reaped one by one:
/// they are no longer ours in flight after (the pacer tells the
/// application's reads on the drive from ours by this count; left
/// counted, a pause would miss the application's reads).
#[test]
fn reads_drained_with_a_handle_are_no_longer_counted_in_flight() {
    let data = pattern(64 * 1024, 0);
    let (dev, _disk) = device(&data);
    let own: Arc<crate::io::account::OwnIo> = Arc::default();
    let mut ring = Ring::new(Box::new(dev), own.clone());
    // SAFETY: a fake fd for the in-memory device; never passed to the kernel.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(FD) };
    let mut io = ring.file(fd).expect("handle");
    for buf in 0..3 {
        io.submit(buf, Op::Read, buf as u64 * CHUNK, CHUNK as usize)
            .expect("submit");
    }
    assert_eq!(own.reads_in_flight(), 3);
    drop(io);
    assert_eq!(own.reads_in_flight(), 0, "drained reads still counted");
}
