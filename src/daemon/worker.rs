//! One worker thread per drive: scan its trees, sample it, judge it, and
//! refresh its plan when it is degraded (or when asked), throttled, inside
//! the window, one drive at a time up to `max_active_drives`, pausable,
//! checkpointed. Blocking work lives here, never on tokio's threads.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::Settings;
use crate::drive::Drive;
use crate::engine::{Engine, EngineConfig, FileReport, Outcome};
use crate::inventory::{self, FileRecord, Store};
use crate::policy::{self, Health, HealthState, Judgement, Plan, PlanRules, Thresholds};
use crate::sampler::{self, DriveSample, SampleOptions};

use super::Shared;

/// A refresh in progress.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Progress {
    pub files_total: u64,
    pub files_done: u64,
    pub bytes_total: u64,
    pub bytes_done: u64,
    pub started: i64,
    pub forced: bool,
    pub eta_seconds: Option<f64>,
}

/// The last sampling round.
#[derive(Debug, Clone, Serialize)]
pub struct SampleRecord {
    pub at: i64,
    pub sample: DriveSample,
    pub judgement: Judgement,
}

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
    /// `now` requests received and completed (for `--wait`).
    pub requests: u64,
    pub completed: u64,
    #[serde(skip)]
    pub pending: Option<NowRequest>,
    /// Bytes refreshed today (UTC day number, bytes).
    #[serde(skip)]
    pub today: (i64, u64),
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
        }
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
    /// Waits for a permit unless `stop` says to give up.
    fn acquire(&self, max: usize, stop: &dyn Fn() -> bool) -> bool {
        let mut n = self.active.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if stop() {
                return false;
            }
            if *n < max.max(1) {
                *n += 1;
                return true;
            }
            n = self
                .cv
                .wait_timeout(n, Duration::from_millis(200))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn release(&self) {
        let mut n = self.active.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        self.cv.notify_all();
    }
}

fn local_minute() -> u16 {
    // SAFETY: localtime_r with valid pointers; time(NULL) cannot fail.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return 0;
        }
        (tm.tm_hour * 60 + tm.tm_min) as u16
    }
}

fn settings_for(shared: &Shared, cell: &DriveCell) -> Settings {
    let cfg = shared.config();
    cfg.paths
        .iter()
        .find(|p| cell.roots.first() == Some(&p.path))
        .map_or_else(|| cfg.defaults.clone(), |p| p.settings.clone())
}

/// The worker's loop; returns at shutdown.
pub fn run(shared: Arc<Shared>, cell: Arc<DriveCell>) {
    let span = tracing::info_span!("drive", device = %cell.label);
    let _e = span.enter();
    let Some(mut store) = open_store(&shared, &cell) else {
        return; // stopping
    };
    let mut next_scan = Instant::now();
    let mut next_sample = Instant::now();
    let mut files: Vec<FileRecord> = vec![];
    // Files just refreshed: the next round measures them (did it help?).
    let mut verify: Option<Vec<FileRecord>> = None;
    while !shared.stopping() {
        let s = settings_for(&shared, &cell);
        let now = Instant::now();
        if now >= next_scan {
            files = scan(&mut store, &cell, &s);
            next_scan = now + s.scan_interval;
        }
        let request = cell.lock().pending.clone();
        if now >= next_sample || request.is_some() {
            let state = match verify.take() {
                // Rewritten data counts as stale here: it is what is judged.
                Some(done) => sample(
                    &shared,
                    &cell,
                    &done,
                    &Settings {
                        stale_after: Duration::ZERO,
                        ..s.clone()
                    },
                ),
                None => sample(&shared, &cell, &files, &s),
            };
            next_sample = Instant::now()
                + if state == HealthState::Suspect {
                    // Confirm soon instead of in hours.
                    (s.sample_interval / 6).max(Duration::from_secs(1))
                } else {
                    s.sample_interval
                };
        }
        let (want, forced, only) = {
            let st = cell.lock();
            let force = st.pending.as_ref().is_some_and(|r| r.force);
            let only = st.pending.as_ref().and_then(|r| r.path.clone());
            (st.health.wants_refresh() || force, force, only)
        };
        let in_window = s.window.contains(local_minute());
        let paused = cell.paused.load(Ordering::Relaxed);
        if want && in_window && !paused && !shared.stopping() {
            let (finished, done) =
                refresh(&shared, &cell, &store, &files, &s, forced, only.as_deref());
            if finished {
                verify = Some(done);
                {
                    let mut st = cell.lock();
                    st.health.refreshed();
                    st.pending = None;
                    st.completed = st.requests;
                }
                // Verify at once: rescan (ages) and sample again.
                files = scan(&mut store, &cell, &s);
                next_sample = Instant::now();
                continue;
            }
        } else if !want {
            // Nothing to do for the request beyond sampling.
            let mut st = cell.lock();
            if st.pending.take().is_some() {
                st.completed = st.requests;
            }
        } else if !in_window && request.is_some() {
            let mut st = cell.lock();
            st.error = Some("outside the maintenance window: the refresh waits for it".into());
        }
        // Sleep until the next deadline or a poke.
        let deadline = next_scan.min(next_sample);
        let st = cell.lock();
        if st.pending.is_some() && !paused && in_window {
            continue;
        }
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(30));
        let _ = cell.wake.wait_timeout(st, wait);
    }
}

/// Opens the state database, retrying with backoff (1 s doubling to 60 s)
/// while it fails: the drive shows the error in `refreshctl status` and
/// `refreshd_store_up{device} 0` until it opens. `None` when stopping.
fn open_store(shared: &Shared, cell: &DriveCell) -> Option<Store> {
    let mut backoff = Duration::from_secs(1);
    let up = shared.metrics.store_up.get_or_create(&super::metrics::Dev {
        device: cell.label.clone(),
    });
    loop {
        match Store::open(&shared.config().state_dir) {
            Ok(s) => {
                up.set(1);
                let mut st = cell.lock();
                if st
                    .error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("state database"))
                {
                    st.error = None;
                }
                return Some(s);
            }
            Err(e) => {
                up.set(0);
                tracing::error!("{e}; retrying in {backoff:?}");
                let mut st = cell.lock();
                st.error = Some(format!("state database: {e} (retrying in {backoff:?})"));
                let (_st, _) = cell
                    .wake
                    .wait_timeout(st, backoff)
                    .unwrap_or_else(|e| e.into_inner());
            }
        }
        if shared.stopping() {
            return None;
        }
        backoff = (backoff * 2).min(Duration::from_secs(60));
    }
}

/// The inode generation of a file just refreshed (kept in the inventory
/// with its identity; reading it at scan time would cost an open per file).
fn generation_of(f: &FileRecord) -> Option<u32> {
    let fd = rustix::fs::openat2(
        rustix::fs::CWD,
        &f.path,
        rustix::fs::OFlags::RDONLY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC
            | rustix::fs::OFlags::NONBLOCK,
        rustix::fs::Mode::empty(),
        rustix::fs::ResolveFlags::NO_SYMLINKS,
    )
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    if st.st_ino != f.ino || st.st_dev != f.dev {
        return None;
    }
    crate::engine::sys::inode_generation(std::os::fd::AsFd::as_fd(&fd)).ok()
}

fn scan(store: &mut Store, cell: &DriveCell, s: &Settings) -> Vec<FileRecord> {
    let mut files = vec![];
    let mut error = None;
    for root in &cell.roots {
        match store.scan(root) {
            Ok(stats) => {
                tracing::debug!(
                    files = stats.files,
                    seconds = stats.seconds,
                    "scanned {}",
                    root.display()
                );
                for p in stats.problems.iter().take(20) {
                    tracing::warn!("{p}");
                }
            }
            Err(e) => {
                tracing::error!("{e}");
                error = Some(e.to_string());
            }
        }
        match store.files(root) {
            Ok(f) => files.extend(f),
            Err(e) => error = Some(e.to_string()),
        }
    }
    let now = inventory::now_secs();
    let stale: Vec<&FileRecord> = files
        .iter()
        .filter(|f| f.data_age(now) >= s.stale_after)
        .collect();
    let mut st = cell.lock();
    st.files = files.len() as u64;
    st.stale_files = stale.len() as u64;
    st.stale_bytes = stale.iter().map(|f| f.size).sum();
    st.last_scan = Some(now);
    st.error = error;
    files
}

fn sample(shared: &Shared, cell: &DriveCell, files: &[FileRecord], s: &Settings) -> HealthState {
    let now = inventory::now_secs();
    let opts = SampleOptions {
        budget: s.sample_bytes,
        stale_after: s.stale_after,
        canary_dir: cell.roots.first().cloned(),
        min_free: s.min_free,
        seed: now as u64,
        now,
    };
    let th = Thresholds {
        min_throughput: s.min_throughput,
        min_ratio: s.min_ratio,
    };
    match sampler::sample(files, &opts) {
        Ok(sample) => {
            let j = policy::judge_sample(&sample, th);
            shared.metrics.sampled(&cell.label, &sample, now);
            let mut st = cell.lock();
            let state = st.health.observe(&j);
            tracing::info!(
                state = state.name(),
                stale_mbps = j.stale_bps.map(|b| b / 1e6),
                fresh_mbps = j.fresh_bps.map(|b| b / 1e6),
                "sampled"
            );
            shared.metrics.set_state(&cell.label, state);
            st.last_sample = Some(SampleRecord {
                at: now,
                sample,
                judgement: j,
            });
            state
        }
        Err(e) => {
            tracing::error!("sampling: {e}");
            let mut st = cell.lock();
            st.error = Some(format!("sampling: {e}"));
            st.health.state
        }
    }
}

/// Refreshes the drive's plan; true when it ran to the end, with the
/// files it refreshed.
fn refresh(
    shared: &Shared,
    cell: &DriveCell,
    store: &Store,
    files: &[FileRecord],
    s: &Settings,
    forced: bool,
    only: Option<&std::path::Path>,
) -> (bool, Vec<FileRecord>) {
    let now = inventory::now_secs();
    let day = now.div_euclid(86_400);
    let budget_left = s.daily_budget.map(|b| {
        let st = cell.lock();
        if st.today.0 == day {
            b.saturating_sub(st.today.1)
        } else {
            b
        }
    });
    // From the database, not the last scan's copy: files refreshed by an
    // earlier, interrupted run carry their new last_refresh there.
    let mut candidates: Vec<FileRecord> = vec![];
    for root in &cell.roots {
        match store.files(root) {
            Ok(f) => candidates.extend(f),
            Err(e) => tracing::warn!("{e}"),
        }
    }
    if candidates.is_empty() {
        candidates = files.to_vec();
    }
    candidates.retain(|f| only.is_none_or(|p| f.path.starts_with(p)));
    let files = &candidates;
    let plan = policy::plan(
        &candidates,
        PlanRules {
            now,
            stale_after: s.stale_after,
            min_interval: if forced {
                Duration::ZERO
            } else {
                s.min_interval
            },
            budget_left,
        },
    );
    cell.lock().plan = plan.clone();
    let mut refreshed = vec![];
    if plan.files.is_empty() {
        return (true, refreshed);
    }
    let stop = || shared.stopping() || cell.paused.load(Ordering::Relaxed);
    if !shared
        .permits
        .acquire(shared.config().max_active_drives, &stop)
    {
        return (false, refreshed);
    }
    cell.cancel.store(false, Ordering::Relaxed);
    let engine = match Engine::start(EngineConfig {
        rate: Some(s.rate),
        min_free: Some(s.min_free),
        cancel: cell.cancel.clone(),
        strategy: s.strategy,
        journal: Some(shared.journal.clone()),
        ..EngineConfig::default()
    }) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("starting the engine: {e}");
            cell.lock().error = Some(e.to_string());
            shared.permits.release();
            return (false, refreshed);
        }
    };
    shared.set_backend(engine.backend().name());
    let dev = super::metrics::Dev {
        device: cell.label.clone(),
    };
    shared.metrics.in_progress.get_or_create(&dev).set(1);
    let started = Instant::now();
    let mut progress = Progress {
        files_total: plan.files.len() as u64,
        bytes_total: plan.bytes,
        started: now,
        forced,
        ..Progress::default()
    };
    cell.lock().refresh = Some(progress.clone());
    tracing::info!(
        files = plan.files.len(),
        bytes = plan.bytes,
        forced,
        "refresh starts"
    );
    let mut finished = true;
    let roots = super::targets::Roots::open(&cell.roots);
    for entry in &plan.files {
        if stop() {
            finished = false;
            break;
        }
        let Some(rec) = files
            .iter()
            .find(|f| f.dev == entry.dev && f.ino == entry.ino)
        else {
            continue;
        };
        let skip = store.resume_point(rec).unwrap_or(0);
        if skip > 0 {
            tracing::info!(path = %rec.path.display(), skip, "resuming from checkpoint");
        }
        let Some(target) = roots.target(rec) else {
            tracing::warn!(path = %rec.path.display(), "not beneath an open tree; skipped");
            continue;
        };
        let done = Arc::new(AtomicU64::new(skip));
        let d2 = done.clone();
        let rx = engine.submit_resuming(
            target,
            skip,
            Some(Box::new(move |n| {
                d2.fetch_add(n, Ordering::Relaxed);
            })),
        );
        let base = progress.bytes_done;
        let mut last_saved = skip;
        let report: FileReport = loop {
            match rx.recv_timeout(Duration::from_millis(500)) {
                Ok(r) => break r,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    let d = done.load(Ordering::Relaxed);
                    // Checkpoint whenever there was progress (twice a
                    // second at most): resume point and "we were writing
                    // until then" for the mtime recovery above.
                    if d > last_saved {
                        let _ = store.save_checkpoint(rec, d);
                        last_saved = d;
                    }
                    let mut st = cell.lock();
                    if let Some(p) = st.refresh.as_mut() {
                        p.bytes_done = base + d;
                        let el = started.elapsed().as_secs_f64();
                        if p.bytes_done > 0 && el > 1.0 {
                            let rate = p.bytes_done as f64 / el;
                            p.eta_seconds =
                                Some(p.bytes_total.saturating_sub(p.bytes_done) as f64 / rate);
                        }
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    break FileReport::new(
                        rec.path.clone(),
                        Outcome::Failed {
                            reason: "the I/O thread stopped".into(),
                        },
                    )
                }
            }
        };
        shared.metrics.record_report(&cell.label, &report);
        progress.bytes_done = base + entry.size;
        progress.files_done += 1;
        match &report.outcome {
            Outcome::Refreshed => {
                refreshed.push(rec.clone());
                let _ = store.clear_checkpoint(rec.dev, rec.ino);
                let generation = generation_of(rec);
                let _ = store.mark_refreshed(rec.dev, rec.ino, inventory::now_secs(), generation);
                let mut st = cell.lock();
                if st.today.0 != day {
                    st.today = (day, 0);
                }
                st.today.1 += report.bytes_refreshed;
                tracing::info!(path = %rec.path.display(), bytes = report.bytes_refreshed, strategy = report.strategy, "refreshed");
            }
            Outcome::Interrupted { reason, .. } => {
                let d = done.load(Ordering::Relaxed);
                let _ = store.save_checkpoint(rec, d);
                tracing::info!(path = %rec.path.display(), done = d, %reason, "interrupted; checkpointed");
                finished = false;
                break;
            }
            Outcome::Skipped { detail, .. } => {
                // A resume point is only for the same file interrupted.
                let _ = store.clear_checkpoint(rec.dev, rec.ino);
                tracing::info!(path = %rec.path.display(), %detail, "skipped");
            }
            Outcome::Failed { reason } => {
                let _ = store.clear_checkpoint(rec.dev, rec.ino);
                tracing::warn!(path = %rec.path.display(), %reason, "failed");
            }
            Outcome::WouldRefresh => {}
        }
        cell.lock().refresh = Some(progress.clone());
    }
    drop(engine);
    shared.permits.release();
    shared.metrics.in_progress.get_or_create(&dev).set(0);
    let end = inventory::now_secs();
    if finished {
        shared.metrics.last_refresh.get_or_create(&dev).set(end);
    }
    let mut st = cell.lock();
    st.refresh = None;
    if finished {
        st.last_refresh = Some(end);
    }
    tracing::info!(
        finished,
        files = progress.files_done,
        bytes = progress.bytes_done,
        "refresh ends"
    );
    (finished, refreshed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn shared_with_state_dir(
        dir: PathBuf,
        journal: &std::path::Path,
    ) -> (Arc<Shared>, Arc<DriveCell>) {
        let cfg = Config {
            state_dir: dir,
            ..Config::default()
        };
        let cell = Arc::new(DriveCell::new("test0".into(), vec![], vec![]));
        let shared = super::super::Shared::for_tests(cfg, vec![cell.clone()], journal);
        (shared, cell)
    }

    #[test]
    fn a_store_that_fails_to_open_is_retried_shown_and_then_served() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let state = tmp.path().join("state");
        // A plain file where the state directory should be: open fails.
        std::fs::write(&state, b"not a directory").unwrap_or_else(|e| panic!("{e}"));
        let (shared, cell) = shared_with_state_dir(state.clone(), &tmp.path().join("j"));
        let (s2, c2) = (shared.clone(), cell.clone());
        let worker = std::thread::spawn(move || open_store(&s2, &c2).is_some());
        let t = Instant::now();
        while cell.lock().error.is_none() {
            assert!(t.elapsed() < Duration::from_secs(10), "no error shown");
            std::thread::sleep(Duration::from_millis(20));
        }
        let err = cell.lock().error.clone().unwrap_or_default();
        assert!(err.starts_with("state database"), "{err}");
        assert!(shared
            .metrics
            .encode()
            .contains("refreshd_store_up{device=\"test0\"} 0"));
        // The operator fixes it; the next attempt opens the store.
        std::fs::remove_file(&state).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir(&state).unwrap_or_else(|e| panic!("{e}"));
        assert!(worker.join().unwrap_or(false), "the store opened");
        assert_eq!(cell.lock().error, None, "the error is cleared");
        assert!(shared
            .metrics
            .encode()
            .contains("refreshd_store_up{device=\"test0\"} 1"));
    }
}
