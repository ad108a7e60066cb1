//! Token bucket on bytes per second. It starts empty and holds at most one
//! chunk, so the bytes granted by time `t` never exceed `rate·t + burst` and
//! never burst by more than one chunk.

use std::time::{Duration, Instant};

use crate::engine::pacing::pace::{Allowance, Pacer};
use crate::engine::safety::watch::{StopReason, Watch, POLL};

/// A byte-rate limiter. Time is passed in (`now` since any fixed epoch) so
/// the arithmetic is tested without sleeping.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Duration,
}

impl TokenBucket {
    /// `rate` bytes per second (> 0); `burst` the largest single request.
    pub fn new(rate: u64, burst: u64, now: Duration) -> TokenBucket {
        assert!(rate > 0, "rate must be positive");
        TokenBucket {
            rate: rate as f64,
            burst: burst.max(1) as f64,
            tokens: 0.0,
            last: now,
        }
    }

    pub fn rate(&self) -> u64 {
        self.rate as u64
    }

    /// Changes the rate from `now` on (what was earned so far at the old
    /// rate is kept, up to one burst).
    pub fn set_rate(&mut self, rate: u64, now: Duration) {
        assert!(rate > 0, "rate must be positive");
        self.refill(now, self.burst);
        self.rate = rate as f64;
    }

    /// The largest request granted at once.
    pub fn burst(&self) -> u64 {
        self.burst as u64
    }

    fn refill(&mut self, now: Duration, cap: f64) {
        if now > self.last {
            let dt = (now - self.last).as_secs_f64();
            self.tokens = (self.tokens + dt * self.rate).min(cap);
            self.last = now;
        }
    }

    /// Takes a whole unit of `n` bytes at once, the bucket holding up to
    /// `n` meanwhile: the time the previous unit's own work took counts
    /// toward this one, so units paced back to back keep the rate even
    /// when each takes a while to run (relocation). Never more than `n`
    /// is granted before `n / rate` has passed since the bucket was empty.
    pub fn take_unit(&mut self, n: u64, now: Duration) -> Result<(), Duration> {
        let cap = (n as f64).max(self.burst);
        self.refill(now, cap);
        if self.tokens + 1e-6 >= n as f64 {
            self.tokens -= n as f64;
            Ok(())
        } else {
            let nanos = ((n as f64 - self.tokens) / self.rate * 1e9).ceil().max(1.0);
            Err(Duration::from_nanos(nanos as u64))
        }
    }

    /// Takes `n` bytes' worth of tokens, or says how long to wait first.
    /// Requests larger than the burst are allowed once the bucket is full.
    pub fn take(&mut self, n: u64, now: Duration) -> Result<(), Duration> {
        self.refill(now, self.burst);
        let need = (n as f64).min(self.burst);
        if self.tokens + 1e-6 >= need {
            // A request bigger than the burst leaves a debt that later
            // requests pay off, so the long-run rate still holds.
            self.tokens -= n as f64;
            Ok(())
        } else {
            // Rounded up: a wait that rounds to zero would spin.
            let nanos = ((need - self.tokens) / self.rate * 1e9).ceil().max(1.0);
            Err(Duration::from_nanos(nanos as u64))
        }
    }
}

/// The rate limit shared by every file an engine refreshes, and the pacer
/// that lowers it (with the depth and request size) while other processes
/// use the drive.
#[derive(Debug)]
pub struct Throttle {
    bucket: Option<TokenBucket>,
    epoch: Instant,
    /// The configured rate.
    rate: Option<u64>,
    burst: u64,
    pacer: Option<Pacer>,
    /// What [`Throttle::allowance`] says, whatever the pacer would.
    #[cfg(test)]
    forced: Option<Allowance>,
}

impl Throttle {
    pub fn new(rate: Option<u64>, burst: u64) -> Throttle {
        let bucket = rate.map(|r| TokenBucket::new(r, burst, Duration::ZERO));
        Throttle {
            bucket,
            epoch: Instant::now(),
            rate,
            burst,
            pacer: None,
            #[cfg(test)]
            forced: None,
        }
    }

    /// A throttle whose allowance is `a` (tests of the executor).
    #[cfg(test)]
    pub fn forcing(self, a: Allowance) -> Throttle {
        Throttle {
            forced: Some(a),
            ..self
        }
    }

    /// A throttle paced by `pacer`, at most at its configured rate.
    pub fn paced(burst: u64, pacer: Pacer) -> Throttle {
        let start = pacer.allowance().rate;
        let configured = pacer.configured_rate();
        Throttle {
            bucket: start.map(|r| TokenBucket::new(r, burst, Duration::ZERO)),
            pacer: Some(pacer),
            ..Throttle::new(configured, burst)
        }
    }

    /// The configured rate (what plans are sized for).
    pub fn rate(&self) -> Option<u64> {
        self.rate
    }

    pub fn pacer_mut(&mut self) -> Option<&mut Pacer> {
        self.pacer.as_mut()
    }

    /// What may run now: requests in flight and their largest size.
    pub fn allowance(&self) -> Allowance {
        #[cfg(test)]
        if let Some(a) = self.forced {
            return a;
        }
        self.pacer.as_ref().map_or(
            Allowance {
                rate: self.rate,
                depth: usize::MAX,
                request: None,
                depth_bounds_writes: false,
            },
            Pacer::allowance,
        )
    }

    /// Runs `f`, our own I/O the kernel does without requests we can
    /// count (opening and planning a file read its metadata; relocation
    /// copies): the pacer leaves what the drive counts meanwhile out.
    pub fn uncounted<R>(&mut self, f: impl FnOnce() -> R) -> R {
        /// Ends the section however `f` ends.
        struct Section<'a>(Option<&'a mut Pacer>);
        impl Drop for Section<'_> {
            fn drop(&mut self) {
                if let Some(p) = self.0.as_mut() {
                    p.end_uncounted();
                }
            }
        }
        let mut section = Section(self.pacer.as_mut());
        if let Some(p) = section.0.as_mut() {
            p.begin_uncounted();
        }
        f()
    }

    /// Lets the pacer look at the drive, and applies its rate.
    pub fn tick(&mut self) {
        let now = self.epoch.elapsed();
        let Some(p) = self.pacer.as_mut() else {
            return;
        };
        if !p.tick(now) {
            return;
        }
        match (p.allowance().rate, &mut self.bucket) {
            (None, b) => *b = None,
            (Some(r), Some(b)) => b.set_rate(r, now),
            (Some(r), b) => *b = Some(TokenBucket::new(r, self.burst, now)),
        }
    }

    /// Waits for a whole unit of `n` bytes (see [`TokenBucket::take_unit`]),
    /// still answering the watch.
    pub fn take_unit_watching(&mut self, n: u64, watch: &mut dyn Watch) -> Result<(), StopReason> {
        loop {
            if let Some(why) = watch.should_stop() {
                return Err(why);
            }
            self.tick();
            let now = self.epoch.elapsed();
            let r = match &mut self.bucket {
                Some(b) => b.take_unit(n, now),
                None => Ok(()),
            };
            match r {
                Ok(()) => return Ok(()),
                Err(wait) => std::thread::sleep(wait.min(POLL)),
            }
        }
    }

    pub fn try_take(&mut self, n: u64) -> Result<(), Duration> {
        self.tick();
        let now = self.epoch.elapsed();
        match &mut self.bucket {
            Some(b) => b.take(n, now),
            None => Ok(()),
        }
    }

    /// Waits for `n` bytes of budget, still answering the watch. A request
    /// larger than the bucket's burst is paid for in burst-sized pieces
    /// *before* it runs, so a large unit cannot run ahead of the rate.
    pub fn take_watching(&mut self, n: u64, watch: &mut dyn Watch) -> Result<(), StopReason> {
        let piece = self.bucket.as_ref().map_or(n, TokenBucket::burst).max(1);
        let mut left = n;
        loop {
            let now = left.min(piece);
            loop {
                if let Some(why) = watch.should_stop() {
                    return Err(why);
                }
                match self.try_take(now) {
                    Ok(()) => break,
                    Err(wait) => std::thread::sleep(wait.min(POLL)),
                }
            }
            left -= now;
            if left == 0 {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::types::chunk_for_rate;
    use proptest::prelude::*;

    /// A greedy consumer on a virtual clock; each grant is followed by I/O
    /// taking `io_us[i]` microseconds. Returns the grants (time, bytes).
    fn run(rate: u64, chunk: u64, until: Duration, io_us: &[u64]) -> Vec<(Duration, u64)> {
        let mut b = TokenBucket::new(rate, chunk, Duration::ZERO);
        let mut now = Duration::ZERO;
        let mut log = Vec::new();
        while now < until {
            match b.take(chunk, now) {
                Ok(()) => {
                    log.push((now, chunk));
                    now += Duration::from_micros(io_us[log.len() % io_us.len()]);
                }
                Err(wait) => now += wait,
            }
        }
        log
    }

    #[test]
    fn starts_empty_and_waits_for_the_first_chunk() {
        let mut b = TokenBucket::new(1000, 100, Duration::ZERO);
        let wait = b.take(100, Duration::ZERO).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        assert!(b.take(100, Duration::from_millis(100)).is_ok());
    }

    #[test]
    fn does_not_bank_more_than_one_chunk_while_idle() {
        let mut b = TokenBucket::new(1000, 100, Duration::ZERO);
        let t = Duration::from_secs(3600);
        assert!(b.take(100, t).is_ok());
        assert!(b.take(100, t).is_err(), "a second chunk at once is a burst");
    }

    #[test]
    fn chunk_shrinks_for_low_rates() {
        assert_eq!(chunk_for_rate(1 << 20, None, 4096), 1 << 20);
        assert_eq!(chunk_for_rate(1 << 20, Some(1 << 30), 4096), 1 << 20);
        assert_eq!(chunk_for_rate(1 << 20, Some(1 << 20), 4096), 49_152);
        assert_eq!(chunk_for_rate(1 << 20, Some(1000), 4096), 4096);
    }

    #[test]
    fn units_paced_back_to_back_keep_the_rate_while_work_takes_time() {
        // 8 MB units at 16 MB/s, each taking 0.4 s of work after its grant:
        // one unit per 0.5 s, not per 0.9 s.
        let mut b = TokenBucket::new(16_000_000, 1_000_000, Duration::ZERO);
        let mut now = Duration::ZERO;
        let mut grants = 0;
        while now < Duration::from_secs(10) {
            match b.take_unit(8_000_000, now) {
                Ok(()) => {
                    grants += 1;
                    now += Duration::from_millis(400);
                }
                Err(wait) => now += wait,
            }
        }
        assert!((19..=21).contains(&grants), "{grants} units in 10 s");
        // Never ahead of the rate: 20 units need 10 s.
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn rate_is_within_5_percent_over_10s(
            rate in 64u64 * 1024..1u64 << 30,
            chunk_pow in 16u32..21,
            io_us in proptest::collection::vec(0u64..2_000, 1..8),
        ) {
            let chunk = chunk_for_rate(1 << chunk_pow, Some(rate), 4096);
            let log = run(rate, chunk, Duration::from_secs(10), &io_us);
            let granted: u64 = log.iter().map(|(_, n)| n).sum();
            let ideal = rate as f64 * 10.0;
            prop_assert!((granted as f64) <= ideal * 1.05, "granted {} > 105% of {}", granted, ideal);
            // When the I/O itself is faster than the rate, the rate is met.
            let max_io = *io_us.iter().max().unwrap_or(&0) as f64 / 1e6;
            if max_io < chunk as f64 / rate as f64 {
                prop_assert!(granted as f64 >= ideal * 0.95, "granted {} < 95% of {}", granted, ideal);
            }
            // No window [t_i, t_j] holds more than rate·(t_j − t_i) + two
            // chunks: with prefix sums S, max over i of
            // S_j − S_{i−1} − r(t_j − t_i), tracked in one pass.
            let r = rate as f64;
            let mut best = f64::MIN;
            let mut s = 0.0;
            for &(t, n) in &log {
                best = best.max(r * t.as_secs_f64() - s);
                s += n as f64;
                prop_assert!(s - r * t.as_secs_f64() + best <= 2.0 * chunk as f64 + 1.0);
            }
        }
    }
}
