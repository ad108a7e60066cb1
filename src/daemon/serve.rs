//! The daemon's life on its runtime: the sockets served, a worker thread
//! per drive, signals and systemd's watchdog, then an orderly stop.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::{control, fleet_metrics, http, worker, Shared};
use crate::config::{self, Config};

/// Asks a running daemon to stop, as SIGTERM does (for a daemon started
/// in-process by tests or another program).
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<tokio::sync::Notify>);

impl Stop {
    pub fn stop(&self) {
        // notify_one keeps a permit if nobody waits yet: never missed.
        self.0.notify_one();
    }
}

/// The daemon's listening sockets, bound before anything else is made.
pub(super) struct Bound {
    control: Option<std::os::unix::net::UnixListener>,
    metrics: Option<std::net::TcpListener>,
    /// The control socket's file, removed when the daemon ends (also when
    /// it fails to start).
    socket: PathBuf,
}

impl Bound {
    pub(super) fn bind(cfg: &Config) -> Result<Bound> {
        let metrics = if cfg.metrics_listen.is_empty() {
            None
        } else {
            let l = std::net::TcpListener::bind(&cfg.metrics_listen)
                .with_context(|| format!("metrics_listen {}", cfg.metrics_listen))?;
            l.set_nonblocking(true)?;
            Some(l)
        };
        let control = control::bind(cfg)?;
        Ok(Bound {
            control: Some(control),
            metrics,
            socket: cfg.control_socket.clone(),
        })
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        match std::fs::remove_file(&self.socket) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => tracing::warn!(
                "cannot remove the control socket {}: {e} (the next start replaces it)",
                crate::pathtext::text(&self.socket)
            ),
            _ => {}
        }
    }
}

fn notify(state: &[sd_notify::NotifyState<'_>]) {
    let _ = sd_notify::notify(state);
}

pub(super) async fn serve(
    shared: Arc<Shared>,
    cfg: Config,
    stop: Stop,
    mut bound: Bound,
) -> Result<()> {
    let Some(control) = bound.control.take() else {
        bail!("the control socket was not bound");
    };
    let listener = tokio::net::UnixListener::from_std(control)?;
    let metrics_task = if let Some(l) = bound.metrics.take() {
        let l = tokio::net::TcpListener::from_std(l)?;
        let s = shared.clone();
        Some(tokio::spawn(http::serve(
            l,
            Arc::new(move || metrics_text(&s)),
        )))
    } else {
        None
    };
    let control_task = tokio::spawn(control::serve(listener, shared.clone()));
    let threads = start_workers(&shared)?;
    tracing::info!(
        drives = shared.drives.len(),
        socket = %cfg.control_socket.display(),
        metrics = %cfg.metrics_listen,
        "refreshd running"
    );
    notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&shared.summary()),
    ]);
    until_stopped(&shared, &stop).await?;
    // Stop: in-flight I/O finishes, files are checkpointed, threads exit.
    tracing::info!("stopping");
    notify(&[sd_notify::NotifyState::Stopping]);
    stop_workers(&shared, threads).await;
    if let Some(f) = &shared.fleet {
        // The workers are done: free this host's slots now.
        f.leave(Duration::from_secs(2)).await;
    }
    control_task.abort();
    if let Some(t) = metrics_task {
        t.abort();
    }
    drop(bound); // removes the control socket
    tracing::info!("stopped");
    Ok(())
}

/// A worker thread per drive.
fn start_workers(shared: &Arc<Shared>) -> Result<Vec<JoinHandle<()>>> {
    let mut threads = vec![];
    for cell in &shared.drives {
        let (s, c) = (shared.clone(), cell.clone());
        threads.push(
            std::thread::Builder::new()
                .name(format!("refreshd-{}", cell.label))
                .spawn(move || worker::run(s, c))
                .context("starting a drive worker")?,
        );
    }
    Ok(threads)
}

/// Until SIGTERM, SIGINT or `stop`: SIGHUP reloads; systemd hears the
/// status (and the watchdog, when it asks for one) every tick.
async fn until_stopped(shared: &Shared, stop: &Stop) -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let watchdog = sd_notify::watchdog_enabled();
    let tick = watchdog.map_or(Duration::from_secs(10), |d| {
        (d / 2).max(Duration::from_millis(100))
    });
    let watchdog = watchdog.is_some();
    let mut ticker = tokio::time::interval(tick);
    loop {
        tokio::select! {
            _ = hup.recv() => reload(shared),
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            _ = stop.0.notified() => return Ok(()),
            _ = ticker.tick() => {
                let status = shared.summary();
                if watchdog {
                    notify(&[sd_notify::NotifyState::Watchdog, sd_notify::NotifyState::Status(&status)]);
                } else {
                    notify(&[sd_notify::NotifyState::Status(&status)]);
                }
            }
        }
    }
}

/// Cancels every drive's work and waits up to 4.5 s for the workers.
async fn stop_workers(shared: &Shared, threads: Vec<JoinHandle<()>>) {
    shared.stopping.store(true, Ordering::Relaxed);
    for c in &shared.drives {
        c.cancel.store(true, Ordering::Relaxed);
        c.poke();
    }
    let deadline = Instant::now() + Duration::from_millis(4500);
    for t in threads {
        while !t.is_finished() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if t.is_finished() {
            let _ = t.join();
        } else {
            tracing::warn!("a drive worker did not stop in time; exiting anyway");
        }
    }
}

/// The metrics, brought up to date for a scrape.
fn metrics_text(shared: &Shared) -> String {
    for c in &shared.drives {
        shared.metrics.set_pace(&c.label, &c.pace);
    }
    shared
        .metrics
        .fleet
        .update(shared.fleet.as_deref(), &slots(shared));
    shared.metrics.sync_refusals();
    shared.metrics.encode()
}

/// Each drive's fleet group and slot, for the fleet's series.
pub(super) fn slots(shared: &Shared) -> Vec<fleet_metrics::DriveSlot> {
    shared
        .drives
        .iter()
        .map(|c| fleet_metrics::DriveSlot {
            device: c.label.clone(),
            group: c.group.clone().unwrap_or_default(),
            slot: c.slot_reply(),
        })
        .collect()
}

/// SIGHUP: a new config replaces the old one only if it is valid.
fn reload(shared: &Shared) {
    let old = shared.config();
    let Some(path) = old.source.clone() else {
        return;
    };
    match config::load(&path) {
        Ok(new) => {
            let old_paths: Vec<&PathBuf> = old.paths.iter().map(|p| &p.path).collect();
            let new_paths: Vec<&PathBuf> = new.paths.iter().map(|p| &p.path).collect();
            if old.coordination != new.coordination {
                tracing::warn!("[coordination] changed: that takes effect at the next restart");
            }
            if old_paths != new_paths {
                tracing::warn!("the set of [[paths]] changed: that takes effect at the next restart; other settings apply now");
            }
            for (k, o, n) in [
                (
                    "state_dir",
                    old.state_dir.display().to_string(),
                    new.state_dir.display().to_string(),
                ),
                (
                    "control_socket",
                    old.control_socket.display().to_string(),
                    new.control_socket.display().to_string(),
                ),
                (
                    "metrics_listen",
                    old.metrics_listen.clone(),
                    new.metrics_listen.clone(),
                ),
            ] {
                if o != n {
                    tracing::warn!(
                        "{k} changed ({o} -> {n}): that takes effect at the next restart"
                    );
                }
            }
            *shared.config.write().unwrap_or_else(|e| e.into_inner()) = Config {
                state_dir: old.state_dir.clone(),
                control_socket: old.control_socket.clone(),
                metrics_listen: old.metrics_listen.clone(),
                coordination: old.coordination.clone(),
                ..new
            };
            tracing::info!("configuration reloaded from {}", path.display());
            for c in &shared.drives {
                c.poke();
            }
        }
        Err(e) => {
            for p in &e.problems {
                tracing::error!("{p}");
            }
            tracing::error!(
                "configuration {} rejected ({} problem(s)); still running on the previous one",
                path.display(),
                e.problems.len()
            );
        }
    }
}
