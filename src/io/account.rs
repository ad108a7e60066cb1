//! The refresh's own I/O, counted where it completes (the ring) for
//! whoever paces it, and the I/O priorities its requests carry.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The refresh's own I/O since the pacer last looked, and the I/O
/// priority its reads carry. Shared by the ring (which fills it) and the
/// pacer (which empties it) on the I/O thread.
#[derive(Debug, Default)]
pub struct OwnIo {
    done: Mutex<OwnDone>,
    /// Our reads submitted and not yet completed, and their bytes.
    reads_in_flight: AtomicUsize,
    read_bytes_in_flight: AtomicU64,
    /// Our writes submitted and not yet completed.
    writes_in_flight: AtomicUsize,
    read_ioprio: AtomicU16,
    write_ioprio: AtomicU16,
    /// In a section the pacer leaves out of the drive's counters (see
    /// `Throttle::uncounted`).
    in_section: AtomicBool,
}

#[derive(Debug, Default)]
pub struct OwnDone {
    /// Completed reads: length, latency, and whether it had the drive to
    /// itself (nothing else of ours in flight when it started).
    pub reads: Vec<(u64, Duration, bool)>,
    pub writes: Vec<u64>,
    /// Own I/O the kernel did for us without requests we can count, in a
    /// section the drive's counters could not bracket (see
    /// `Throttle::uncounted`): this tick's counters are unusable.
    pub uncounted: bool,
    /// Reads of ours that ended since the pacer last took them, whole,
    /// failed or drained, and their bytes: the drive counted each.
    pub reads_ended: u64,
    pub read_bytes_ended: u64,
    /// Bytes of reads that completed inside a section the pacer leaves
    /// out (relocation reads its units there): the refresh's progress,
    /// not reads to tell the application's from (the section's count
    /// already left them out; in `reads` too, they were left out twice).
    pub section_read_bytes: u64,
}

impl OwnDone {
    /// The bytes the completed reads read.
    pub fn read_bytes(&self) -> u64 {
        self.reads.iter().map(|r| r.0).sum::<u64>() + self.section_read_bytes
    }
}

impl OwnIo {
    pub fn read_started(&self, len: u64) {
        self.reads_in_flight.fetch_add(1, Ordering::Relaxed);
        self.read_bytes_in_flight.fetch_add(len, Ordering::Relaxed);
    }

    /// A read of `len` bytes ended: completed, failed, or discarded by a
    /// drain.
    pub fn read_ended(&self, len: u64) {
        let _ = self
            .reads_in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        let _ = self
            .read_bytes_in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(len))
            });
        let mut d = self.done.lock().unwrap_or_else(|e| e.into_inner());
        d.reads_ended += 1;
        d.read_bytes_ended += len;
    }

    pub fn reads_in_flight(&self) -> usize {
        self.reads_in_flight.load(Ordering::Relaxed)
    }

    /// A write of ours was submitted (the ring counts it; see
    /// [`OwnIo::requests_in_flight`]).
    pub fn write_started(&self) {
        self.writes_in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A write ended: completed, failed, or discarded by a drain.
    pub fn write_ended(&self) {
        let _ = self
            .writes_in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Our reads and writes in flight: the application's latency alone
    /// is measured only with none (a write holds a channel as a read
    /// does).
    pub fn requests_in_flight(&self) -> usize {
        self.reads_in_flight() + self.writes_in_flight.load(Ordering::Relaxed)
    }

    /// At most how many reads the drive may have counted of ours since
    /// the pacer last took them (see [`most_pieces`]): those ended, and
    /// those in flight (or completed and not yet reaped); and whether I/O
    /// of ours went uncounted meanwhile. The pacer looks without taking.
    pub fn reads_the_drive_may_count(&self, max_io: u64) -> (u64, bool) {
        let d = self.done.lock().unwrap_or_else(|e| e.into_inner());
        let ended = most_pieces(d.read_bytes_ended, d.reads_ended, max_io);
        let in_flight = most_pieces(
            self.read_bytes_in_flight.load(Ordering::Relaxed),
            self.reads_in_flight() as u64,
            max_io,
        );
        (ended + in_flight, d.uncounted)
    }

    /// A read completed whole (`latency` from submit to completion).
    pub fn read_done(&self, len: u64, latency: Duration, alone: bool) {
        let mut d = self.done.lock().unwrap_or_else(|e| e.into_inner());
        if self.in_section.load(Ordering::Relaxed) {
            d.section_read_bytes += len;
        } else {
            d.reads.push((len, latency, alone));
        }
    }

    pub fn write_done(&self, len: u64) {
        let mut d = self.done.lock().unwrap_or_else(|e| e.into_inner());
        d.writes.push(len);
    }

    /// The kernel is about to do I/O of ours we cannot count.
    pub fn uncounted(&self) {
        self.done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .uncounted = true;
    }

    /// A section the pacer leaves out of the drive's counters begins
    /// (`true`) or ends.
    pub fn set_in_section(&self, on: bool) {
        self.in_section.store(on, Ordering::Relaxed);
    }

    pub fn read_ioprio(&self) -> u16 {
        self.read_ioprio.load(Ordering::Relaxed)
    }

    pub fn write_ioprio(&self) -> u16 {
        self.write_ioprio.load(Ordering::Relaxed)
    }

    /// The `ioprio` value the next reads carry.
    pub fn set_read_ioprio(&self, ioprio: u16) {
        self.read_ioprio.store(ioprio, Ordering::Relaxed);
    }

    /// The `ioprio` value writes carry.
    pub fn set_write_ioprio(&self, ioprio: u16) {
        self.write_ioprio.store(ioprio, Ordering::Relaxed);
    }

    pub fn take(&self) -> OwnDone {
        std::mem::take(&mut *self.done.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// About how many reads the drive counts for one read of ours of `len`
/// bytes: the block layer splits it into pieces of at most `max_io`
/// that run side by side, each counted as a read, each for about our
/// read's latency. An estimate, for the application's latency sums (a
/// piece off a boundary is not counted: see [`most_pieces`] for the
/// bound).
pub fn likely_pieces(len: u64, max_io: u64) -> u64 {
    len.div_ceil(max_io.max(4096)).max(1)
}

/// At most how many reads the drive counts for `reads` of ours of
/// `bytes` in all: the block layer splits each into pieces of at most
/// `max_io`, one more where it starts off a boundary it splits at
/// (`len / max_io + 2` each; [`likely_pieces`] is the estimate). Not
/// where a read is split finer: at an extent's end, or at a stripe of a
/// RAID smaller than `max_io`.
pub fn most_pieces(bytes: u64, reads: u64, max_io: u64) -> u64 {
    bytes.div_ceil(max_io.max(4096)) + 2 * reads
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the tick estimates of our reads (each read's likely pieces,
    /// summed) is never over the bound the looks between ticks take for
    /// all of them (their bytes, and two pieces a read), whatever the
    /// lengths and the drive's split; a read that starts off a boundary
    /// is what the bound's room is for.
    #[test]
    fn the_likely_pieces_of_many_reads_are_within_the_most() {
        assert_eq!(likely_pieces(1 << 20, 512 << 10), 2);
        assert_eq!(likely_pieces(4096, 512 << 10), 1, "a small read is one");
        assert_eq!(likely_pieces(0, 512 << 10), 1, "an empty read is one");
        assert_eq!(most_pieces(1 << 20, 1, 512 << 10), 4);
        assert_eq!(most_pieces(4096, 1, 0), 3, "max_io is at least a page");
        // 1 MiB at a 512 KiB split starting 4 KiB off a boundary: the
        // drive counts three reads, one more than the estimate.
        let off_boundary = 3;
        assert!(off_boundary > likely_pieces(1 << 20, 512 << 10));
        assert!(off_boundary <= most_pieces(1 << 20, 1, 512 << 10));
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for max_io in [0, 4096, 128 << 10, 512 << 10, 1280 << 10] {
            for n in 1..40u64 {
                let lens: Vec<u64> = (0..n)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        seed % (3 << 20)
                    })
                    .collect();
                let likely: u64 = lens.iter().map(|&l| likely_pieces(l, max_io)).sum();
                let most = most_pieces(lens.iter().sum(), n, max_io);
                assert!(likely <= most, "{lens:?} at {max_io}: {likely} > {most}");
            }
        }
    }
}
