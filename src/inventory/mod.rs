//! The inventory: every regular file under the configured trees with its
//! identity, size, allocation and age, kept in SQLite (WAL) under
//! `state_dir`. The daemon holds no per-file state in memory: rows live in
//! the database, whose page cache is bounded.
//!
//! Identity is (filesystem UUID, ino) plus the birth time — never st_dev,
//! which changes at boot: an inode number reused by a new file comes with
//! a new btime, which resets the file's refresh history.
//! The inode generation (FS_IOC_GETVERSION) needs an open file descriptor,
//! which would triple the cost of a scan; it is recorded when the file is
//! first opened for sampling or refresh instead.
//!
//! Rescans are incremental: a directory's rows are compared with what the
//! walk sees and only differences are written, so an unchanged tree costs
//! the walk (readdir + statx, as `find` does) and no database writes.
//! Renames keep a file's history (its (fs, ino) is the key); deletions are
//! applied at the end of a scan, after every directory has been seen; a
//! directory that cannot be read keeps its rows.

mod record;
mod scan;
mod store;

pub use record::{FileKey, FileRecord};
pub use scan::{Batch, Entry, WalkProblem, Walked};
pub use store::{migrate, ScanStats, Store, StoreError};

pub use crate::clock::now_secs;

#[cfg(test)]
mod tests;
