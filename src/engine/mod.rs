//! The refresh engine: rewrites a file's data in place with the same bytes,
//! through O_DIRECT and io_uring, throttled, under the safety contract.
//!
//! An [`Engine`] owns one I/O thread with its ring, its registered buffers
//! and its throttle; files are sent to it one at a time. Typically there is
//! one engine per physical drive.

pub mod driver;
pub mod exec;
#[cfg(test)]
mod fault_tests;
pub mod pacing;
pub mod report;
pub mod safety;
pub mod settings;
pub mod strategy;
#[cfg(test)]
pub(crate) mod test_hooks;
#[cfg(test)]
mod times_tests;
pub mod types;

use std::sync::mpsc;
use std::thread::JoinHandle;

pub use crate::io::backend::{BackendChoice, BackendKind};
pub use report::{FileReport, Outcome, SkipReason};
pub use safety::guard::Target;
pub use settings::{EngineConfig, EngineError, PaceSettings, Progress};
pub use types::{Strategy, UnsafeSwitches, DEFAULT_CHUNK, DEFAULT_DEPTH};

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
