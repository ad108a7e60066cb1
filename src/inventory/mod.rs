//! The inventory: every regular file under the configured trees with its
//! identity, size, allocation and age, kept in SQLite (WAL) under
//! `state_dir`. The daemon holds no per-file state in memory: rows live in
//! the database, whose page cache is bounded.
//!
//! Identity is (dev, ino) plus the birth time: an inode number reused by a
//! new file comes with a new btime, which resets the file's refresh history.
//! The inode generation (FS_IOC_GETVERSION) needs an open file descriptor,
//! which would triple the cost of a scan; it is recorded when the file is
//! first opened for sampling or refresh instead.
//!
//! Rescans are incremental: a directory's rows are compared with what the
//! walk sees and only differences are written, so an unchanged tree costs
//! the walk (readdir + statx, as `find` does) and no database writes.
//! Renames keep a file's history (its (dev, ino) is the key); deletions are
//! applied at the end of a scan, after every directory has been seen.

pub mod journal;
mod scan;
mod store;

pub use scan::{Batch, Entry, WalkProblem};
pub use store::{FileRecord, ScanStats, Store, StoreError};

/// Seconds since the epoch, now.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests;
