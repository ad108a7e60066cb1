//! Errors stay local (safety contract 7): faults injected at every step of
//! a run over several files sharing one ring — the N-th submit, the N-th
//! wait (once, or for good), the temp copy's N-th write (ENOSPC) — in any
//! completion order. Afterwards every file holds exactly its own bytes,
//! the temp copy holds only the relocated file's bytes, nothing panicked.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use crate::engine::exec::{run_direct, ExecParams};
use crate::engine::pacing::throttle::Throttle;
use crate::engine::safety::plan::Chunk;
use crate::engine::safety::watch::{StopReason, Watch};
use crate::engine::strategy::relocate::read_pieces;
use crate::io::account::OwnIo;
use crate::io::backend::Op;
use crate::io::fileio::{test_switch, Ring};
use crate::io::testdev::{Disk, MemDevice, Order};

const LEN: u64 = 64 * 1024;
const BUF: usize = 4096;
const FILES: [i32; 3] = [10, 11, 12];

struct Never;

impl Watch for Never {
    fn should_stop(&mut self) -> Option<StopReason> {
        None
    }
    fn space_for(&mut self, _len: u64) -> Result<(), StopReason> {
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    Submit(u64),
    WaitOnce(u64),
    WaitForGood(u64),
    /// The temp copy's N-th write fails with ENOSPC.
    TempWrite(u64),
}

fn content(fd: i32) -> Vec<u8> {
    (0..LEN as usize)
        .map(|i| (i as u8).wrapping_mul(31) ^ (fd as u8).wrapping_mul(97) ^ (i >> 12) as u8)
        .collect()
}

fn disk() -> Disk {
    let d: Disk = Arc::default();
    for fd in FILES {
        d.lock().expect("disk").insert(fd, content(fd));
    }
    d
}

fn device(disk: &Disk, order: Order, fault: Option<Fault>) -> MemDevice {
    let mut dev = MemDevice::new(disk.clone(), 8, BUF);
    dev.order = order;
    match fault {
        Some(Fault::Submit(n)) => dev.fail_submit = Some(n),
        Some(Fault::WaitOnce(n)) => dev.fail_wait = Some(n),
        Some(Fault::WaitForGood(n)) => {
            dev.fail_wait = Some(n);
            dev.broken = false;
        }
        _ => {}
    }
    dev
}

fn fd(raw: i32) -> BorrowedFd<'static> {
    // SAFETY: fake fds for the in-memory device; never passed to the kernel.
    unsafe { BorrowedFd::borrow_raw(raw) }
}

fn whole() -> Chunk {
    Chunk {
        offset: 0,
        len: LEN,
        direct: true,
    }
}

/// The relocation read of `file` into a temp copy whose `fail_at`-th write
/// fails; returns the copy (what the sink was given).
fn relocation_read(ring: &mut Ring, file: i32, fail_at: Option<u64>) -> Vec<u8> {
    let mut temp = vec![0u8; LEN as usize];
    let Ok(mut io) = ring.file(fd(file)) else {
        return temp;
    };
    let mut calls = 0;
    let mut sink = |off: u64, bytes: &[u8]| {
        calls += 1;
        if fail_at == Some(calls) {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        temp[off as usize..off as usize + bytes.len()].copy_from_slice(bytes);
        Ok(())
    };
    let _ = read_pieces(&mut io, whole(), &mut sink);
    temp
}

fn in_place(ring: &mut Ring, file: i32) {
    let Ok(mut io) = ring.file(fd(file)) else {
        return;
    };
    let chunks: Vec<Chunk> = (0..LEN / BUF as u64)
        .map(|i| Chunk {
            offset: i * BUF as u64,
            len: BUF as u64,
            direct: true,
        })
        .collect();
    let params = ExecParams {
        depth: 8,
        align: 512,
        verify: false,
        lease_break: None,
        unsafe_write_failed_reads: false,
        unsafe_unbounded_writes: false,
    };
    let mut throttle = Throttle::new(None, BUF as u64);
    let _ = run_direct(
        &mut io,
        &chunks,
        &mut throttle,
        &mut Never,
        params,
        &mut |_| {},
    );
}

/// What the engine does between files: a poisoned ring is replaced (the
/// pacer's count of our requests carries over, as the engine's does).
fn next_file(ring: &mut Ring, disk: &Disk, order: Order, own: &Arc<OwnIo>) {
    if ring.poisoned() {
        *ring = Ring::new(Box::new(device(disk, order, None)), own.clone());
    }
}

/// What a run left: the disk, the temp copy, and our requests the
/// pacer still counts in flight (none: those a discarded ring held went
/// with it, or learning would wait on them for good).
struct Run {
    disk: Disk,
    temp: Vec<u8>,
    in_flight: usize,
}

/// Relocation read of file 0, then in place 1, 2 and 0 again.
fn run_files(order: Order, fault: Fault) -> Run {
    let disk = disk();
    let mut dev = device(&disk, order, Some(fault));
    if let Fault::WaitForGood(_) = fault {
        // From the N-th wait on, every wait fails (see `device`).
        dev.fail_wait = None;
        dev.broken = false;
    }
    let own = Arc::new(OwnIo::default());
    let mut ring = Ring::new(Box::new(BreaksAt::new(dev, fault)), own.clone());
    let fail_temp = match fault {
        Fault::TempWrite(n) => Some(n),
        _ => None,
    };
    let temp = relocation_read(&mut ring, FILES[0], fail_temp);
    for f in [FILES[1], FILES[2], FILES[0]] {
        next_file(&mut ring, &disk, order, &own);
        in_place(&mut ring, f);
    }
    drop(ring);
    let in_flight = own.requests_in_flight();
    Run {
        disk,
        temp,
        in_flight,
    }
}

fn check(run: &Run) -> Result<(), TestCaseError> {
    let (disk, temp) = (&run.disk, &run.temp);
    prop_assert_eq!(run.in_flight, 0, "requests still counted in flight");
    let d = disk.lock().expect("disk");
    for f in FILES {
        prop_assert!(d[&f] == content(f), "file {} holds other bytes", f);
    }
    let want = content(FILES[0]);
    for (i, piece) in temp.chunks(BUF).enumerate() {
        let same = piece == &want[i * BUF..(i + 1) * BUF];
        prop_assert!(
            same || piece.iter().all(|&b| b == 0),
            "temp copy piece {} holds another file's bytes",
            i
        );
    }
    Ok(())
}

fn order() -> impl Strategy<Value = Order> {
    prop_oneof![
        Just(Order::Fifo),
        Just(Order::Lifo),
        Just(Order::WritesFirst),
        any::<u64>().prop_map(Order::Mixed)
    ]
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        (1u64..120).prop_map(Fault::Submit),
        (1u64..120).prop_map(Fault::WaitOnce),
        (1u64..120).prop_map(Fault::WaitForGood),
        (1u64..17).prop_map(Fault::TempWrite),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn any_fault_at_any_step_leaves_every_file_as_it_was(order in order(), fault in fault()) {
        check(&run_files(order, fault))?;
    }
}

#[test]
fn every_fault_position_over_four_files() {
    for order in [
        Order::Fifo,
        Order::Lifo,
        Order::WritesFirst,
        Order::Mixed(1),
    ] {
        for n in 1..120 {
            for fault in [Fault::Submit(n), Fault::WaitOnce(n), Fault::WaitForGood(n)] {
                check(&run_files(order, fault))
                    .unwrap_or_else(|e| panic!("{fault:?} {order:?}: {e}"));
            }
        }
        for n in 1..17 {
            check(&run_files(order, Fault::TempWrite(n)))
                .unwrap_or_else(|e| panic!("temp write {n} {order:?}: {e}"));
        }
    }
}

/// A strategy that returns early with reads in flight (the ENOSPC bug of
/// the old relocation read): the handle's drop reaps them, so the next
/// file sees none of them.
fn leave_reads_in_flight(ring: &mut Ring, file: i32) {
    let mut io = ring.file(fd(file)).expect("handle");
    for b in 0..8 {
        io.submit(b, Op::Read, b as u64 * BUF as u64, BUF)
            .expect("submit");
    }
    // Returns here: "?" on an error, with 8 reads in flight.
}

#[test]
fn early_return_with_reads_in_flight_cannot_reach_the_next_file() {
    let disk = disk();
    let mut ring = Ring::new(
        Box::new(device(&disk, Order::WritesFirst, None)),
        Default::default(),
    );
    leave_reads_in_flight(&mut ring, FILES[0]);
    in_place(&mut ring, FILES[1]);
    let d = disk.lock().expect("disk");
    assert!(d[&FILES[1]] == content(FILES[1]), "file 1 changed");
}

#[test]
fn a_leaked_handle_is_reaped_before_the_next_file() {
    let disk = disk();
    let mut ring = Ring::new(
        Box::new(device(&disk, Order::Fifo, None)),
        Default::default(),
    );
    {
        let mut io = ring.file(fd(FILES[0])).expect("handle");
        for b in 0..8 {
            io.submit(b, Op::Read, b as u64 * BUF as u64, BUF)
                .expect("submit");
        }
        std::mem::forget(io);
    }
    in_place(&mut ring, FILES[1]);
    assert!(
        disk.lock().expect("disk")[&FILES[1]] == content(FILES[1]),
        "file 1 changed"
    );
}

#[test]
fn guard_off_stale_completions_write_one_files_bytes_into_another() {
    // The drain discipline switched off (no reaping on drop, none before a
    // new file, no epoch check): the first file's reads complete during
    // the second file's run and are taken for its own. This is the bug
    // seen on XFS: the next file written with the other file's bytes.
    let disk = disk();
    let mut ring = Ring::new(
        Box::new(device(&disk, Order::WritesFirst, None)),
        Default::default(),
    );
    test_switch::set_no_drain(true);
    leave_reads_in_flight(&mut ring, FILES[0]);
    in_place(&mut ring, FILES[1]);
    test_switch::set_no_drain(false);
    let d = disk.lock().expect("disk");
    let a = content(FILES[0]);
    assert!(
        d[&FILES[1]][..BUF] == a[..BUF],
        "without the drain, the second file must get the first file's bytes"
    );
}

/// Wraps a device so that from the N-th wait on every wait fails (a ring
/// that broke for good), for `Fault::WaitForGood`.
#[derive(Debug)]
struct BreaksAt {
    dev: MemDevice,
    at: Option<u64>,
    waits: u64,
}

impl BreaksAt {
    fn new(dev: MemDevice, fault: Fault) -> BreaksAt {
        let at = match fault {
            Fault::WaitForGood(n) => Some(n),
            _ => None,
        };
        BreaksAt { dev, at, waits: 0 }
    }
}

impl crate::io::backend::IoBackend for BreaksAt {
    fn kind(&self) -> crate::io::backend::BackendKind {
        self.dev.kind()
    }
    fn pool(&self) -> &crate::io::buffers::BufferPool {
        self.dev.pool()
    }
    fn pool_mut(&mut self) -> &mut crate::io::buffers::BufferPool {
        self.dev.pool_mut()
    }
    unsafe fn submit(&mut self, req: crate::io::backend::Request) -> std::io::Result<()> {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { self.dev.submit(req) }
    }
    fn wait(
        &mut self,
        timeout: Duration,
    ) -> std::io::Result<Option<crate::io::backend::Completion>> {
        self.waits += 1;
        if self.at.is_some_and(|n| self.waits >= n) {
            return Err(std::io::Error::from_raw_os_error(libc::EFAULT));
        }
        self.dev.wait(timeout)
    }
    fn in_flight(&self) -> usize {
        self.dev.in_flight()
    }
    fn next_epoch(&mut self) -> u32 {
        self.dev.next_epoch()
    }
}
