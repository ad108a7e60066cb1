//! One file, start to end, on the engine's I/O thread: open under the
//! guard → choose the strategy → run it through a per-file I/O handle →
//! finish (timestamps, sync, layout check, report) → release the lease.
//! The strategies (`inplace`, `relocate`) are siblings below this module
//! and never import each other.
//!
//! Errors stay local: the file's I/O handle is dropped (every request
//! reaped) before the lease is released, a panic in a strategy is caught
//! and reported as that file's failure, and a ring that could not be
//! drained is discarded and rebuilt before the next file.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::clock::Timestamp;
use crate::engine::pacing::pace::{DeviceCounters, Pacer, SysBlock};
use crate::engine::pacing::throttle::Throttle;
use crate::engine::report::{FailKind, FileReport, Outcome, SkipReason};
use crate::engine::safety::attrwatch::{AttrWatch, Watcher};
use crate::engine::safety::guard::{self, Opened, Refusal, Target};
use crate::engine::safety::journal::Record;
use crate::engine::safety::lease::{self, LeaseClock};
use crate::engine::settings::{EngineConfig, EngineError, Progress};
use crate::engine::strategy::{inplace, relocate, Done, FileJob};
use crate::engine::types::Strategy;
use crate::io::account::OwnIo;
use crate::io::backend::{self, BackendChoice, BackendKind};
use crate::io::buffers::BufferPool;
use crate::io::fileio::Ring;

mod finish;
use finish::{as_outcome_of_another, changed_by_another, finish, Settle};

/// The I/O thread's state: the ring with its buffers, and the throttle.
#[derive(Debug)]
pub struct IoThread {
    ring: Ring,
    throttle: Throttle,
    choice: BackendChoice,
    buffers: usize,
    chunk: usize,
    /// Own I/O counted for the pacer, and the priorities requests carry.
    own: Arc<OwnIo>,
    /// The drives behind each filesystem device seen (for the pacer).
    drives: HashMap<u64, Option<Vec<String>>>,
    /// Watches files written in place for others' attribute changes.
    watcher: Option<Watcher>,
}

impl IoThread {
    /// Builds the ring; the second value is why io_uring is not used.
    pub fn new(cfg: &EngineConfig) -> Result<(IoThread, Option<String>), EngineError> {
        let buffers = cfg.depth * if cfg.verify { 2 } else { 1 };
        let chunk = usize::try_from(cfg.chunk)
            .map_err(|_| EngineError::Config("chunk too large".into()))?;
        let pool = BufferPool::new(buffers, chunk);
        let (b, fallback) =
            backend::open_backend(cfg.backend, pool).map_err(EngineError::Backend)?;
        let own = Arc::new(OwnIo::default());
        let pacer = Pacer::new(cfg.pace, cfg.depth, own.clone(), cfg.pace_status.clone());
        Ok((
            IoThread {
                ring: Ring::new(b, own.clone()),
                throttle: Throttle::paced(cfg.chunk, pacer),
                choice: cfg.backend,
                buffers,
                chunk,
                own,
                drives: HashMap::new(),
                watcher: match Watcher::new() {
                    Ok(w) => Some(w),
                    Err(e) => {
                        tracing::warn!(
                            "no inotify instance ({e}): files cannot be rewritten in place \
                             (other processes' time changes could not be seen)"
                        );
                        None
                    }
                },
            },
            fallback,
        ))
    }

    pub fn kind(&self) -> BackendKind {
        self.ring.backend().kind()
    }

    /// Refreshes one file; a panic becomes this file's failure, and a ring
    /// left with requests in flight is replaced before the next file.
    pub fn refresh(
        &mut self,
        t: &Target,
        cfg: &EngineConfig,
        skip: u64,
        progress: Option<&mut Progress>,
    ) -> FileReport {
        // Per file, on this thread: ioprio is per thread and may change.
        self.own
            .set_write_ioprio(crate::engine::pacing::pace::write_ioprio(
                cfg.pace.priority,
                crate::io::syscalls::write_ioprio(),
            ));
        let r = catch_unwind(AssertUnwindSafe(|| {
            refresh_file(self, t, cfg, skip, progress)
        }));
        let report = r.unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            tracing::error!(path = %crate::pathtext::Log(&t.display), "internal error: {what}");
            FileReport::new(
                t.display.clone(),
                Outcome::Failed {
                    kind: FailKind::Internal,
                    reason: format!("internal error (panic): {what}"),
                },
            )
        });
        if self.ring.poisoned() {
            self.rebuild_ring();
        }
        report
    }

    /// Points the pacer at the drives of the file just opened.
    fn watch_drives(&mut self, t: &Target, dev: u64) {
        let Some(pacer) = self.throttle.pacer_mut() else {
            return;
        };
        let names = self.drives.entry(dev).or_insert_with(|| {
            let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
            let found = if major == 0 {
                // btrfs: the drives are found from the directory.
                let p = format!("/proc/self/fd/{}/.", t.dir.as_raw_fd());
                crate::drive::drives_of(Path::new(&p)).ok()
            } else {
                crate::drive::drives_of_dev(major, minor)
            };
            found.map(|v| v.into_iter().map(|d| d.name).collect())
        });
        let counters = names
            .as_deref()
            .and_then(|n| SysBlock::new(Path::new("/sys"), n))
            .map(|s| Box::new(s) as Box<dyn DeviceCounters>);
        pacer.set_device(counters);
    }

    fn rebuild_ring(&mut self) {
        tracing::warn!(
            "discarding the I/O ring (requests could not be reaped); building a new one"
        );
        let pool = BufferPool::new(self.buffers, self.chunk);
        match backend::open_backend(self.choice, pool) {
            Ok((b, _)) => self.ring = Ring::new(b, self.own.clone()),
            Err(e) => {
                // Keep the poisoned ring: every later file fails cleanly
                // ("the I/O ring is broken") instead of reusing it.
                tracing::error!("building a new I/O ring: {e}");
            }
        }
    }
}

fn open(t: &Target, cfg: &EngineConfig) -> Result<(Opened, bool), Box<FileReport>> {
    let sw = cfg.unsafe_switches;
    // relocate: no lease (others may keep the file open). auto: in place
    // under a lease when we can have one, relocation when someone else has
    // the file open.
    let lease = cfg.strategy != Strategy::Relocate && !sw.no_lease();
    let mut relocate = cfg.strategy == Strategy::Relocate;
    let opened = match guard::open(t, lease) {
        Err(Refusal::Skip(SkipReason::InUse, _)) if cfg.strategy == Strategy::Auto => {
            relocate = true;
            guard::open(t, false)
        }
        other => other,
    };
    // A write would strip its setuid bit or file capabilities: never
    // written in place; relocated (no write of the file) or skipped.
    let opened = match opened {
        Ok(o) if !relocate && !sw.strip_privileges() && o.strips.is_some() => {
            let what = o.strips.unwrap_or_default();
            if cfg.strategy == Strategy::Auto {
                release(o);
                relocate = true;
                guard::open(t, false)
            } else {
                release(o);
                Err(Refusal::Skip(
                    SkipReason::Privileges,
                    format!(
                        "a write would make the kernel strip {what}; refreshed only by \
                         relocation (--strategy auto or relocate)"
                    ),
                ))
            }
        }
        other => other,
    };
    match opened {
        Ok(o) => Ok((o, relocate)),
        Err(Refusal::Skip(reason, detail)) => {
            tracing::debug!(reason = reason.as_str(), %detail, "skipped");
            Err(Box::new(FileReport::skipped(
                t.display.clone(),
                reason,
                detail,
            )))
        }
        Err(Refusal::Fail(reason)) => {
            tracing::warn!(%reason, "failed");
            Err(Box::new(FileReport::new(
                t.display.clone(),
                Outcome::failed(FailKind::Io, reason),
            )))
        }
    }
}

fn refresh_file(
    io: &mut IoThread,
    t: &Target,
    cfg: &EngineConfig,
    skip: u64,
    progress: Option<&mut Progress>,
) -> FileReport {
    let start = Instant::now();
    let span = tracing::debug_span!("refresh", path = %crate::pathtext::Log(&t.display));
    let _enter = span.enter();
    // Opening and planning read metadata (inodes, extent trees) and the
    // end syncs it: our own I/O, not countable per request. The pacer
    // leaves what the drive counts meanwhile out, so it is not taken for
    // an application.
    let (opened, relocate) = match io.throttle.uncounted(|| open(t, cfg)) {
        Ok(x) => x,
        Err(report) => return *report,
    };
    io.watch_drives(t, opened.meta.dev);
    let mut report = new_report(t, &opened, io.kind(), cfg);
    let mut noop = |_: u64| {};
    let progress: &mut dyn FnMut(u64) = match progress {
        Some(p) => p,
        None => &mut noop,
    };
    let fd = opened.fd.as_fd();
    let mut clock = LeaseClock::new(
        fd,
        opened.leased,
        opened.lease_taken_at,
        lease::lease_break_time(),
    );
    let mut record: Option<Record> = None;
    let mut attrs = if relocate {
        None
    } else {
        watch_attrs(
            io.watcher.as_ref(),
            fd,
            (opened.meta.mtime, opened.meta.ctime),
        )
    };
    let job = FileJob {
        target: t,
        opened: &opened,
        cfg,
        skip,
        throttle: &mut io.throttle,
        clock: &mut clock,
        report: &mut report,
        progress,
        record: &mut record,
        attrs: &mut attrs,
    };
    let done = run_in_handle(&mut io.ring, fd, relocate, job);
    report.outcome = io.throttle.uncounted(|| {
        finish(
            &opened,
            &clock,
            done,
            &mut report,
            cfg,
            Settle {
                record: &mut record,
                attrs: attrs.as_mut(),
            },
        )
    });
    let evidence = changed_by_another(&opened, &clock, relocate, &mut attrs);
    report.outcome = as_outcome_of_another(
        std::mem::replace(&mut report.outcome, Outcome::Refreshed),
        evidence,
        &mut report.read_errors,
    );
    drop(attrs);
    release(opened);
    report.elapsed_s = start.elapsed().as_secs_f64();
    match &report.outcome {
        // The caller (the daemon's round, the one-shot's report) says what
        // became of the file, once; here only for debugging.
        Outcome::Refreshed => tracing::debug!(bytes = report.bytes_refreshed, "refreshed"),
        other => tracing::debug!(outcome = ?other, "not refreshed"),
    }
    report
}

/// The report a refresh starts from: what was opened, how.
fn new_report(t: &Target, opened: &Opened, backend: BackendKind, cfg: &EngineConfig) -> FileReport {
    let mut report = FileReport::new(t.display.clone(), Outcome::Refreshed);
    report.backend = Some(backend);
    report.filesystem = Some(opened.fs);
    report.size = opened.meta.size;
    report.verified = cfg.verify;
    report.dev_ino = Some((opened.meta.dev, opened.meta.ino));
    report.generation = opened.generation;
    report
}

/// Other processes' attribute changes to an in-place refresh's file.
fn watch_attrs<'w>(
    watcher: Option<&'w Watcher>,
    fd: std::os::fd::BorrowedFd<'_>,
    took: (Timestamp, Timestamp),
) -> Option<AttrWatch<'w>> {
    match watcher?.watch(fd, took) {
        Ok(a) => Some(a),
        Err(e) => {
            tracing::warn!("watching the file for attribute changes: {e}");
            None
        }
    }
}

/// Runs the strategy through a per-file handle on the ring. The handle
/// lives in this call: every request is reaped when it returns, before
/// timestamps, sync and the lease's release.
fn run_in_handle(
    ring: &mut Ring,
    fd: std::os::fd::BorrowedFd<'_>,
    relocate: bool,
    job: FileJob<'_, '_>,
) -> Done {
    match ring.file(fd) {
        Err(e) => Done::new(
            Outcome::Failed {
                kind: FailKind::Internal,
                reason: format!("I/O ring unusable: {e}"),
            },
            false,
        ),
        Ok(mut fio) => run_strategy(&mut fio, relocate, job),
    }
}

fn run_strategy(
    fio: &mut crate::io::fileio::FileIo<'_>,
    relocate: bool,
    mut job: FileJob<'_, '_>,
) -> Done {
    let opened = job.opened;
    if relocate {
        if relocate::supported(opened.fs) {
            relocate::run(fio, &mut job)
        } else {
            Done::new(
                Outcome::Skipped {
                    reason: SkipReason::StrategyUnavailable,
                    detail: format!("no relocation on {}", opened.fs.name()),
                },
                false,
            )
        }
    } else {
        inplace::run(fio, &mut job)
    }
}

fn release(opened: Opened) {
    if let Err(e) = opened.release() {
        tracing::warn!("releasing the lease: {e}");
    }
}
