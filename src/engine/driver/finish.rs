//! The end of a file: timestamps back, sync, the recovery record
//! settled, the layout checked — and what another process did meanwhile.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use crate::engine::report::{FailKind, FileReport, Outcome};
use crate::engine::safety::attrwatch::AttrWatch;
use crate::engine::safety::guard::{self, Opened};
use crate::engine::safety::journal::Record;
use crate::engine::safety::lease::LeaseClock;
use crate::engine::settings::EngineConfig;
use crate::engine::strategy::Done;

/// How long before the lease deadline the timestamps must be back: a
/// futimens and an fsync, with room to spare.
const TIMES_MARGIN: Duration = Duration::from_millis(500);

/// What the end of a file settles besides the outcome.
pub(super) struct Settle<'s, 'w> {
    /// The crash-recovery record, if one was taken.
    pub(super) record: &'s mut Option<Record>,
    /// Other processes' attribute changes (in place only).
    pub(super) attrs: Option<&'s mut AttrWatch<'w>>,
}

/// Timestamps back (only if the lease still provably covers us, no write
/// landed outside it, and nobody else changed the file's times or
/// attributes), sync, layout check.
pub(super) fn finish(
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
            if let Err(e) = restore_times(o, report, cfg, attrs.as_deref_mut()) {
                failure = Some((FailKind::Io, format!("restoring atime/mtime: {e}")));
                settled = false;
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

/// Puts the file's own times back, unless another process set times
/// meanwhile: then theirs are kept (put back over refreshd's later
/// writes) and the report says so. An error only when our own restore
/// failed.
fn restore_times(
    o: &Opened,
    report: &mut FileReport,
    cfg: &EngineConfig,
    mut attrs: Option<&mut AttrWatch<'_>>,
) -> rustix::io::Result<()> {
    let fd = o.fd.as_fd();
    #[cfg(test)]
    crate::engine::test_hooks::at(fd, crate::engine::test_hooks::Point::BeforeTimes);
    let may = match attrs.as_deref_mut() {
        _ if cfg.unsafe_switches.ignore_others_times() => Ok(()),
        Some(a) => a.may_restore(fd),
        None => Err("no watch for other processes' attribute changes"),
    };
    let theirs = attrs.as_deref().and_then(|a| a.theirs());
    #[cfg(test)]
    crate::engine::test_hooks::at(fd, crate::engine::test_hooks::Point::Judged);
    match (may, theirs) {
        // Their times, put back over refreshd's own later writes (and
        // the atime as it is now, where refreshd's reads cannot have
        // moved it: a later `touch -a` of theirs is seen by no watch).
        (Err(_), Some((atime, mtime))) => {
            let force_atime = cfg.unsafe_switches.put_back_atime();
            let times = guard::times_to_put_back(fd, atime, mtime, force_atime);
            report.times_left = Some(match rustix::fs::futimens(fd, &times) {
                Ok(()) => "another process set its times meanwhile: those are kept".into(),
                Err(e) => format!("another process set its times meanwhile ({e})"),
            });
        }
        (Err(why), None) => report.times_left = Some(format!("times left as they are: {why}")),
        (Ok(()), _) => {
            let m = &o.meta;
            let force_atime = cfg.unsafe_switches.put_back_atime();
            let times = guard::times_to_put_back(fd, m.atime, m.mtime, force_atime);
            rustix::fs::futimens(fd, &times)?;
            // Ours is one attribute change; another at the same moment
            // may have been overwritten: said so.
            if attrs.is_some_and(|a| a.restored()) {
                report.times_left = Some(
                    "another process changed the times as they were put back: \
                     its change may have been overwritten"
                        .into(),
                );
            }
        }
    }
    Ok(())
}

/// What shows that another process changed the file during its refresh
/// (`None`: nothing does).
pub(super) fn changed_by_another(
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
pub(super) fn as_outcome_of_another(
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
