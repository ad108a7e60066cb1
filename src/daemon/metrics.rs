//! OpenMetrics families (docs/DESIGN.md "Metrics"): per drive, labelled
//! `device` (the kernel name, `+`-joined for multi-device filesystems);
//! never a file name in a label.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::engine::{FileReport, Outcome};
use crate::policy::HealthState;
use crate::sampler::DriveSample;

mod register;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Dev {
    pub device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DevState {
    pub device: String,
    pub state: String,
}

/// `data` is "stale" or "fresh" (the canary).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DevQuantile {
    pub device: String,
    pub data: String,
    pub quantile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DevOutcome {
    pub device: String,
    pub outcome: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Verb {
    pub verb: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Build {
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Backend {
    pub backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyscallLabel {
    pub call: String,
}

type GaugeF = Gauge<f64, AtomicU64>;
type CounterF = Counter<f64, AtomicU64>;

/// Every family the daemon exports.
#[derive(Debug)]
pub struct Metrics {
    pub registry: Registry,
    pub stale_throughput: Family<Dev, GaugeF>,
    pub fresh_throughput: Family<Dev, GaugeF>,
    /// The forecast: NaN unknown, +Inf not within the horizon.
    pub until_degraded: Family<Dev, GaugeF>,
    pub latency: Family<DevQuantile, GaugeF>,
    pub degraded: Family<Dev, Gauge>,
    pub state: Family<DevState, Gauge>,
    pub stale_bytes: Family<Dev, Gauge>,
    pub in_progress: Family<Dev, Gauge>,
    pub refreshed_bytes: Family<Dev, Counter>,
    pub files: Family<DevOutcome, Counter>,
    pub read_errors: Family<Dev, Counter>,
    pub lease_exposed: Family<Dev, Counter>,
    pub yield_seconds: Family<Dev, CounterF>,
    pub yielding: Family<Dev, Gauge>,
    pub store_up: Family<Dev, Gauge>,
    /// What the last scan could not read (its rows are kept).
    pub scan_unreadable: Family<Dev, Gauge>,
    /// Configured trees that cannot be watched (missing, a symlink, …).
    pub unwatched_trees: Gauge,
    pub last_refresh: Family<Dev, Gauge>,
    pub last_sample: Family<Dev, Gauge>,
    pub requests: Family<Verb, Counter>,
    pub build: Family<Build, Gauge>,
    pub backend: Family<Backend, Gauge>,
    /// System calls refused (by a sandbox or the kernel), see `refused`.
    pub syscalls_refused: Family<SyscallLabel, Counter>,
    /// Fleet coordination (slots, etcd).
    pub fleet: super::fleet_metrics::FleetMetrics,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registry::with_prefix("refreshd");
        let m = Metrics {
            registry: Registry::default(),
            stale_throughput: Family::default(),
            fresh_throughput: Family::default(),
            until_degraded: Family::default(),
            latency: Family::default(),
            degraded: Family::default(),
            state: Family::default(),
            stale_bytes: Family::default(),
            in_progress: Family::default(),
            refreshed_bytes: Family::default(),
            yield_seconds: Family::default(),
            unwatched_trees: Gauge::default(),
            yielding: Family::default(),
            files: Family::default(),
            read_errors: Family::default(),
            lease_exposed: Family::default(),
            store_up: Family::default(),
            scan_unreadable: Family::default(),
            last_refresh: Family::default(),
            last_sample: Family::default(),
            requests: Family::default(),
            build: Family::default(),
            backend: Family::default(),
            syscalls_refused: Family::default(),
            fleet: Default::default(),
        };
        m.fleet.register(&mut r);
        m.register_sample_series(&mut r);
        m.register_refresh_series(&mut r);
        m.register_process_series(&mut r);
        m.sync_refusals();
        m.build
            .get_or_create(&Build {
                version: env!("CARGO_PKG_VERSION").into(),
            })
            .set(1);
        Metrics { registry: r, ..m }
    }

    /// Brings the refused-call counters up to the process's counts.
    pub fn sync_refusals(&self) {
        for (call, n) in crate::io::refused::counts() {
            let c = self.syscalls_refused.get_or_create(&SyscallLabel {
                call: call.label().into(),
            });
            c.inc_by(n.saturating_sub(c.get()));
        }
    }

    /// The drive's forecast after a round.
    pub fn forecast(&self, device: &str, f: Option<&crate::policy::forecast::Forecast>) {
        let v = match f {
            None => f64::NAN,
            Some(f) => f.seconds_until_degraded.unwrap_or(f64::INFINITY),
        };
        self.until_degraded
            .get_or_create(&Dev {
                device: device.into(),
            })
            .set(v);
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }

    /// Creates every series a drive has, counters at 0.
    pub fn init_drive(&self, device: &str) {
        let dev = Dev {
            device: device.into(),
        };
        self.set_state(device, HealthState::Unknown);
        // Measurements: NaN until the first sample (a scrape before it
        // sees every series, and no value).
        self.stale_throughput.get_or_create(&dev).set(f64::NAN);
        self.fresh_throughput.get_or_create(&dev).set(f64::NAN);
        self.until_degraded.get_or_create(&dev).set(f64::NAN);
        self.stale_bytes.get_or_create(&dev).set(0);
        self.scan_unreadable.get_or_create(&dev).set(0);
        self.in_progress.get_or_create(&dev).set(0);
        self.refreshed_bytes.get_or_create(&dev).inc_by(0);
        self.read_errors.get_or_create(&dev).inc_by(0);
        self.lease_exposed.get_or_create(&dev).inc_by(0);
        self.yield_seconds.get_or_create(&dev).inc_by(0.0);
        self.yielding.get_or_create(&dev).set(0);
        // Timestamps: 0 until the first.
        self.last_sample.get_or_create(&dev).set(0);
        self.last_refresh.get_or_create(&dev).set(0);
        self.set_latency(device, None, None);
        // Failures by their stable reason, so `increase()` sees the first.
        let failed = crate::engine::report::FailKind::ALL.map(|k| ("failed", k.as_str()));
        let interrupted =
            crate::engine::report::Interruption::ALL.map(|c| ("interrupted", c.as_str()));
        for (outcome, reason) in [("refreshed", "")]
            .into_iter()
            .chain(interrupted)
            .chain(failed)
        {
            self.files
                .get_or_create(&DevOutcome {
                    device: device.into(),
                    outcome: outcome.into(),
                    reason: reason.into(),
                })
                .inc_by(0);
        }
    }

    /// Brings the yield series up to the engine's account.
    pub fn set_pace(&self, device: &str, pace: &crate::engine::pacing::pace::PaceStatus) {
        let dev = Dev {
            device: device.into(),
        };
        let c = self.yield_seconds.get_or_create(&dev);
        let behind = pace.yielded().as_secs_f64() - c.get();
        if behind > 0.0 {
            c.inc_by(behind);
        }
        self.yielding
            .get_or_create(&dev)
            .set(i64::from(pace.yielding().is_some()));
    }

    pub fn set_stale_bytes(&self, device: &str, bytes: u64) {
        self.stale_bytes
            .get_or_create(&Dev {
                device: device.into(),
            })
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Counts one file's refresh: outcome and reason, bytes, read errors,
    /// writes exposed by a revoked lease.
    pub fn record_report(&self, device: &str, report: &FileReport) {
        let dev = Dev {
            device: device.into(),
        };
        let (outcome, reason) = match &report.outcome {
            Outcome::Refreshed | Outcome::WouldRefresh => ("refreshed", String::new()),
            Outcome::Skipped { reason, .. } => (
                "skipped",
                serde_json::to_value(reason)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
            ),
            Outcome::Interrupted { cause, .. } => ("interrupted", cause.as_str().to_string()),
            Outcome::Failed { kind, .. } => ("failed", kind.as_str().to_string()),
        };
        self.files
            .get_or_create(&DevOutcome {
                device: device.into(),
                outcome: outcome.into(),
                reason,
            })
            .inc();
        self.refreshed_bytes
            .get_or_create(&dev)
            .inc_by(report.bytes_refreshed);
        self.read_errors
            .get_or_create(&dev)
            .inc_by(report.read_errors.len() as u64);
        let exposed: u64 = report.lease_exposed.iter().map(|r| r.len).sum();
        self.lease_exposed.get_or_create(&dev).inc_by(exposed);
    }

    pub fn set_state(&self, device: &str, state: HealthState) {
        for st in [
            HealthState::Unknown,
            HealthState::Unjudged,
            HealthState::Slow,
            HealthState::Healthy,
            HealthState::Suspect,
            HealthState::Degraded,
            HealthState::NotRecovering,
            HealthState::CannotSample,
        ] {
            self.state
                .get_or_create(&DevState {
                    device: device.into(),
                    state: st.name().into(),
                })
                .set(i64::from(st == state));
        }
        self.degraded
            .get_or_create(&Dev {
                device: device.into(),
            })
            .set(i64::from(state == HealthState::Degraded));
    }

    pub fn sampled(&self, device: &str, s: &DriveSample, at: i64) {
        let dev = Dev {
            device: device.into(),
        };
        // NaN (no value, never a stale one) when there was nothing to
        // measure: the series is always there.
        self.stale_throughput
            .get_or_create(&dev)
            .set(s.stale.median_bps().unwrap_or(f64::NAN));
        self.fresh_throughput.get_or_create(&dev).set(
            s.fresh
                .as_ref()
                .and_then(|f| f.median_bps())
                .unwrap_or(f64::NAN),
        );
        self.set_latency(
            device,
            s.stale.latency_ms,
            s.fresh.as_ref().and_then(|f| f.latency_ms),
        );
        self.last_sample.get_or_create(&dev).set(at);
    }

    /// The small-read latency quantiles of stale and fresh data; NaN
    /// (no value, never a stale one) where there is none.
    fn set_latency(
        &self,
        device: &str,
        stale: Option<crate::sampler::Percentiles>,
        fresh: Option<crate::sampler::Percentiles>,
    ) {
        for (data, p) in [("stale", stale), ("fresh", fresh)] {
            let nan = f64::NAN;
            let q = p.map_or([nan; 4], |p| [p.p25, p.p50, p.p75, p.p95]);
            for (quantile, ms) in ["0.25", "0.5", "0.75", "0.95"].into_iter().zip(q) {
                self.latency
                    .get_or_create(&DevQuantile {
                        device: device.into(),
                        data: data.into(),
                        quantile: quantile.into(),
                    })
                    .set(ms / 1e3);
            }
        }
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests;
