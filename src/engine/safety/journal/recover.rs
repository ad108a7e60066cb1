//! Recovery: the records of processes that are gone, each acted on under
//! a write lease and only on an exact match (see the parent module).

use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;

use rustix::fs::{Mode, OFlags};

use super::owners;
use super::record::{decide, observe, read_records, Entry, Journal, Observed, Verdict};
#[cfg(test)]
use super::test_switch;
use crate::engine::safety::meta::times_to_put_back;

/// What recovery did with one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    pub path: PathBuf,
    pub outcome: RecoveryOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryOutcome {
    /// The mtime refreshd had moved is back.
    Restored,
    /// Left as it is (and the record dropped), for this reason.
    Left(String),
    /// Someone has the file open: the record is kept for the next run.
    Deferred(String),
}

/// Goes through the records of dead owners (and ownerless ones left by an
/// older refreshd): restores what provably only refreshd moved, drops
/// records that are settled, keeps those of files in use. The records of
/// a running refreshd (this one included) are not touched.
pub fn recover(journal: &Journal) -> io::Result<Vec<Recovered>> {
    let mut out = recover_records(owners::records_in(&journal.root)?);
    for dead in owners::dead_owners(&journal.root, journal.dir())? {
        out.extend(recover_records(owners::records_in(&dead.dir)?));
        dead.tidy();
    }
    Ok(out)
}

fn recover_records(files: Vec<PathBuf>) -> Vec<Recovered> {
    let mut out = vec![];
    for (file, entry) in read_records(files) {
        let (path, outcome) = match entry {
            Err(why) => (
                file.clone(),
                RecoveryOutcome::Left(format!("unusable record: {why}")),
            ),
            Ok(e) => (e.path.clone(), recover_one(&e)),
        };
        if !matches!(outcome, RecoveryOutcome::Deferred(_)) {
            if let Err(e) = std::fs::remove_file(&file) {
                // Kept, it is acted on again at the next start: harmless
                // (a restored file is left), but the operator should know.
                tracing::warn!(record = %crate::pathtext::Log(&file), "cannot remove a settled recovery record: {e}");
            }
        }
        match &outcome {
            RecoveryOutcome::Restored => {
                tracing::info!(path = %crate::pathtext::Log(&path), "restored the atime and mtime an interrupted refresh had moved")
            }
            RecoveryOutcome::Left(why) => {
                tracing::warn!(path = %crate::pathtext::Log(&path), "interrupted refresh: mtime left as it is: {why}")
            }
            RecoveryOutcome::Deferred(why) => {
                tracing::info!(path = %crate::pathtext::Log(&path), "interrupted refresh: recovery deferred: {why}")
            }
        }
        out.push(Recovered { path, outcome });
    }
    out
}

/// Whether the atime the file has now can only be the killed run's: its
/// reads could move it (recorded), and it is older than refreshd's last
/// write. One that is not is ambiguous — a read of the killed run after
/// its last write, or another process's read since the kill (no lease
/// held it off; under `relatime` the first read after a write moves the
/// atime, without the ctime) — and is kept: a read of theirs is never
/// undone, at the cost of leaving a late read of ours.
fn atime_is_the_killed_runs(e: &Entry, now: &Observed) -> bool {
    e.reads_moved_atime && now.atime < e.left_ctime
}

fn recover_one(e: &Entry) -> RecoveryOutcome {
    use RecoveryOutcome::{Deferred, Left, Restored};
    let fd = match crate::io::resolve::open_absolute(
        &e.path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOATIME,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Left("no longer exists".into()),
        Err(err) => return Left(format!("cannot open it safely: {}", io::Error::from(err))),
    };
    // Under our lease nobody can change the file between check and fix.
    match crate::io::syscalls::take_write_lease(fd.as_fd()) {
        Ok(()) => {}
        Err(err) if err.raw_os_error() == Some(libc::EAGAIN) => {
            return Deferred("another process has it open".into())
        }
        Err(err) => return Left(format!("taking a lease: {err}")),
    }
    let result = (|| {
        let now = observe(fd.as_fd()).map_err(|err| Left(format!("statx: {err}")))?;
        #[cfg(test)]
        let verdict = if test_switch::restore_always() {
            Verdict::Restore
        } else {
            decide(e, &now)
        };
        #[cfg(not(test))]
        let verdict = decide(e, &now);
        match verdict {
            Verdict::Leave(why) => Err(Left(why.into())),
            Verdict::Restore => {
                let (atime, mtime) = (e.taken.atime, e.taken.mtime);
                let force_atime = atime_is_the_killed_runs(e, &now);
                #[cfg(test)]
                let force_atime = force_atime || test_switch::put_back_atime();
                let times = times_to_put_back(fd.as_fd(), atime, mtime, force_atime);
                rustix::fs::futimens(&fd, &times).map_err(|err| {
                    Left(format!("restoring the times: {}", io::Error::from(err)))
                })?;
                Ok(Restored)
            }
        }
    })();
    let _ = crate::io::syscalls::release_lease(fd.as_fd());
    result.unwrap_or_else(|o| o)
}
