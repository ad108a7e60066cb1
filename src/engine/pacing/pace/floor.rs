//! The floor as a promise kept over time, not a rate at each moment.
//!
//! A rate held at the floor still falls short of it: learning the
//! application's latency is silent (0.4 s at its start and every 30 s,
//! every 10 s while the tail's pool of learnings is young),
//! and one request at a time reads less than the floor on a drive that
//! re-reads aged data. Measured on the testbed with fade, 5 s beside a
//! reader (docs/benchmarks.md, 2026-11-28): 3.5 MiB/s beside a QD1 reader,
//! 1.9 beside a QD8 one, against a 4 MiB/s floor. So the bytes behind the
//! floor since the application appeared are owed, and paid back within
//! [`PAYBACK`] on top of the floor; and the depth the floor needs is
//! found from what one request in flight reads, kept while the
//! controller cuts the rest, and raised in proportion to the promise
//! while what is owed is paid back (on a drive the depth bounds nothing
//! else pays it).

use std::time::Duration;

/// What is owed is paid back within this long, on top of the floor: the
/// most owed since the account was last square, over this long, until
/// all is paid (where the promise is read: on a drive the depth bounds,
/// the floor's depth is raised for it). Paid in proportion to what was
/// still owed (the installment shrinking with the debt) it was never all
/// paid: over 5 s from learning's start the refresh read 3.978 MiB/s of
/// a 4 MiB/s floor (unit test; three cells of the latency matrix read
/// 3.9, a cause inferred, not shown).
const PAYBACK: Duration = Duration::from_secs(2);
/// At most this much of the floor is owed (a refresh held back longer,
/// by a stall of the drive or of its own, is not made up in a burst
/// beside the application): at most 2× the floor while paying back.
const MAX_OWED: Duration = Duration::from_secs(2);

/// The refresh's account with its floor while it shares the drive.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct FloorAccount {
    /// Bytes behind the floor. Never below zero: time the refresh ran
    /// faster (in the application's pauses) is not banked against later.
    owed: f64,
    /// Bytes a second paid back on top of the floor: the most owed since
    /// the account was last square, over [`PAYBACK`].
    installment: f64,
    /// Requests in flight the floor alone needs, as measured (not
    /// rounded: the depth that pays back what is owed is this many times
    /// the promise over the floor). 0: not known to need more than one.
    requests: f64,
}

impl FloorAccount {
    /// A tick beside the application: `elapsed` of the floor (bytes a
    /// second) owed, `read` bytes paid.
    pub fn account(&mut self, floor: f64, elapsed: Duration, read: u64) {
        let owed = self.owed + floor * elapsed.as_secs_f64() - read as f64;
        self.owed = owed.clamp(0.0, floor * MAX_OWED.as_secs_f64());
        self.installment = if self.owed > 0.0 {
            self.installment.max(self.owed / PAYBACK.as_secs_f64())
        } else {
            0.0
        };
    }

    /// The rate that keeps the promise: the floor, and what is owed paid
    /// back within [`PAYBACK`].
    pub fn rate(&self, floor: f64) -> f64 {
        floor + self.installment
    }

    /// Bytes behind the floor.
    pub fn owed(&self) -> f64 {
        self.owed
    }

    /// `depth` requests in flight read less than `span` promised (the
    /// caller asks only when short of it): the requests the floor needs,
    /// by Little's law on our own requests (as many more in flight as the
    /// bytes are short: asked at the promise, that rounds up to one more
    /// at least), at most twice as many as now (the span measured can
    /// start with requests not yet in flight; on the testbed with fade
    /// and a QD8 reader a jump from one to five, unbounded, put the reader
    /// at 2–2.8× its latency alone), at most `max`. Measured against the
    /// promise over the span (the floor and what was owed), kept for the
    /// floor alone, unrounded: the depth that pays back is sized for the
    /// promise, and is back to what the floor needs when it is paid (a
    /// step rounded up to the promise's and kept for the floor kept a
    /// third request where two read the floor; unit test).
    pub fn short(&mut self, depth: usize, span: &Span, floor: f64, max: usize) {
        let depth = depth.max(1) as f64;
        let promised = span.promised_per_s().max(floor);
        let need = depth * promised / span.read_per_s().max(1.0);
        let need = need.min(2.0 * depth).min(max.max(1) as f64);
        self.requests = need * floor / promised;
    }

    /// The requests in flight that keep the promise at `promise` bytes a
    /// second (the floor's, scaled by what is owed), one at least, at
    /// most `max`.
    pub fn depth(&self, promise: f64, floor: f64, max: usize) -> usize {
        if self.requests == 0.0 {
            return 1;
        }
        // Less a hair: a depth that reads the promise exactly is enough.
        let depth = (self.requests * promise / floor.max(1.0) - 1e-9).ceil();
        (depth as usize).clamp(1, max.max(1))
    }

    /// The depth is learned again (the drive, or the application, may
    /// have changed); what is owed stays.
    pub fn forget_depth(&mut self) {
        self.requests = 0.0;
    }
}

/// A span of sharing with reads of ours waiting: how long, the bytes
/// read, the bytes the throttle let through (the rate at each tick), and
/// the bytes the promise asked for (the floor and what was owed, at each
/// tick).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Span {
    time: Duration,
    read: u64,
    allowed: f64,
    promised: f64,
}

impl Span {
    pub fn add(&mut self, elapsed: Duration, read: u64, rate: f64, promise: f64) {
        let secs = elapsed.as_secs_f64();
        self.time += elapsed;
        self.read += read;
        self.allowed += rate * secs;
        self.promised += promise * secs;
    }

    /// How long the span is.
    pub fn time(&self) -> Duration {
        self.time
    }

    /// Bytes read a second over the span.
    pub fn read_per_s(&self) -> f64 {
        self.read as f64 / self.secs()
    }

    /// Bytes a second the promise asked for over the span.
    pub fn promised_per_s(&self) -> f64 {
        self.promised / self.secs()
    }

    fn secs(&self) -> f64 {
        self.time.as_secs_f64().max(1e-9)
    }

    /// Less than `share` of `rate`'s bytes read.
    pub fn short_of(&self, rate: f64, share: f64) -> bool {
        (self.read as f64) < rate * self.time.as_secs_f64() * share
    }

    /// Short of the promise for want of requests in flight: less than the
    /// promise's bytes read (the floor and what was owed), and at least
    /// one `request` less than the throttle let through. A refresh the
    /// throttle held reads within about one request of it over a span
    /// (the bucket charges each chunk's write, and a span's ends can
    /// split one): not short of depth; one it did not hold is, by however
    /// little. The margin is a larger share of a low floor with large
    /// requests (a 1 MiB request is a quarter of a 4 MiB/s floor's
    /// second): there a shortfall under a request is not found unless
    /// the debt raises the rate. (A share of the floor as the mark, 0.8
    /// before, left tb-fade · qd8 at 3.7 MiB/s and depth 3 for 20 s, its
    /// debt at the cap; the floor alone as the mark, what was owed was
    /// never paid on a drive the depth bounds.)
    pub fn short_of_promise(&self, request: u64) -> bool {
        (self.read as f64) < self.promised && (self.read + request) as f64 <= self.allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = (1 << 20) as f64;

    #[test]
    fn what_is_owed_is_paid_back_and_never_banked() {
        let mut a = FloorAccount::default();
        // 0.4 s of learning at a 4 MiB/s floor: 1.6 MiB owed.
        a.account(4.0 * MIB, Duration::from_millis(400), 0);
        assert!((a.owed() - 1.6 * MIB).abs() < 1.0);
        assert!((a.rate(4.0 * MIB) - 4.8 * MIB).abs() < 1.0, "paid over 2 s");
        // A pause at full speed pays it all, and banks nothing.
        a.account(4.0 * MIB, Duration::from_secs(1), 50 << 20);
        assert_eq!(a.owed(), 0.0);
        assert_eq!(a.rate(4.0 * MIB), 4.0 * MIB);
    }

    /// Paid at what the promise lets through, all of it within the
    /// payback time (in proportion to what is still owed, never all).
    #[test]
    fn what_is_owed_is_all_paid_within_the_payback_time() {
        let floor = 4.0 * MIB;
        let tick = Duration::from_millis(100);
        let mut a = FloorAccount::default();
        // Learning's silence and the ticks around it: 2.4 MiB owed.
        a.account(floor, Duration::from_millis(600), 0);
        let mut t = Duration::ZERO;
        while a.owed() > 0.0 && t < 2 * PAYBACK {
            a.account(floor, tick, (a.rate(floor) * 0.1).ceil() as u64);
            t += tick;
        }
        assert!(t <= PAYBACK, "{:.2} MiB owed after {t:?}", a.owed() / MIB);
        assert_eq!(a.rate(floor), floor, "square: the floor alone");
    }

    #[test]
    fn at_most_two_seconds_of_the_floor_are_owed() {
        let mut a = FloorAccount::default();
        a.account(4.0 * MIB, Duration::from_secs(60), 0);
        assert_eq!(a.owed(), 8.0 * MIB);
        assert_eq!(a.rate(4.0 * MIB), 8.0 * MIB);
    }

    #[test]
    fn short_of_the_promise_is_what_the_throttle_did_not_hold() {
        let span = |read: f64, allowed: f64, promised: f64| {
            let mut s = Span::default();
            s.add(
                Duration::from_secs(1),
                (read * MIB) as u64,
                allowed * MIB,
                promised * MIB,
            );
            s
        };
        let request = 512 << 10;
        // The throttle let the floor through; a span's end split a request.
        assert!(!span(3.6, 4.0, 4.0).short_of_promise(request));
        // It let through more than a request's worth we did not read.
        assert!(span(3.4, 4.0, 4.0).short_of_promise(request));
        // Paying back (6 MiB/s let through), 94 % of the floor is short.
        assert!(span(3.75, 6.0, 6.0).short_of_promise(request));
        // So is the floor read, with what is owed not paid.
        assert!(span(4.2, 6.0, 6.0).short_of_promise(request));
        // The promise read, whatever more was let through, is not.
        assert!(!span(6.0, 8.0, 6.0).short_of_promise(request));
    }

    /// A second of the floor promised, `read` MiB read.
    fn at_the_floor(read: f64) -> Span {
        let mut s = Span::default();
        s.add(
            Duration::from_secs(1),
            (read * MIB) as u64,
            4.0 * MIB,
            4.0 * MIB,
        );
        s
    }

    #[test]
    fn the_depth_the_floor_needs_is_what_one_request_reads_into_it() {
        let floor = 4.0 * MIB;
        let mut a = FloorAccount::default();
        let depth = |a: &FloorAccount| a.depth(floor, floor, 8);
        assert_eq!(depth(&a), 1);
        // Two in flight read 2.5 MiB/s of 4: four.
        a.short(2, &at_the_floor(2.5), floor, 8);
        assert_eq!(depth(&a), 4);
        // Nearly there: one more, not the same.
        a.short(4, &at_the_floor(3.9), floor, 8);
        assert_eq!(depth(&a), 5);
        // Far short: twice as many at most, in a step.
        a.short(1, &at_the_floor(1.0), floor, 8);
        assert_eq!(depth(&a), 2);
        a.short(3, &at_the_floor(0.0), floor, 8);
        assert_eq!(depth(&a), 6, "nothing read at all");
        // Never past the most the refresh may have in flight.
        a.short(6, &at_the_floor(0.1), floor, 8);
        assert_eq!(depth(&a), 8);
        a.short(8, &at_the_floor(1.0), floor, 8);
        assert_eq!(depth(&a), 8, "at the most");
        a.forget_depth();
        assert_eq!(depth(&a), 1);
    }

    /// Paying back, the promise is more than the floor: the depth found
    /// short of it is kept for the floor alone, and scaled by the promise.
    #[test]
    fn the_depth_that_pays_back_shrinks_with_what_is_owed() {
        let floor = 4.0 * MIB;
        let mut a = FloorAccount::default();
        // A second of the floor owed: paid back at 6 MiB/s.
        a.account(floor, Duration::from_secs(1), 0);
        assert_eq!(a.rate(floor), 6.0 * MIB);
        // Four in flight read 4.2 MiB/s, 6 were promised: six for it.
        let mut span = Span::default();
        span.add(
            Duration::from_secs(1),
            (4.2 * MIB) as u64,
            6.0 * MIB,
            6.0 * MIB,
        );
        a.short(4, &span, floor, 8);
        assert_eq!(a.depth(6.0 * MIB, floor, 8), 6);
        assert_eq!(a.depth(5.0 * MIB, floor, 8), 5);
        // Paid: four read the floor.
        assert_eq!(a.depth(floor, floor, 8), 4);
    }
}
