//! `refreshd run`: the daemon. It wires the stages together — a worker
//! thread per drive (scan → sample → judge → refresh), the control socket,
//! the metrics endpoint, signals and systemd notification — on a tokio
//! runtime that only ever waits on sockets, timers and signals.

pub mod cells;
pub mod control;
pub mod fleet_metrics;
pub mod http;
pub mod metrics;
pub mod placement;
pub mod round;
pub mod shared;
pub mod slot;
pub mod step;
pub mod targets;
pub mod topology;
pub mod worker;

mod serve;
pub use serve::Stop;
use serve::{serve, slots, Bound};

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::config::{self, Config};

pub use shared::{DriveCell, DriveStatus, Shared};

/// Holds `state_dir/refreshd.lock` (flock) for the daemon's lifetime.
#[derive(Debug)]
struct InstanceLock(#[allow(dead_code)] OwnedFd);

fn lock_state_dir(dir: &Path) -> Result<InstanceLock> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("refreshd.lock");
    let fd = rustix::fs::open(
        &path,
        rustix::fs::OFlags::CREATE | rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .with_context(|| format!("opening {}", path.display()))?;
    match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(InstanceLock(fd)),
        Err(rustix::io::Errno::WOULDBLOCK) => bail!(
            "another refreshd is running with state directory {} (it holds {})",
            dir.display(),
            path.display()
        ),
        Err(e) => Err(e).with_context(|| format!("locking {}", path.display())),
    }
}

/// Connections (control, /metrics), files and rings all take descriptors:
/// the soft limit goes up to the hard one (the unit sets LimitNOFILE=; a
/// sandbox that forbids setrlimit leaves it as it is).
fn raise_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        l.current = l.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, l) {
            tracing::debug!("raising the file limit: {e}");
        }
    }
}

/// Loads the configuration at `path` and runs the daemon until
/// SIGTERM/SIGINT (`refreshd run`).
pub fn run_file(path: &Path) -> Result<()> {
    let cfg = config::load(path).map_err(|e| anyhow::anyhow!("{e}"))?;
    run(cfg, Stop::default())
}

/// Runs the daemon with a validated configuration until SIGTERM, SIGINT
/// or `stop`.
pub fn run(cfg: Config, stop: Stop) -> Result<()> {
    // Another daemon on this state directory is the first thing to say
    // (its sockets would clash too, and that would hide the reason). The
    // lock lives inside the directory: if there is none, nobody holds it,
    // and it is made only after the sockets are bound, so a start that
    // fails on a socket (the metrics port taken) has created nothing.
    // From `bind` on, the control socket is removed on every way out.
    let early_lock = if cfg.state_dir.is_dir() {
        Some(lock_state_dir(&cfg.state_dir)?)
    } else {
        None
    };
    let bound = Bound::bind(&cfg)?;
    let _lock = match early_lock {
        Some(lock) => lock,
        None => lock_state_dir(&cfg.state_dir)?,
    };
    raise_file_limit();
    // The state database must open (and be ours) before anything starts.
    crate::inventory::Store::open(&cfg.state_dir)?;
    // Put back what a killed run moved, before any worker writes again.
    let journal = crate::engine::safety::journal::Journal::open(&cfg.state_dir)
        .with_context(|| format!("the recovery journal in {}", cfg.state_dir.display()))?;
    if let Err(e) = crate::engine::safety::journal::recover(&journal) {
        tracing::warn!("reading the recovery journal: {e}");
    }
    let (drives, unwatched) = cells::drive_cells(&cfg);
    if drives.is_empty() {
        // Up anyway: status, drives and the metrics say why, and systemd
        // does not restart-loop on a tree that is not mounted yet.
        tracing::error!(
            "none of the configured trees can be watched; running without drives (fix the trees and restart)"
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("refreshd-rt")
        .build()
        .context("starting the runtime")?;
    let fleet = start_fleet(&cfg, rt.handle());
    let shared = Arc::new(Shared {
        config: RwLock::new(cfg.clone()),
        drives,
        metrics: metrics::Metrics::new(),
        permits: shared::Permits::default(),
        stopping: AtomicBool::new(false),
        started: Instant::now(),
        backend: Mutex::new(None),
        journal: Arc::new(journal),
        unwatched,
        fleet,
        controllers: Mutex::default(),
    });
    shared
        .metrics
        .unwatched_trees
        .set(i64::try_from(shared.unwatched.len()).unwrap_or(i64::MAX));
    shared
        .metrics
        .fleet
        .init(shared.fleet.is_some(), &slots(&shared));
    rt.block_on(serve(shared, cfg, stop, bound))
}

/// Joins the fleet group (the etcd session runs on `rt`), with
/// `[coordination]`.
#[cfg(feature = "fleet")]
fn start_fleet(
    cfg: &Config,
    rt: &tokio::runtime::Handle,
) -> Option<Arc<crate::coordination::Fleet>> {
    let c = cfg.coordination.clone()?;
    tracing::info!(
        group = %c.group,
        name = %c.name,
        max_concurrent = c.max_concurrent,
        endpoints = %c.etcd_endpoints.join(","),
        "refreshes are coordinated through etcd"
    );
    Some(crate::coordination::start(c, &cfg.state_dir, rt))
}

/// Without the `fleet` feature the config refuses `[coordination]`.
#[cfg(not(feature = "fleet"))]
fn start_fleet(
    _cfg: &Config,
    _rt: &tokio::runtime::Handle,
) -> Option<Arc<crate::coordination::Fleet>> {
    None
}
