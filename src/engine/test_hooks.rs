//! Test-only: run a closure at a given point of a given file's refresh
//! (another process's `utimensat` right after the last write, say), so a
//! test hits the moment it means, not one near it. Keyed by inode: tests
//! run in parallel, each on its own files.

use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::sync::Mutex;

/// Where in a file's refresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// A write about to be submitted (after the watch was told).
    Writing,
    /// Every write reaped, before the driver's end.
    Written,
    /// Right before the times are checked and put back.
    BeforeTimes,
    /// The times judged (whose to put back), before they are put back.
    Judged,
    /// After the times were put back, before the final fsync.
    BeforeFsync,
}

type Hook = Box<dyn FnMut() + Send>;

static HOOKS: Mutex<Option<HashMap<(u64, Point), Hook>>> = Mutex::new(None);

/// Runs `f` when the refresh of inode `ino` reaches `at`.
pub fn set(ino: u64, at: Point, f: impl FnMut() + Send + 'static) {
    let mut h = HOOKS.lock().unwrap_or_else(|e| e.into_inner());
    h.get_or_insert_with(HashMap::new)
        .insert((ino, at), Box::new(f));
}

pub fn clear(ino: u64) {
    let mut h = HOOKS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = h.as_mut() {
        m.retain(|(i, _), _| *i != ino);
    }
}

/// Called by the engine at `at` for the file `fd`.
pub fn at(fd: BorrowedFd<'_>, at: Point) {
    let Ok(st) = rustix::fs::fstat(fd) else {
        return;
    };
    let mut h = HOOKS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = h.as_mut().and_then(|m| m.get_mut(&(st.st_ino, at))) {
        f();
    }
}

/// `utimensat` of a path: (seconds, nanoseconds) each, `UTIME_OMIT` and
/// `UTIME_NOW` as the nanoseconds where meant.
pub fn set_times(p: &std::path::Path, atime: (i64, i64), mtime: (i64, i64)) {
    let ts = |(s, n): (i64, i64)| rustix::fs::Timespec {
        tv_sec: s,
        tv_nsec: n,
    };
    let t = rustix::fs::Timestamps {
        last_access: ts(atime),
        last_modification: ts(mtime),
    };
    rustix::fs::utimensat(rustix::fs::CWD, p, &t, rustix::fs::AtFlags::empty()).expect("utimensat");
}
