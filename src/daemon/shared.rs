//! State shared by the drive workers, the control server and the metrics:
//! the daemon's `Shared`, one `DriveCell` per drive with its status, and
//! the permits that bound how many drives refresh at once.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::Config;
use crate::drive::Drive;
use crate::policy::{Health, Plan};
use crate::units::ByteSize;

/// State shared by the workers, the control server and the metrics.
#[derive(Debug)]
pub struct Shared {
    pub(crate) config: RwLock<Config>,
    pub drives: Vec<Arc<DriveCell>>,
    pub metrics: super::metrics::Metrics,
    pub permits: Permits,
    pub(crate) stopping: AtomicBool,
    pub started: Instant,
    pub(crate) backend: Mutex<Option<String>>,
    /// The crash-recovery journal every drive's engine writes to.
    pub journal: Arc<crate::engine::safety::journal::Journal>,
    /// Configured trees that could not be watched, with why.
    pub unwatched: Vec<(std::path::PathBuf, String)>,
    /// The fleet group, with `[coordination]`.
    pub fleet: Option<Arc<crate::coordination::Fleet>>,
    /// Permits per controller (`max_active_per_controller`).
    pub controllers: Mutex<std::collections::BTreeMap<String, Arc<Permits>>>,
}

impl Shared {
    /// A daemon's shared state without a daemon (unit tests of workers).
    #[cfg(test)]
    pub(crate) fn for_tests(
        cfg: Config,
        drives: Vec<Arc<DriveCell>>,
        journal_dir: &std::path::Path,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            config: RwLock::new(cfg),
            drives,
            metrics: super::metrics::Metrics::new(),
            permits: Permits::default(),
            stopping: AtomicBool::new(false),
            started: Instant::now(),
            backend: Mutex::new(None),
            journal: Arc::new(
                crate::engine::safety::journal::Journal::open(journal_dir)
                    .unwrap_or_else(|e| panic!("test journal: {e}")),
            ),
            unwatched: vec![],
            fleet: None,
            controllers: Mutex::default(),
        })
    }

    /// The permits of `controller`'s drives.
    pub fn controller_permits(&self, controller: &str) -> Arc<Permits> {
        self.controllers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(controller.to_string())
            .or_default()
            .clone()
    }

    pub fn config(&self) -> Config {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    pub(crate) fn set_backend(&self, name: &str) {
        let mut b = self.backend.lock().unwrap_or_else(|e| e.into_inner());
        if b.as_deref() != Some(name) {
            if let Some(old) = b.as_deref() {
                self.metrics
                    .backend
                    .get_or_create(&super::metrics::Backend {
                        backend: old.into(),
                    })
                    .set(0);
            }
            self.metrics
                .backend
                .get_or_create(&super::metrics::Backend {
                    backend: name.into(),
                })
                .set(1);
            *b = Some(name.to_string());
        }
    }

    /// The drive `name` names (device label, or one member's name).
    pub fn find_drive(&self, name: &str) -> Option<&Arc<DriveCell>> {
        let name = name.trim_start_matches("/dev/");
        self.drives
            .iter()
            .find(|c| c.label == name || c.drives.iter().any(|d| d.name == name || d.id == name))
    }

    /// One line for systemd's STATUS and logs.
    pub fn summary(&self) -> String {
        let mut parts = vec![];
        for c in &self.drives {
            let st = c.lock();
            let mut s = format!("{} {}", c.label, st.health.state.name());
            if let Some(p) = &st.refresh {
                s.push_str(&format!(
                    " refreshing {}/{} files",
                    p.files_done, p.files_total
                ));
            }
            if c.paused.load(Ordering::Relaxed) {
                s.push_str(" (paused)");
            }
            parts.push(s);
        }
        if parts.is_empty() {
            "no drives".into()
        } else {
            parts.join("; ")
        }
    }
}

pub use crate::protocol::replies::{Progress, RoundSummary, SampleRecord};

/// What `refreshctl now` asked for.
#[derive(Debug, Clone, Default)]
pub struct NowRequest {
    pub force: bool,
    pub path: Option<PathBuf>,
}

/// A drive's status, shared with the control server.
#[derive(Debug, Default, Serialize)]
pub struct DriveStatus {
    pub health: Health,
    pub last_sample: Option<SampleRecord>,
    pub stale_files: u64,
    pub stale_bytes: u64,
    pub files: u64,
    pub plan: Plan,
    pub refresh: Option<Progress>,
    pub last_refresh: Option<i64>,
    pub last_scan: Option<i64>,
    pub error: Option<String>,
    /// What the host can see about a slow drive (link, TRIM, model).
    pub diagnosis: Vec<String>,
    /// What the last `refreshctl now` did, in one line.
    pub last_request: Option<String>,
    /// The rounds the last answered `now` ran, counted.
    pub last_request_round: Option<RoundSummary>,
    /// The last refresh round, counted (also one that stopped early).
    pub last_round: Option<RoundSummary>,
    /// Why a wanted refresh is not running now: "budget" (the daily budget
    /// is spent: it continues the next UTC day), "window", "paused", and
    /// with a fleet "host", "health", "slot", "etcd"; or why a degraded
    /// drive wants none before its next sample: "nothing_left".
    pub waiting: Option<crate::protocol::state::Waiting>,
    /// `now` requests received and completed (for `--wait`).
    pub requests: u64,
    pub completed: u64,
    #[serde(skip)]
    pub pending: Option<NowRequest>,
    /// The age-vs-speed points of the last sampling rounds (the forecast).
    #[serde(skip)]
    pub ages: crate::policy::forecast::History,
    /// The rounds kept in the state database could not be read (a
    /// database that cannot be asked, a table of another refreshd): they
    /// are not overwritten by this run's.
    #[serde(skip)]
    pub kept_rounds_unread: bool,
    /// Bytes refreshed today, against `daily_budget`.
    #[serde(skip)]
    pub today: DailyBudget,
}

impl DriveStatus {
    /// The forecast's rounds to write to the state database after a
    /// round (`added`: it added one), unless those kept there could not
    /// be read at the start (they are not overwritten).
    pub fn rounds_to_keep(&self, added: bool) -> Option<String> {
        (added && !self.kept_rounds_unread).then(|| self.ages.to_json())
    }
}

/// Bytes refreshed per UTC day. Time is passed in (seconds since the
/// epoch), so the rollover is tested without waiting for midnight.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DailyBudget {
    day: i64,
    spent: u64,
}

impl DailyBudget {
    fn day_of(now: i64) -> i64 {
        now.div_euclid(86_400)
    }

    /// Bytes that may still be refreshed at `now` under `daily` (`None`:
    /// unlimited).
    pub fn left(&self, now: i64, daily: Option<ByteSize>) -> Option<u64> {
        let daily = daily.map(|b| b.0);
        let spent = if Self::day_of(now) == self.day {
            self.spent
        } else {
            0
        };
        daily.map(|b| b.saturating_sub(spent))
    }

    /// Counts `bytes` refreshed at `now`.
    pub fn spend(&mut self, now: i64, bytes: u64) {
        let day = Self::day_of(now);
        if day != self.day {
            *self = DailyBudget { day, spent: 0 };
        }
        self.spent += bytes;
    }
}

/// A drive and its trees.
#[derive(Debug)]
pub struct DriveCell {
    pub label: String,
    pub drives: Vec<Drive>,
    pub roots: Vec<PathBuf>,
    pub status: Mutex<DriveStatus>,
    pub wake: Condvar,
    pub paused: AtomicBool,
    /// Stops the engine's current file (pause, shutdown).
    pub cancel: Arc<AtomicBool>,
    /// Whether the drive's refresh yields to other I/O now, and how long
    /// it has in total (filled by the engine).
    pub pace: Arc<crate::engine::pacing::pace::PaceStatus>,
    /// The controller it is behind (`pci-…`, "virtual").
    pub controller: String,
    /// Its fleet group (with `[coordination]`).
    pub group: Option<String>,
    /// Its place in the fleet group while it wants a slot.
    pub slot: Mutex<Option<Arc<crate::coordination::TicketShared>>>,
}

impl DriveCell {
    pub fn new(label: String, drives: Vec<Drive>, roots: Vec<PathBuf>) -> DriveCell {
        DriveCell {
            label,
            drives,
            roots,
            status: Mutex::new(DriveStatus::default()),
            wake: Condvar::new(),
            paused: AtomicBool::new(false),
            cancel: Arc::new(AtomicBool::new(false)),
            pace: Arc::default(),
            controller: "unknown".into(),
            group: None,
            slot: Mutex::new(None),
        }
    }

    /// The drive behind `controller`.
    pub fn with_controller(self, controller: String) -> DriveCell {
        DriveCell { controller, ..self }
    }

    /// The drive in fleet group `group`.
    pub fn with_group(self, group: Option<String>) -> DriveCell {
        DriveCell { group, ..self }
    }

    /// Its slot in the fleet group, for status and metrics.
    pub fn slot_reply(&self) -> Option<crate::protocol::replies::SlotReply> {
        self.slot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|t| t.reply())
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, DriveStatus> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn poke(&self) {
        self.wake.notify_all();
    }
}

/// Counting semaphore for `max_active_drives`.
#[derive(Debug, Default)]
pub struct Permits {
    active: Mutex<usize>,
    cv: Condvar,
}

impl Permits {
    /// Waits for a permit unless `stop` says to give up. The permit is
    /// given back when the returned guard is dropped, on every path.
    pub fn acquire(&self, max: usize, stop: &dyn Fn() -> bool) -> Option<Permit<'_>> {
        let mut n = self.active.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if stop() {
                return None;
            }
            if *n < max.max(1) {
                *n += 1;
                return Some(Permit(self));
            }
            n = self
                .cv
                .wait_timeout(n, Duration::from_millis(200))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// A permit if one of `max` is free now.
    pub fn try_acquire(&self, max: usize) -> Option<Permit<'_>> {
        let mut n = self.active.lock().unwrap_or_else(|e| e.into_inner());
        if *n < max.max(1) {
            *n += 1;
            return Some(Permit(self));
        }
        None
    }

    fn release(&self) {
        let mut n = self.active.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        self.cv.notify_all();
    }

    /// Whether one of `max` is free now (taken or not later).
    pub fn free(&self, max: usize) -> bool {
        self.active() < max.max(1)
    }

    /// Permits held now.
    pub fn active(&self) -> usize {
        *self.active.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One of `max_active_drives` permits, held while a drive refreshes.
#[derive(Debug)]
pub struct Permit<'a>(&'a Permits);

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

#[cfg(test)]
mod tests;
