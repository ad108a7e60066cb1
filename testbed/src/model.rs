//! The retention-decay model: how much slower data of a given age reads.
//!
//! Slowdown fraction F = x^b / (1 + x^b), x = age / τ. The `840evo` preset
//! is fitted to the seed table (docs/DESIGN.md): bulk reads up to ~10× slower,
//! small reads up to ~6× slower, a steep rise between 1 and 4 months.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Model parameters. Times are per request served by one channel.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub name: &'static str,
    /// τ: the age (months) at which half the slowdown is reached.
    pub tau_months: f64,
    /// b: steepness.
    pub steepness: f64,
    /// Bulk-throughput factor 1 + bulk_gain · F^bulk_power.
    pub bulk_gain: f64,
    pub bulk_power: f64,
    /// Small-read latency factor 1 + latency_gain · F.
    pub latency_gain: f64,
    /// Whole-device read/write bandwidth of fresh data, bytes/s.
    pub fresh_bandwidth: f64,
    /// Latency of one fresh request.
    pub fresh_latency: Duration,
}

impl Model {
    pub fn preset(name: &str) -> Option<Model> {
        let base = Model {
            name: "840evo",
            tau_months: 2.19,
            steepness: 3.6,
            bulk_gain: 8.92,
            bulk_power: 1.51,
            latency_gain: 4.83,
            fresh_bandwidth: 400e6,
            fresh_latency: Duration::from_micros(250),
        };
        match name {
            "840evo" => Some(base),
            "modern-tlc" => Some(Model {
                name: "modern-tlc",
                tau_months: 12.0,
                steepness: 2.0,
                bulk_gain: 0.5,
                bulk_power: 1.0,
                latency_gain: 0.5,
                fresh_bandwidth: 250e6,
                fresh_latency: Duration::from_micros(300),
            }),
            "none" => Some(Model {
                name: "none",
                bulk_gain: 0.0,
                latency_gain: 0.0,
                ..base
            }),
            _ => None,
        }
    }

    pub const NAMES: [&'static str; 3] = ["840evo", "modern-tlc", "none"];

    /// F in [0, 1).
    pub fn slowdown(&self, age_months: f64) -> f64 {
        if age_months <= 0.0 {
            return 0.0;
        }
        let xb = (age_months / self.tau_months).powf(self.steepness);
        xb / (1.0 + xb)
    }

    pub fn bulk_factor(&self, age_months: f64) -> f64 {
        1.0 + self.bulk_gain * self.slowdown(age_months).powf(self.bulk_power)
    }

    pub fn latency_factor(&self, age_months: f64) -> f64 {
        1.0 + self.latency_gain * self.slowdown(age_months)
    }

    /// Service time of one read request on one channel: the request
    /// latency scaled by the latency factor, plus the transfer at the
    /// channel's share of the bandwidth scaled by the bulk factor. `ages`
    /// holds the age of each 4 KiB block (None: never written, fresh).
    pub fn read_time(
        &self,
        bytes: u64,
        ages: impl Iterator<Item = Option<f64>>,
        channels: u32,
    ) -> Duration {
        let (mut n, mut lat, mut bulk) = (0u32, 0.0, 0.0);
        for age in ages {
            let a = age.unwrap_or(0.0);
            lat += self.latency_factor(a);
            bulk += self.bulk_factor(a);
            n += 1;
        }
        let n = f64::from(n.max(1));
        let per_channel = self.fresh_bandwidth / f64::from(channels.max(1));
        let secs =
            self.fresh_latency.as_secs_f64() * (lat / n) + bytes as f64 / per_channel * (bulk / n);
        Duration::from_secs_f64(secs)
    }

    /// Writes run at fresh speed.
    pub fn write_time(&self, bytes: u64, channels: u32) -> Duration {
        let per_channel = self.fresh_bandwidth / f64::from(channels.max(1));
        self.fresh_latency + Duration::from_secs_f64(bytes as f64 / per_channel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evo_matches_the_seed_shape() {
        let m = Model::preset("840evo").unwrap();
        // Slow growth, steep rise between 1 and 4 months, plateau near 10×.
        let f = |a| m.bulk_factor(a);
        assert!(f(0.0) == 1.0);
        assert!(f(0.9) < 1.5, "{}", f(0.9));
        assert!(f(2.0) > 2.5 && f(2.0) < 4.5, "{}", f(2.0));
        assert!(f(4.0) > 6.0, "{}", f(4.0));
        assert!(f(7.0) > 8.5 && f(7.0) < 9.92, "{}", f(7.0));
        let mut prev = 0.0;
        for a in [0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 12.0] {
            assert!(f(a) >= prev);
            prev = f(a);
        }
        assert!(m.latency_factor(100.0) < 5.84);
    }

    #[test]
    fn none_never_slows_and_tlc_is_mild() {
        let n = Model::preset("none").unwrap();
        assert_eq!(n.bulk_factor(50.0), 1.0);
        let t = Model::preset("modern-tlc").unwrap();
        assert!(t.bulk_factor(6.0) < 1.25 && t.bulk_factor(120.0) < 1.51);
    }

    #[test]
    fn read_time_scales_with_age() {
        let m = Model::preset("840evo").unwrap();
        let fresh = m.read_time(128 << 10, std::iter::repeat_n(None, 32), 8);
        let old = m.read_time(128 << 10, std::iter::repeat_n(Some(7.0), 32), 8);
        let ratio = old.as_secs_f64() / fresh.as_secs_f64();
        assert!(ratio > 8.0 && ratio < 9.9, "{ratio}");
    }
}
