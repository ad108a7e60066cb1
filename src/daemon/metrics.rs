//! OpenMetrics families (docs/DESIGN.md "Metrics"): per drive, labelled
//! `device` (the kernel name, `+`-joined for multi-device filesystems);
//! never a file name in a label.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use crate::engine::{FileReport, Outcome};
use crate::policy::HealthState;
use crate::sampler::DriveSample;

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

    /// What the sampling rounds measured and judged.
    fn register_sample_series(&self, r: &mut Registry) {
        r.register_with_unit(
            "stale_read_throughput",
            "Median sequential O_DIRECT read throughput of stale data in the last sample",
            Unit::Other("bytes_per_second".into()),
            self.stale_throughput.clone(),
        );
        r.register(
            "drive_seconds_until_degraded",
            "Forecast: seconds until the drive's stale data reads below a floor, \
             from how it slows with age (NaN: not enough ages measured; +Inf: not within 3 years)",
            self.until_degraded.clone(),
        );
        r.register_with_unit(
            "fresh_read_throughput",
            "Median sequential read throughput of the fresh reference (canary) in the last sample",
            Unit::Other("bytes_per_second".into()),
            self.fresh_throughput.clone(),
        );
        r.register_with_unit(
            "sample_read_latency",
            "4 KiB read latency at queue depth 1 in the last sample, by quantile",
            Unit::Seconds,
            self.latency.clone(),
        );
        r.register(
            "drive_degraded",
            "1 when the drive is confirmed degraded",
            self.degraded.clone(),
        );
        r.register(
            "drive_state",
            "The drive's state (unknown, unjudged, slow, healthy, suspect, degraded, not_recovering, cannot_sample): 1 for the current one",
            self.state.clone(),
        );
        r.register_with_unit(
            "stale",
            "Bytes of stale data (older than stale_after) tracked on the drive",
            Unit::Bytes,
            self.stale_bytes.clone(),
        );
    }

    /// What the refreshes did, and the drive's bookkeeping.
    fn register_refresh_series(&self, r: &mut Registry) {
        r.register(
            "refresh_in_progress",
            "1 while a refresh runs on the drive",
            self.in_progress.clone(),
        );
        r.register_with_unit(
            "refreshed",
            "Bytes rewritten or relocated",
            Unit::Bytes,
            self.refreshed_bytes.clone(),
        );
        r.register(
            "refresh_files",
            "Files handled by a refresh, by outcome (refreshed, skipped, interrupted, failed) and reason",
            self.files.clone(),
        );
        r.register(
            "read_errors",
            "Unreadable ranges found (never written)",
            self.read_errors.clone(),
        );
        r.register_with_unit(
            "lease_exposed",
            "Bytes written back after the kernel could have revoked the write lease: \
             they may have overwritten another process's data (the file is reported failed)",
            Unit::Bytes,
            self.lease_exposed.clone(),
        );
        r.register_with_unit(
            "yield",
            "Time the drive's refresh spent sharing the drive with an application's \
             reads (paced by the application's latency, never below the yield floor)",
            Unit::Seconds,
            self.yield_seconds.clone(),
        );
        r.register(
            "yielding",
            "1 while the drive's refresh shares the drive with an application's reads",
            self.yielding.clone(),
        );
        r.register(
            "unwatched_trees",
            "Configured trees the daemon cannot watch (refreshctl status says why)",
            self.unwatched_trees.clone(),
        );
        r.register(
            "scan_unreadable",
            "Directories or entries the last scan of the drive could not read: their files \
             keep their records (the log says why)",
            self.scan_unreadable.clone(),
        );
        r.register(
            "store_up",
            "1 when the drive's worker has its state database open; 0 while it retries",
            self.store_up.clone(),
        );
        r.register_with_unit(
            "last_refresh_timestamp",
            "When the last refresh of the drive finished (Unix time)",
            Unit::Seconds,
            self.last_refresh.clone(),
        );
        r.register_with_unit(
            "last_sample_timestamp",
            "When the drive was last sampled (Unix time)",
            Unit::Seconds,
            self.last_sample.clone(),
        );
    }

    /// The process: requests, build, backend, refused calls.
    fn register_process_series(&self, r: &mut Registry) {
        r.register(
            "control_requests",
            "Control socket requests by verb and result",
            self.requests.clone(),
        );
        r.register(
            "build_info",
            "Version of the running daemon",
            self.build.clone(),
        );
        r.register(
            "io_backend_info",
            "The I/O backend in use",
            self.backend.clone(),
        );
        r.register(
            "syscall_refused",
            "System calls refused by a sandbox or the kernel (the log says once what each costs)",
            self.syscalls_refused.clone(),
        );
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
        for (data, m) in [("stale", Some(&s.stale)), ("fresh", s.fresh.as_ref())] {
            if let Some(p) = m.and_then(|m| m.latency_ms) {
                for (q, v) in [
                    ("0.25", p.p25),
                    ("0.5", p.p50),
                    ("0.75", p.p75),
                    ("0.95", p.p95),
                ] {
                    self.latency
                        .get_or_create(&DevQuantile {
                            device: device.into(),
                            data: data.into(),
                            quantile: q.into(),
                        })
                        .set(v / 1e3);
                }
            }
        }
        self.last_sample.get_or_create(&dev).set(at);
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests;
