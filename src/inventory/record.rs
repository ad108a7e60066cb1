//! One file of the inventory, and how old its data is.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::clock::{believable, Timestamp};
use crate::io::fsid::FsId;

/// A file's key in the state database: its filesystem and inode (stable
/// across reboots; see `fsid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct FileKey {
    pub fs: FsId,
    pub ino: u64,
}

/// One file of the inventory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileRecord {
    pub fs: FsId,
    pub ino: u64,
    /// `st_dev` at the last scan (this boot; display only).
    pub dev: u64,
    #[serde(with = "crate::pathtext::json")]
    pub path: PathBuf,
    pub size: u64,
    pub alloc: u64,
    pub mtime: Timestamp,
    pub btime: Option<Timestamp>,
    pub generation: Option<u32>,
    /// When refreshd last rewrote it (seconds since the epoch).
    pub last_refresh: Option<i64>,
}

impl FileRecord {
    pub fn key(&self) -> FileKey {
        FileKey {
            fs: self.fs,
            ino: self.ino,
        }
    }

    /// When its data was last written, as far as a clock that was right
    /// can tell: the later of mtime and the last refresh, each only if it
    /// is not in the future (see `clock`). `None`: unknown, so the data is
    /// due — a clock that was wrong never exempts data.
    pub fn data_written(&self, now: i64) -> Option<i64> {
        let m = believable(self.mtime.sec, now);
        let r = self.last_refresh.and_then(|r| believable(r, now));
        m.max(r)
    }

    /// Age of its data at `now` (seconds since the epoch), never negative;
    /// unknown (timestamps from a wrong clock) is the oldest there is.
    pub fn data_age(&self, now: i64) -> Duration {
        crate::clock::data_age(self.mtime.sec, self.last_refresh, now)
    }

    /// Whether a timestamp of it was made by a clock that was wrong (in
    /// the future at `now`): said by the scan, never believed.
    pub fn from_a_wrong_clock(&self, now: i64) -> bool {
        believable(self.mtime.sec, now).is_none()
            || self
                .last_refresh
                .is_some_and(|r| believable(r, now).is_none())
    }

    /// The bytes a refresh of it can rewrite: its allocated data, never
    /// more than its size (a sparse file's holes are not rewritten).
    pub fn data_bytes(&self) -> u64 {
        self.alloc.min(self.size)
    }

    /// Who the file is, as the inventory knows it.
    pub fn identity(&self) -> crate::engine::safety::guard::Identity {
        crate::engine::safety::guard::Identity {
            fs: self.fs,
            ino: self.ino,
            btime: self.btime,
            generation: self.generation,
        }
    }
}
