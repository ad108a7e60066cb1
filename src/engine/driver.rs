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
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::pacing::pace::{DeviceCounters, PaceConfig, Pacer, SysBlock};
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
        let pacer = Pacer::new(
            PaceConfig {
                mode: cfg.pace.mode,
                priority: cfg.pace.priority,
                rate: cfg.rate.map(|r| r.0),
                floor: cfg.pace.floor.0,
                depth: cfg.depth,
            },
            own.clone(),
            cfg.pace_status.clone(),
        );
        Ok((
            IoThread {
                ring: Ring::new(b, own.clone()),
                throttle: Throttle::paced(cfg.rate.map(|r| r.0), cfg.chunk, pacer),
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
        // Opening and planning read metadata (inodes, extent trees) and the
        // end syncs it: our own I/O, not countable per request. The pacer
        // leaves those ticks out, so they are not taken for an application.
        self.own.uncounted();
        let r = catch_unwind(AssertUnwindSafe(|| {
            refresh_file(self, t, cfg, skip, progress)
        }));
        self.own.uncounted();
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
    let (opened, relocate) = match open(t, cfg) {
        Ok(x) => x,
        Err(report) => return *report,
    };
    io.watch_drives(t, opened.meta.dev);
    let mut report = FileReport::new(t.display.clone(), Outcome::Refreshed);
    report.backend = Some(io.kind());
    report.filesystem = Some(opened.fs);
    report.size = opened.meta.size;
    report.verified = cfg.verify;
    report.dev_ino = Some((opened.meta.dev, opened.meta.ino));
    report.generation = opened.generation;
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
    let mut attrs = match (&io.watcher, relocate) {
        (Some(w), false) => match w.watch(fd) {
            Ok(a) => Some(a),
            Err(e) => {
                tracing::warn!("watching the file for attribute changes: {e}");
                None
            }
        },
        _ => None,
    };
    let done = {
        // The handle lives in this block: every request is reaped when it
        // ends, before timestamps, sync and the lease's release below.
        match io.ring.file(fd) {
            Err(e) => Done::new(
                Outcome::Failed {
                    kind: FailKind::Internal,
                    reason: format!("I/O ring unusable: {e}"),
                },
                false,
            ),
            Ok(mut fio) => run_strategy(
                &mut fio,
                relocate,
                FileJob {
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
                },
            ),
        }
    };
    report.outcome = finish(
        &opened,
        &clock,
        done,
        &mut report,
        cfg,
        Settle {
            record: &mut record,
            attrs: attrs.as_mut(),
        },
    );
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

/// How long before the lease deadline the timestamps must be back: a
/// futimens and an fsync, with room to spare.
const TIMES_MARGIN: Duration = Duration::from_millis(500);

/// What the end of a file settles besides the outcome.
struct Settle<'s, 'w> {
    /// The crash-recovery record, if one was taken.
    record: &'s mut Option<Record>,
    /// Other processes' attribute changes (in place only).
    attrs: Option<&'s mut AttrWatch<'w>>,
}

/// Timestamps back (only if the lease still provably covers us, no write
/// landed outside it, and nobody else changed the file's times or
/// attributes), sync, layout check.
fn finish(
    o: &Opened,
    clock: &LeaseClock<'_>,
    done: Done,
    report: &mut FileReport,
    cfg: &EngineConfig,
    s: Settle<'_, '_>,
) -> Outcome {
    let fd = o.fd.as_fd();
    let mut failure: Option<(FailKind, String)> = lease_exposed(report, clock);
    // The record is settled once the times are back, or once we know they
    // must never be put back; a failed restore keeps it for recovery.
    let mut settled = true;
    let mut attrs = s.attrs;
    if done.wrote_in_place && !cfg.unsafe_switches.no_time_restore() {
        if failure.is_some() {
            // Never put an old mtime over somebody's newer write.
        } else if clock.still_ours(TIMES_MARGIN) {
            #[cfg(test)]
            crate::engine::test_hooks::at(fd, crate::engine::test_hooks::Point::BeforeTimes);
            let may = match attrs.as_deref_mut() {
                _ if cfg.unsafe_switches.ignore_others_times() => Ok(()),
                Some(a) => a.may_restore(fd),
                None => Err("no watch for other processes' attribute changes"),
            };
            let theirs = attrs.as_deref().and_then(|a| a.theirs());
            match (may, theirs) {
                // Their times, put back over refreshd's own later writes.
                (Err(_), Some((atime, mtime))) => {
                    let times = rustix::fs::Timestamps {
                        last_access: atime.to_timespec(),
                        last_modification: mtime.to_timespec(),
                    };
                    report.times_left = Some(match rustix::fs::futimens(fd, &times) {
                        Ok(()) => "another process set its times meanwhile: those are kept".into(),
                        Err(e) => format!("another process set its times meanwhile ({e})"),
                    });
                }
                (Err(why), None) => {
                    report.times_left = Some(format!("times left as they are: {why}"))
                }
                (Ok(()), _) => match rustix::fs::futimens(fd, &o.meta.timestamps()) {
                    Err(e) => {
                        failure = Some((FailKind::Io, format!("restoring atime/mtime: {e}")));
                        settled = false;
                    }
                    Ok(()) => {
                        // Ours is one attribute change; another at the same
                        // moment may have been overwritten: said so.
                        if attrs.as_deref_mut().is_some_and(|a| a.restored()) {
                            report.times_left = Some(
                                "another process changed the times as they were put back: \
                                 its change may have been overwritten"
                                    .into(),
                            );
                        }
                    }
                },
            }
        } else {
            failure = Some((
                FailKind::LeaseRevoked,
                "the lease may have been revoked before the timestamps could be restored; \
                 mtime left as it is"
                    .into(),
            ));
        }
    }
    #[cfg(test)]
    crate::engine::test_hooks::at(fd, crate::engine::test_hooks::Point::BeforeFsync);
    if let Err(e) = rustix::fs::fsync(fd) {
        failure.get_or_insert((FailKind::Io, format!("fsync: {}", io::Error::from(e))));
    }
    if settled {
        if let Some(r) = s.record.take() {
            if let Err(e) = r.finish() {
                tracing::warn!("removing the recovery record: {e}");
            }
        }
    }
    let others_changed_attrs = attrs.is_some_and(|a| a.changed());
    if done.wrote_in_place && report.lease_exposed.is_empty() {
        if let Some(msg) = layout_changed(o, fd, others_changed_attrs) {
            failure.get_or_insert((FailKind::LayoutChanged, msg));
        }
    }
    match failure {
        Some((kind, reason)) => Outcome::Failed { kind, reason },
        None => done.outcome,
    }
}

/// What shows that another process changed the file during its refresh
/// (`None`: nothing does).
fn changed_by_another(
    o: &Opened,
    clock: &LeaseClock<'_>,
    relocated: bool,
    attrs: &mut Option<AttrWatch<'_>>,
) -> Option<String> {
    let now = guard::meta(o.fd.as_fd()).ok()?;
    if now.size != o.meta.size {
        return Some(format!(
            "another process changed its size from {} to {} bytes",
            o.meta.size, now.size
        ));
    }
    if clock.broke() {
        return Some("another process opened it (the lease broke)".into());
    }
    if attrs.as_mut().is_some_and(|a| a.changed()) {
        return Some("another process changed its times or attributes".into());
    }
    // Relocation moves blocks, never the times: moved ones are another's.
    if relocated && (now.mtime != o.meta.mtime || now.ctime != o.meta.ctime) {
        return Some("another process wrote to it".into());
    }
    None
}

/// A failure that another process's action explains is that process's
/// doing, not refreshd's nor the drive's: the file is interrupted (tried
/// again later), never failed, and no read error is counted against the
/// drive. A real device error (EIO) stays a failure.
fn as_outcome_of_another(
    outcome: Outcome,
    evidence: Option<String>,
    read_errors: &mut Vec<crate::engine::report::ReadError>,
) -> Outcome {
    let Some(why) = evidence else {
        return outcome;
    };
    let Outcome::Failed { kind, reason } = outcome else {
        return outcome;
    };
    let eio = reason.contains("Input/output error")
        || read_errors
            .iter()
            .any(|r| r.error.contains("Input/output error"));
    let explained = match kind {
        FailKind::Unreadable | FailKind::LayoutChanged | FailKind::Io => !eio,
        _ => false,
    };
    if !explained {
        return Outcome::Failed { kind, reason };
    }
    read_errors.clear();
    Outcome::interrupted(
        0,
        crate::engine::report::Interruption::Changed,
        format!("{why}; left as it made it ({reason})"),
    )
}

/// Writes that may have landed after the kernel revoked the lease.
fn lease_exposed(report: &FileReport, clock: &LeaseClock<'_>) -> Option<(FailKind, String)> {
    let first = *report.lease_exposed.first()?;
    let total: u64 = report.lease_exposed.iter().map(|r| r.len).sum();
    Some((
        FailKind::LeaseRevoked,
        format!(
            "the kernel may have revoked the lease (lease-break-time {} s) while {} write(s) \
             of {total} bytes were in flight; first at offset {} length {}: another process \
             may have written there before them; mtime left as it is",
            clock.break_time().as_secs(),
            report.lease_exposed.len(),
            first.offset,
            first.len
        ),
    ))
}

/// Size and allocation must be what they were. A change here is a bug.
/// st_blocks also counts blocks past the end (XFS trims its speculative
/// preallocation when another process closes the file) and metadata (an
/// ext4 extent-tree block): when it moved, the allocation within the size
/// is what must not have.
fn layout_changed(
    o: &Opened,
    fd: std::os::fd::BorrowedFd<'_>,
    others_changed_attrs: bool,
) -> Option<String> {
    let before = &o.meta;
    let data_moved = |size: u64| {
        let now = crate::io::syscalls::allocated_within_size(fd, size).ok();
        o.allocated.is_none() || now != o.allocated
    };
    match guard::meta(fd) {
        Ok(after) if after.size != before.size => Some(format!(
            "size changed from {} to {} bytes",
            before.size, after.size
        )),
        Ok(after) if after.blocks != before.blocks && data_moved(after.size) => Some(format!(
            "allocation changed from {} to {} blocks",
            before.blocks, after.blocks
        )),
        Ok(after) if after.mode != before.mode && !others_changed_attrs => Some(format!(
            "mode changed from {:o} to {:o}",
            before.mode, after.mode
        )),
        Ok(_) => None,
        Err(e) => Some(format!("statx after refresh: {e}")),
    }
}
