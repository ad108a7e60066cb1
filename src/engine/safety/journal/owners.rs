//! Who a record belongs to. Every process that writes records (the daemon,
//! each one-shot `refreshd refresh`) keeps them in a directory of its own,
//! `journal/run-<pid>-<nanos>/`, holding an exclusive `flock` on its
//! `.lock` for as long as it runs. The kernel drops the lock when the
//! process dies, however it dies, so recovery can tell a dead owner's
//! records (to put back) from a live one's (files being rewritten right
//! now, whose lease recovery must not break and whose times it must not
//! touch). A directory is made under a dot-name and renamed once locked:
//! recovery never sees an owner that exists but is not locked yet.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};

const LOCK: &str = ".lock";

/// This process's record directory, locked while it lives.
#[derive(Debug)]
pub struct Owner {
    pub dir: PathBuf,
    lock: File,
}

impl Owner {
    pub fn create(root: &Path) -> io::Result<Owner> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!("run-{}-{nanos}", std::process::id());
        let tmp = root.join(format!(".{name}"));
        std::fs::create_dir(&tmp)?;
        let lock = File::create(tmp.join(LOCK))?;
        flock(&lock, FlockOperation::NonBlockingLockExclusive)?;
        let dir = root.join(name);
        std::fs::rename(&tmp, &dir)?;
        Ok(Owner { dir, lock })
    }
}

impl Drop for Owner {
    /// A clean exit with no record left removes the directory.
    fn drop(&mut self) {
        let records = std::fs::read_dir(&self.dir)
            .map(|d| d.flatten().filter(|e| e.file_name() != LOCK).count())
            .unwrap_or(1);
        if records == 0 {
            let _ = std::fs::remove_file(self.dir.join(LOCK));
            let _ = std::fs::remove_dir(&self.dir);
        }
        let _ = flock(&self.lock, FlockOperation::Unlock);
    }
}

/// Another owner's directory, locked by us: its owner is dead.
#[derive(Debug)]
pub struct DeadOwner {
    pub dir: PathBuf,
    _lock: File,
}

impl DeadOwner {
    /// Removes the directory if no record is left in it.
    pub fn tidy(self) {
        let left = std::fs::read_dir(&self.dir)
            .map(|d| d.flatten().filter(|e| e.file_name() != LOCK).count())
            .unwrap_or(1);
        if left == 0 {
            let _ = std::fs::remove_file(self.dir.join(LOCK));
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// The owner directories under `root` whose owner is dead (their lock
/// could be taken), except `mine`. Live owners are left alone.
pub fn dead_owners(root: &Path, mine: &Path) -> io::Result<Vec<DeadOwner>> {
    let mut out = vec![];
    for e in std::fs::read_dir(root)? {
        let e = e?;
        let dir = e.path();
        if !e.file_type()?.is_dir()
            || dir == mine
            || e.file_name().to_string_lossy().starts_with('.')
        {
            continue;
        }
        #[cfg(test)]
        if crate::engine::safety::journal::test_switch::ignore_owners() {
            // Guard off: every other directory counts as dead.
            if let Ok(lock) = File::open(dir.join(LOCK)) {
                out.push(DeadOwner { dir, _lock: lock });
            }
            continue;
        }
        let Ok(lock) = File::open(dir.join(LOCK)) else {
            continue; // being removed by its owner
        };
        match flock(&lock, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => out.push(DeadOwner { dir, _lock: lock }),
            Err(rustix::io::Errno::WOULDBLOCK) => {
                tracing::debug!(dir = ?dir, "records of a running refreshd: left to it");
            }
            Err(e) => return Err(e.into()),
        }
    }
    out.sort_by(|a, b| a.dir.cmp(&b.dir));
    Ok(out)
}

/// Record files in `dir` (not the lock, not dot-files).
pub fn records_in(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_file() && !e.file_name().to_string_lossy().starts_with('.') {
            out.push(e.path());
        }
    }
    out.sort();
    Ok(out)
}
