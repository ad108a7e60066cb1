//! What the lease promises, in time. The kernel lets an opener in at the
//! latest `lease-break-time` seconds after it asked us to let go
//! (`/proc/sys/fs/lease-break-time`), whether or not we did. So a write of
//! ours is provably covered by the lease only if it completed before the
//! last moment we saw the lease held plus that time: [`LeaseClock`] keeps
//! that moment, and [`WriteWindow`] keeps the writes in flight small
//! enough to finish far inside it.

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use crate::io::fileio::NoWriteInFlight;
use crate::io::syscalls::{self, LeaseState};

/// The kernel's default, used when /proc cannot be read.
pub const DEFAULT_LEASE_BREAK: Duration = Duration::from_secs(45);

/// `/proc/sys/fs/lease-break-time`, read now.
pub fn lease_break_time() -> Duration {
    std::fs::read_to_string("/proc/sys/fs/lease-break-time")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(DEFAULT_LEASE_BREAK, Duration::from_secs)
}

/// When we last saw our lease held, and how long the kernel waits after a
/// break before it revokes it.
#[derive(Debug)]
pub struct LeaseClock<'a> {
    fd: BorrowedFd<'a>,
    leased: bool,
    last_held: Instant,
    break_time: Duration,
    /// The kernel was seen taking the lease back (someone opened the file).
    broke: bool,
}

impl<'a> LeaseClock<'a> {
    /// `taken_at`: when `F_SETLEASE` succeeded.
    pub fn new(fd: BorrowedFd<'a>, leased: bool, taken_at: Instant, break_time: Duration) -> Self {
        LeaseClock {
            fd,
            leased,
            last_held: taken_at,
            break_time,
            broke: false,
        }
    }

    /// Whether the lease was seen breaking (another process opened or
    /// truncated the file).
    pub fn broke(&self) -> bool {
        self.broke
    }

    pub fn leased(&self) -> bool {
        self.leased
    }

    pub fn break_time(&self) -> Duration {
        self.break_time
    }

    /// Asks the kernel; true while we hold the lease and nobody wants it.
    /// Any other answer, an error included, means "stop".
    pub fn check(&mut self) -> bool {
        if !self.leased {
            return true;
        }
        let asked = Instant::now();
        match syscalls::lease_state(self.fd) {
            Ok(LeaseState::Held) => {
                self.last_held = asked;
                true
            }
            _ => {
                self.broke = true;
                false
            }
        }
    }

    /// Until when our writes are provably covered (`None`: no lease).
    pub fn deadline(&self) -> Option<Instant> {
        self.leased.then(|| self.last_held + self.break_time)
    }

    /// Whether the lease is still provably ours, with `margin` to spare.
    pub fn still_ours(&self, margin: Duration) -> bool {
        self.deadline().is_none_or(|d| Instant::now() + margin < d)
    }
}

/// Bounds the bytes of writes in flight under a lease: at most what the
/// device, at the write throughput seen so far, finishes in
/// `lease_break / 8`, and always one write. Until a write has completed
/// the throughput is unknown, so one write at a time; the same when the
/// writes grow beyond the size the throughput was measured with (small
/// writes may be served from a burst allowance a large one does not get).
#[derive(Debug)]
pub struct WriteWindow {
    budget: Option<Duration>,
    bytes: u64,
    count: usize,
    /// Bytes per second, smoothed.
    rate: Option<f64>,
    /// The largest write the rate was measured with.
    measured_len: u64,
    last_event: Option<Instant>,
}

impl WriteWindow {
    /// The fraction of the lease-break time writes in flight may need.
    pub const SHARE: u32 = 8;

    pub fn new(lease_break: Option<Duration>) -> WriteWindow {
        WriteWindow {
            budget: lease_break.map(|b| b / Self::SHARE),
            bytes: 0,
            count: 0,
            rate: None,
            measured_len: 0,
            last_event: None,
        }
    }

    /// Writes in flight.
    pub fn in_flight(&self) -> usize {
        self.count
    }

    /// None of them: the file's times are what our writes left.
    pub fn no_write_in_flight(&self) -> Option<NoWriteInFlight> {
        NoWriteInFlight::counted(self.count)
    }

    /// May a write of `len` bytes start now?
    pub fn admits(&self, len: u64) -> bool {
        let Some(budget) = self.budget else {
            return true;
        };
        if self.count == 0 {
            return true;
        }
        match self.rate {
            Some(r) if len <= self.measured_len => {
                (self.bytes + len) as f64 <= r * budget.as_secs_f64()
            }
            _ => false,
        }
    }

    pub fn started(&mut self, len: u64, now: Instant) {
        if self.count == 0 {
            self.last_event = Some(now);
        }
        self.bytes += len;
        self.count += 1;
    }

    /// A write of `len` finished at `now`: its service time is the time
    /// since the previous write event while writes were in flight.
    pub fn finished(&mut self, len: u64, now: Instant) {
        self.bytes = self.bytes.saturating_sub(len);
        self.count = self.count.saturating_sub(1);
        if let Some(t) = self.last_event {
            let secs = now.duration_since(t).as_secs_f64().max(1e-6);
            let sample = len as f64 / secs;
            self.rate = Some(match self.rate {
                // Larger writes than measured: start over from this one.
                Some(r) if len <= self.measured_len => 0.7 * r + 0.3 * sample,
                _ => sample,
            });
            self.measured_len = self.measured_len.max(len);
        }
        self.last_event = (self.count > 0).then_some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_measured_on_small_writes_does_not_admit_large_ones() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut w = WriteWindow::new(Some(Duration::from_secs(1)));
        // 128 KiB written in 1 ms: "128 MiB/s", a window of 16 MiB.
        w.started(128 << 10, t0);
        w.finished(128 << 10, t0 + ms(1));
        assert!(w.admits(128 << 10) && w.admits(64 << 10));
        // A 1 MiB write is larger than anything measured: one at a time.
        assert!(w.admits(1 << 20), "nothing in flight: one may start");
        w.started(1 << 20, t0 + ms(2));
        assert!(!w.admits(1 << 20), "a second large one waits for the first");
        // It took 500 ms (2 MiB/s, a throttled device): the window is now
        // what 2 MiB/s finishes in 125 ms, less than one such write.
        w.finished(1 << 20, t0 + ms(502));
        w.started(1 << 20, t0 + ms(503));
        assert!(!w.admits(1 << 20));
        assert!(
            !w.admits(128 << 10),
            "the slow rate now holds for small writes too"
        );
    }

    #[test]
    fn one_write_until_the_throughput_is_known_then_a_share_of_the_break() {
        let t0 = Instant::now();
        let mut w = WriteWindow::new(Some(Duration::from_secs(8)));
        assert!(w.admits(1 << 20), "the first write always starts");
        w.started(1 << 20, t0);
        assert!(!w.admits(1 << 20), "throughput unknown: one at a time");
        // 1 MiB in 1 s: 1 MiB/s, budget 8 s / 8 = 1 s: one MiB in flight.
        w.finished(1 << 20, t0 + Duration::from_secs(1));
        assert!(w.admits(1 << 20));
        w.started(1 << 20, t0 + Duration::from_secs(1));
        assert!(!w.admits(1 << 20), "a second MiB would need 2 s > 1 s");
    }

    #[test]
    fn fast_devices_are_not_held_back() {
        let t0 = Instant::now();
        let mut w = WriteWindow::new(Some(Duration::from_secs(45)));
        w.started(1 << 20, t0);
        w.finished(1 << 20, t0 + Duration::from_millis(3));
        for i in 0..8 {
            assert!(w.admits(1 << 20), "write {i} of 8 at ~330 MiB/s");
            w.started(1 << 20, t0);
        }
    }

    #[test]
    fn no_lease_no_bound() {
        let mut w = WriteWindow::new(None);
        w.started(1 << 30, Instant::now());
        assert!(w.admits(1 << 30));
    }
}
