//! The refresh engine: rewrites a file's data in place with the same bytes,
//! through O_DIRECT and io_uring, throttled, under the safety contract.
//!
//! An [`Engine`] owns one I/O thread with its ring, its registered buffers
//! and its throttle; files are sent to it one at a time. Typically there is
//! one engine per physical drive.

pub mod attrwatch;
pub mod driver;
pub mod exec;
#[cfg(test)]
mod fault_tests;
pub mod guard;
pub mod inplace;
pub mod lease;
pub mod pace;
pub mod plan;
pub mod relocate;
pub mod report;
#[cfg(test)]
pub(crate) mod test_hooks;
pub mod throttle;
#[cfg(test)]
mod times_tests;

use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

pub use crate::io::backend::{BackendChoice, BackendKind};
pub use guard::Target;
pub use report::{FileReport, Outcome, SkipReason};

/// Default chunk: large enough for full device bandwidth, small enough to
/// stop quickly on a lease break.
pub const DEFAULT_CHUNK: u64 = 1 << 20;
/// Default number of chunks in flight.
pub const DEFAULT_DEPTH: usize = 8;

/// Test-only switches that turn single guards off, so that tests can show
/// what each guard protects. Never set by the command line or the config.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default)]
pub struct UnsafeSwitches {
    /// Do not take the write lease: concurrent writes can be lost.
    pub no_lease: bool,
    /// Write holes and unwritten extents too: allocation changes.
    pub write_holes: bool,
    /// Write the unaligned tail as a full direct block: the file grows.
    pub direct_tail: bool,
    /// Do not restore atime/mtime.
    pub no_time_restore: bool,
    /// Do not check free space on copy-on-write filesystems.
    pub no_space_check: bool,
    /// Write buffers whose read failed.
    pub write_failed_reads: bool,
    /// No bound on the bytes of writes in flight under a lease.
    pub unbounded_writes: bool,
    /// Relocation: no layout re-check before FIDEDUPERANGE (a hole punched
    /// meanwhile is filled with allocated zeros).
    pub no_layout_recheck: bool,
    /// Write files in place even when the kernel would strip their setuid
    /// bit or file capabilities.
    pub strip_privileges: bool,
    /// Put the saved times back even when another process changed the
    /// file's times or attributes meanwhile.
    pub ignore_others_times: bool,
}

/// How an engine refreshes files.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Bytes per second, or unthrottled.
    pub rate: Option<u64>,
    /// Largest chunk (a power of two ≥ 4096).
    pub chunk: u64,
    /// Chunks in flight.
    pub depth: usize,
    pub backend: BackendChoice,
    /// Read every written chunk back and compare.
    pub verify: bool,
    /// Check and plan only.
    pub dry_run: bool,
    /// Rewrite shared (reflinked, snapshotted) extents too.
    pub rewrite_shared: bool,
    /// Keep at least this much free space on copy-on-write filesystems
    /// (default: 5 % of the filesystem).
    pub min_free: Option<u64>,
    /// Set to stop after in-flight I/O (Ctrl-C, shutdown).
    pub cancel: Arc<AtomicBool>,
    /// In place, relocation, or in place with relocation for files in use.
    pub strategy: crate::config::Strategy,
    /// Largest relocation unit.
    pub relocate_chunk: u64,
    /// Where in-place refreshes record what to put back after a crash
    /// (see `inventory::journal`); `None`: a killed run leaves the mtime
    /// of the file it was writing moved.
    pub journal: Option<Arc<crate::inventory::journal::Journal>>,
    /// Yielding to other I/O on the drive, and request priorities.
    pub pace: PaceSettings,
    /// Whether and why the engine is yielding now (read by the daemon).
    pub pace_status: Arc<pace::PaceStatus>,
    #[doc(hidden)]
    pub unsafe_switches: UnsafeSwitches,
}

/// How an engine yields to other I/O (see [`pace`]).
#[derive(Debug, Clone, Copy)]
pub struct PaceSettings {
    pub mode: crate::config::YieldMode,
    pub priority: crate::config::IoPriority,
    /// The rate never drops below this while yielding.
    pub floor: u64,
}

impl Default for PaceSettings {
    fn default() -> Self {
        PaceSettings {
            mode: crate::config::YieldMode::Auto,
            priority: crate::config::IoPriority::Idle,
            floor: pace::DEFAULT_FLOOR,
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            rate: None,
            chunk: DEFAULT_CHUNK,
            depth: DEFAULT_DEPTH,
            backend: BackendChoice::Auto,
            verify: false,
            dry_run: false,
            rewrite_shared: false,
            min_free: None,
            cancel: Arc::new(AtomicBool::new(false)),
            strategy: crate::config::Strategy::Auto,
            relocate_chunk: relocate::DEFAULT_RELOCATE_CHUNK,
            journal: None,
            pace: PaceSettings::default(),
            pace_status: Arc::default(),
            unsafe_switches: UnsafeSwitches::default(),
        }
    }
}

/// Error starting an engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("setting up io_uring: {0}")]
    Backend(#[source] std::io::Error),
    #[error("invalid engine settings: {0}")]
    Config(String),
    #[error("starting the I/O thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Progress callback: bytes just refreshed.
pub type Progress = Box<dyn FnMut(u64) + Send>;

struct Job {
    target: Target,
    /// Planned bytes already done by an interrupted run.
    skip: u64,
    progress: Option<Progress>,
    reply: mpsc::Sender<FileReport>,
}

/// An I/O thread with its ring, buffers and throttle.
#[derive(Debug)]
pub struct Engine {
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    backend: BackendKind,
    fallback: Option<String>,
}

impl Engine {
    pub fn start(cfg: EngineConfig) -> Result<Engine, EngineError> {
        if cfg.chunk < 4096 || !cfg.chunk.is_power_of_two() {
            return Err(EngineError::Config(format!(
                "chunk {} must be a power of two ≥ 4096",
                cfg.chunk
            )));
        }
        if cfg.depth == 0 || cfg.depth > 256 {
            return Err(EngineError::Config(format!(
                "depth {} must be 1..=256",
                cfg.depth
            )));
        }
        crate::io::syscalls::ignore_sigio();
        let (mut io, fallback) = driver::IoThread::new(&cfg)?;
        let kind = io.kind();
        if let Some(why) = &fallback {
            tracing::warn!("{why}");
        }
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("refreshd-io".into())
            .spawn(move || {
                for mut job in rx {
                    let report = io.refresh(&job.target, &cfg, job.skip, job.progress.as_mut());
                    let _ = job.reply.send(report);
                }
            })
            .map_err(EngineError::Thread)?;
        Ok(Engine {
            tx: Some(tx),
            thread: Some(thread),
            backend: kind,
            fallback,
        })
    }

    /// Which backend the engine uses.
    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// Why io_uring is not used, if it is not.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Queues a file; the report arrives on the returned channel.
    pub fn submit(&self, target: Target, progress: Option<Progress>) -> mpsc::Receiver<FileReport> {
        self.submit_resuming(target, 0, progress)
    }

    /// Like [`Engine::submit`], skipping the first `skip` planned bytes
    /// (done by an interrupted run of the unchanged file).
    pub fn submit_resuming(
        &self,
        target: Target,
        skip: u64,
        progress: Option<Progress>,
    ) -> mpsc::Receiver<FileReport> {
        let (reply, rx) = mpsc::channel();
        let display = target.display.clone();
        let job = Job {
            target,
            skip,
            progress,
            reply,
        };
        if let Some(tx) = &self.tx {
            if let Err(mpsc::SendError(job)) = tx.send(job) {
                let _ = job.reply.send(FileReport::new(
                    display,
                    Outcome::Failed {
                        kind: crate::engine::report::FailKind::Internal,
                        reason: "the I/O thread has stopped".into(),
                    },
                ));
            }
        }
        rx
    }

    /// Refreshes one file and waits for the result.
    pub fn refresh(&self, target: Target, progress: Option<Progress>) -> FileReport {
        let display = target.display.clone();
        self.submit(target, progress).recv().unwrap_or_else(|_| {
            FileReport::new(
                display,
                Outcome::Failed {
                    kind: crate::engine::report::FailKind::Internal,
                    reason: "the I/O thread has stopped".into(),
                },
            )
        })
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
