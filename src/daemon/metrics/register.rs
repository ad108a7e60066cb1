//! The families registered: what sampling measured and judged, what
//! refreshing did, and the process's own series.

use prometheus_client::registry::{Registry, Unit};

use super::Metrics;

impl Metrics {
    /// What the sampling rounds measured and judged.
    pub(super) fn register_sample_series(&self, r: &mut Registry) {
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
    pub(super) fn register_refresh_series(&self, r: &mut Registry) {
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
            "When the last refresh of the drive finished (Unix time; 0: never)",
            Unit::Seconds,
            self.last_refresh.clone(),
        );
        r.register_with_unit(
            "last_sample_timestamp",
            "When the drive was last sampled (Unix time; 0: not yet)",
            Unit::Seconds,
            self.last_sample.clone(),
        );
    }

    /// The process: requests, build, backend, refused calls.
    pub(super) fn register_process_series(&self, r: &mut Registry) {
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
}
