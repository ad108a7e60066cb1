//! A record and the journal that keeps them: the format (one line of
//! JSON and one of its checksum, version 1 read too), the decision for a
//! record against the file as it is now, and the writer the engine keeps
//! per file (see the parent module for the protocol).

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

use super::{owners, v1};

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
    /// The refresh read without `O_NOATIME` (not the owner, no
    /// `CAP_FOWNER`): its reads may have moved the atime, so recovery
    /// puts the taken one back even where its own descriptor could not
    /// have moved it — if the atime is older than refreshd's last write
    /// (a later one may be another's read since: kept). Absent in older
    /// records (the field is optional, the format version unchanged):
    /// false, as they were recovered before.
    #[serde(default)]
    pub reads_moved_atime: bool,
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
    /// Put the recorded mtime back (and the taken atime where the killed
    /// run's reads alone can have moved it: `reads_moved_atime`, see
    /// `recover`; else the atime as it is).
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

pub(super) fn encode(e: &Entry) -> Vec<u8> {
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

pub(super) fn decode(bytes: &[u8]) -> Result<Entry, RecordError> {
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
    pub(super) root: PathBuf,
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
pub(super) fn read_records(files: Vec<PathBuf>) -> Vec<(PathBuf, Result<Entry, RecordError>)> {
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

impl From<v1::Entry> for Entry {
    fn from(e: v1::Entry) -> Entry {
        let t = e.taken;
        Entry {
            version: 1,
            path: e.path,
            taken: Observed {
                fs: FsId::Dev(t.dev),
                dev: t.dev,
                ino: t.ino,
                btime: t.btime_ns.map(Timestamp::from_nanos),
                generation: t.generation,
                atime: Timestamp::from_nanos(t.atime_ns),
                mtime: Timestamp::from_nanos(t.mtime_ns),
                ctime: Timestamp::from_nanos(t.ctime_ns),
            },
            left_mtime: Timestamp::from_nanos(e.left_mtime_ns),
            left_ctime: Timestamp::from_nanos(e.left_ctime_ns),
            lease_broken: e.lease_broken,
            changed_by_another: false,
            reads_moved_atime: false,
        }
    }
}
