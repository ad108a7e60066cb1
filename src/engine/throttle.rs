//! Token bucket on bytes per second. It starts empty and holds at most one
//! chunk, so the bytes granted by time `t` never exceed `rate·t + burst` and
//! never burst by more than one chunk.

use std::time::Duration;

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

    fn refill(&mut self, now: Duration) {
        if now > self.last {
            let dt = (now - self.last).as_secs_f64();
            self.tokens = (self.tokens + dt * self.rate).min(self.burst);
            self.last = now;
        }
    }

    /// Takes `n` bytes' worth of tokens, or says how long to wait first.
    /// Requests larger than the burst are allowed once the bucket is full.
    pub fn take(&mut self, n: u64, now: Duration) -> Result<(), Duration> {
        self.refill(now);
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

/// The largest chunk that keeps the throttle within ±0.5 % over 10 s:
/// one chunk is at most 1/20 s of the rate, rounded down to `align`.
pub fn chunk_for_rate(chunk: u64, rate: Option<u64>, align: u64) -> u64 {
    match rate {
        Some(r) => (r / 20 / align * align).clamp(align, chunk.max(align)),
        None => chunk,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
