//! The recovery journal: what refreshd must put back if it dies while it
//! rewrites a file in place (kill -9, OOM, power loss), and only that.
//!
//! In-place writes move a file's mtime (and ctime); the engine puts the
//! mtime back when the file is done. If the process dies first, the file
//! keeps the time of refreshd's last write, and backup or sync tools that
//! trust mtime would see a change that never happened. So, per file being
//! rewritten, one record in `state_dir/journal/`:
//!
//! 1. Written and `fdatasync`ed under the write lease, *before the first
//!    write*: identity (filesystem UUID, ino, btime, inode generation: it
//!    survives a reboot that renumbers devices), the atime and mtime to
//!    put back, and the (mtime, ctime) the file has now. Times are
//!    (seconds, nanoseconds): any date `statx` can return.
//! 2. Updated whenever no write of ours is in flight and the file's
//!    (mtime, ctime) moved: it is then exactly what refreshd's own writes
//!    left, because under the lease nobody else can change the file.
//! 3. Marked when the lease is seen breaking: from then on another process
//!    may write, and the record can no longer vouch for the times.
//! 4. Removed when the engine has put the times back itself (or decided it
//!    must not: a lease revoked with writes in flight).
//!
//! Recovery ([`recover`]) takes a write lease on the file (so nobody can
//! change it between the check and the fix) and restores the recorded
//! atime and mtime only if the identity matches, the lease was never seen
//! breaking, and the current (mtime, ctime) are *exactly* the recorded
//! ones. Why that proves nobody else changed the file: every change by
//! another process (a write, truncate, chmod, xattr, rename) sets ctime to
//! the current time, and could only happen after refreshd's lease was gone,
//! i.e. after its last recorded write. Because refreshd read the ctime
//! (fstat) after that write, the kernel (multigrain timestamps, Linux
//! 6.13+) gives the next change a strictly later ctime. On older kernels a
//! change within the same timer tick (≤ 4 ms) as refreshd's last write
//! could keep the same ctime: that residual is documented in docs/safety.md.
//! Any mismatch leaves the mtime as it is: never an old mtime over a new
//! write, at the price of sometimes not restoring one refreshd moved (a
//! crash while a write was in flight). Relocation never changes mtime or
//! ctime and writes no record.
//!
//! A record is one line of JSON and one line with its xxh3 checksum; a
//! torn or corrupt record is reported and dropped, never acted on. Each
//! process keeps its records in a locked directory of its own
//! ([`owners`]): recovery only ever acts on the records of a process that
//! is gone, never on those of a daemon or one-shot still running beside it.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, StatxFlags};
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

use crate::clock::Timestamp;
use crate::io::fsid::FsId;

/// The record format this refreshd writes (it reads version 1 too).
pub const VERSION: u32 = 2;

/// Who the file is, and its times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    /// The filesystem (UUID; see `fsid`).
    pub fs: FsId,
    /// `st_dev` when observed (this boot; a [`FsId::Dev`] is matched by it).
    pub dev: u64,
    pub ino: u64,
    pub btime: Option<Timestamp>,
    pub generation: Option<u32>,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
}

/// One record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub version: u32,
    /// Where the file was (an absolute path); its identity is checked.
    #[serde(with = "crate::pathtext::json")]
    pub path: PathBuf,
    /// The file when the refresh took it, under the lease.
    pub taken: Observed,
    /// (mtime, ctime) as refreshd's own last write left them.
    pub left_mtime: Timestamp,
    pub left_ctime: Timestamp,
    /// The lease was seen breaking: another process may have written.
    pub lease_broken: bool,
    /// Another process changed the file's times or attributes while it
    /// was written (`utimensat`, `chmod`: they break no lease): its times
    /// are its own now, never to be put back.
    #[serde(default)]
    pub changed_by_another: bool,
}

impl Entry {
    /// Whether the record vouches for a file whose (mtime, ctime) are
    /// these: exactly what refreshd's own last write left.
    pub fn vouches_for(&self, mtime: Timestamp, ctime: Timestamp) -> bool {
        !self.lease_broken
            && !self.changed_by_another
            && (mtime, ctime) == (self.left_mtime, self.left_ctime)
    }
}

/// What recovery decides for a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Put the recorded atime and mtime back.
    Restore,
    /// Leave the file as it is, for this reason.
    Leave(&'static str),
}

/// The decision, from the record and the file as it is now (under a lease).
pub fn decide(e: &Entry, now: &Observed) -> Verdict {
    let t = &e.taken;
    let same_file = t.fs.holds(&now.fs, now.dev)
        && t.ino == now.ino
        && (t.btime.is_none() || t.btime == now.btime)
        && (t.generation.is_none() || t.generation == now.generation);
    if !same_file {
        return Verdict::Leave("another file is there now");
    }
    if now.mtime == t.mtime {
        return Verdict::Leave("its mtime is already the original one");
    }
    if e.lease_broken {
        return Verdict::Leave("the lease was broken: another process may have written");
    }
    if e.changed_by_another {
        return Verdict::Leave("another process set its times or attributes meanwhile");
    }
    if !e.vouches_for(now.mtime, now.ctime) {
        return Verdict::Leave("changed since refreshd's last write");
    }
    Verdict::Restore
}

fn encode(e: &Entry) -> Vec<u8> {
    let json = serde_json::to_string(e).unwrap_or_default();
    format!("{json}\n{:016x}\n", xxh3_64(json.as_bytes())).into_bytes()
}

/// Why a record cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not UTF-8")]
    NotText,
    #[error("checksum mismatch (torn or corrupt record)")]
    Checksum,
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("record version {0:?} (this refreshd knows 1 and {VERSION})")]
    Version(Option<u64>),
}

fn decode(bytes: &[u8]) -> Result<Entry, RecordError> {
    let text = std::str::from_utf8(bytes).map_err(|_| RecordError::NotText)?;
    let mut lines = text.lines();
    let (json, sum) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    if format!("{:016x}", xxh3_64(json.as_bytes())) != sum {
        return Err(RecordError::Checksum);
    }
    let version = serde_json::from_str::<serde_json::Value>(json)?
        .get("version")
        .and_then(serde_json::Value::as_u64);
    match version {
        Some(1) => Ok(serde_json::from_str::<v1::Entry>(json)?.into()),
        Some(v) if v == u64::from(VERSION) => Ok(serde_json::from_str(json)?),
        v => Err(RecordError::Version(v)),
    }
}

/// The journal directory, and this process's records in it (see
/// [`owners`]: a running process's records are never recovered by another).
#[derive(Debug)]
pub struct Journal {
    root: PathBuf,
    owner: owners::Owner,
}

impl Journal {
    /// Opens (creating, mode 0700) `state_dir/journal`, and a record
    /// directory of this process's own in it.
    pub fn open(state_dir: &Path) -> io::Result<Journal> {
        let root = state_dir.join("journal");
        std::fs::create_dir_all(&root)?;
        let _ =
            std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o700));
        let owner = owners::Owner::create(&root)?;
        Ok(Journal { root, owner })
    }

    /// Where this process writes its records.
    pub fn dir(&self) -> &Path {
        &self.owner.dir
    }

    fn name(fs: FsId, ino: u64) -> String {
        format!("{}-{ino}", fs.key())
    }

    /// Writes a new record and syncs its data before the caller's first
    /// write to the file. The directory entry is not synced (one flush per
    /// file is the journal's cost): after a power cut that loses it,
    /// recovery finds no record and leaves the mtime moved, never wrong.
    pub fn begin(&self, e: Entry) -> io::Result<Record> {
        let path = self.dir().join(Self::name(e.taken.fs, e.taken.ino));
        let mut file = File::options()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        file.write_all(&encode(&e))?;
        file.sync_data()?;
        File::open(self.dir())?.sync_all()?;
        Ok(Record {
            file,
            path,
            entry: e,
        })
    }

    /// Every record of every owner, live or dead, and records left at
    /// the top by a refreshd that did not keep owners (tests, reports).
    pub fn entries(&self) -> io::Result<Vec<(PathBuf, Result<Entry, RecordError>)>> {
        let mut files = owners::records_in(&self.root)?;
        for e in std::fs::read_dir(&self.root)? {
            let e = e?;
            if e.file_type()?.is_dir() && !e.file_name().to_string_lossy().starts_with('.') {
                files.extend(owners::records_in(&e.path())?);
            }
        }
        Ok(read_records(files))
    }
}

/// Reads one record file (tools, tests: what a recovery would act on).
pub fn read_record(path: &Path) -> Result<Entry, RecordError> {
    decode(&std::fs::read(path)?)
}

/// Reads record files (a file gone meanwhile was finished by its owner).
fn read_records(files: Vec<PathBuf>) -> Vec<(PathBuf, Result<Entry, RecordError>)> {
    let mut out = vec![];
    for p in files {
        let bytes = match std::fs::read(&p) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            other => other,
        };
        out.push((p, bytes.map_err(RecordError::from).and_then(|b| decode(&b))));
    }
    out
}

/// A file's open record, kept by the engine while it writes.
#[derive(Debug)]
pub struct Record {
    file: File,
    path: PathBuf,
    entry: Entry,
}

impl Record {
    /// The file's times after our own writes (no write of ours in flight):
    /// recorded if they moved. Not synced: a lost update makes recovery
    /// leave the file alone, never restore wrongly.
    pub fn observe(&mut self, mtime: Timestamp, ctime: Timestamp) -> io::Result<()> {
        if (mtime, ctime) == (self.entry.left_mtime, self.entry.left_ctime) {
            return Ok(());
        }
        self.entry.left_mtime = mtime;
        self.entry.left_ctime = ctime;
        self.file.write_all_at(&encode(&self.entry), 0)
    }

    /// The lease is breaking: from now on the record vouches for nothing.
    pub fn lease_broken(&mut self) -> io::Result<()> {
        if self.entry.lease_broken {
            return Ok(());
        }
        self.entry.lease_broken = true;
        self.file.write_all_at(&encode(&self.entry), 0)?;
        self.file.sync_data()
    }

    /// Another process changed the file's times or attributes: from now on
    /// the record vouches for nothing (synced: a crash must not restore).
    pub fn changed_by_another(&mut self) -> io::Result<()> {
        if self.entry.changed_by_another {
            return Ok(());
        }
        self.entry.changed_by_another = true;
        self.file.write_all_at(&encode(&self.entry), 0)?;
        self.file.sync_data()
    }

    /// The engine put the times back (or must never): forget the file.
    pub fn finish(self) -> io::Result<()> {
        std::fs::remove_file(&self.path)
    }

    pub fn entry(&self) -> &Entry {
        &self.entry
    }
}

/// Reads the identity and times of an open file.
pub fn observe(fd: BorrowedFd<'_>) -> io::Result<Observed> {
    let want = StatxFlags::BASIC_STATS | StatxFlags::BTIME;
    let st = rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, want)?;
    let ts = Timestamp::from_statx;
    Ok(Observed {
        fs: crate::io::fsid::of(fd)?,
        dev: rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
        ino: st.stx_ino,
        btime: (st.stx_mask & StatxFlags::BTIME.bits() != 0).then(|| ts(st.stx_btime)),
        generation: crate::io::syscalls::inode_generation(fd).ok(),
        atime: ts(st.stx_atime),
        mtime: ts(st.stx_mtime),
        ctime: ts(st.stx_ctime),
    })
}

/// Test-only: restore every record, whatever happened to the file since,
/// so a test can show what the exact-match rule protects.
#[cfg(test)]
pub(crate) mod test_switch {
    use std::cell::Cell;

    thread_local! {
        static RESTORE_ALWAYS: Cell<bool> = const { Cell::new(false) };
        static IGNORE_OWNERS: Cell<bool> = const { Cell::new(false) };
    }

    pub fn restore_always() -> bool {
        RESTORE_ALWAYS.with(Cell::get)
    }

    pub fn set_restore_always(on: bool) {
        RESTORE_ALWAYS.with(|c| c.set(on));
    }

    /// Recover every other owner's records, running or not.
    pub fn ignore_owners() -> bool {
        IGNORE_OWNERS.with(Cell::get)
    }

    pub fn set_ignore_owners(on: bool) {
        IGNORE_OWNERS.with(|c| c.set(on));
    }
}

mod owners;
mod recover;
#[cfg(test)]
mod tests;
mod v1;

pub use recover::{recover, Recovered, RecoveryOutcome};
