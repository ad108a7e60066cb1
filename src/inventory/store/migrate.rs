//! The state database's schema, by version, and the way from each older
//! one to this one. A database of a newer refreshd is refused (with what
//! to do), never changed.
//!
//! - 1: files and checkpoints keyed on (st_dev, ino), times in i64 ns.
//! - 2: keyed on (filesystem identity, ino) — the UUID survives a reboot,
//!   `st_dev` does not — and times as (seconds, nanoseconds). `dev` stays
//!   as a plain column (the device number at the last scan).
//!
//! A table that changes no other (`ADDED`: the drives' forecast rounds)
//! is created when a database of this schema is opened, without a new
//! version: a refreshd that does not know it ignores it, so going back
//! a version keeps working.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use crate::io::fsid::FsId;

/// The schema this refreshd writes.
pub const SCHEMA_VERSION: i64 = 2;

/// Tables of the current schema.
pub const CREATE: &str = "
    CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS dirs (
        id INTEGER PRIMARY KEY,
        path BLOB NOT NULL UNIQUE
    );
    CREATE TABLE IF NOT EXISTS files (
        fs TEXT NOT NULL,
        ino INTEGER NOT NULL,
        dev INTEGER NOT NULL,
        dir INTEGER NOT NULL,
        name BLOB NOT NULL,
        size INTEGER NOT NULL,
        alloc INTEGER NOT NULL,
        mtime_s INTEGER NOT NULL,
        mtime_nsec INTEGER NOT NULL,
        btime_s INTEGER,
        btime_nsec INTEGER,
        generation INTEGER,
        last_refresh INTEGER,
        PRIMARY KEY (fs, ino)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS files_by_dir ON files (dir);
    CREATE TABLE IF NOT EXISTS baselines (
        drive TEXT PRIMARY KEY,
        fresh_bps REAL NOT NULL,
        at INTEGER NOT NULL,
        written INTEGER
    );
    CREATE TABLE IF NOT EXISTS checkpoints (
        fs TEXT NOT NULL,
        ino INTEGER NOT NULL,
        btime_s INTEGER,
        btime_nsec INTEGER,
        mtime_s INTEGER NOT NULL,
        mtime_nsec INTEGER NOT NULL,
        size INTEGER NOT NULL,
        done INTEGER NOT NULL,
        updated INTEGER NOT NULL,
        PRIMARY KEY (fs, ino)
    ) WITHOUT ROWID;";

/// Tables added to schema 2 that change no other (see the module's doc).
pub const ADDED: &str = "
    CREATE TABLE IF NOT EXISTS forecast_history (
        drive TEXT PRIMARY KEY,
        rounds TEXT NOT NULL
    );";

/// What opening found.
#[derive(Debug, PartialEq, Eq)]
pub enum Opened {
    /// A new database, or one of this schema.
    Current,
    /// Migrated from `from`.
    Migrated { from: i64, devices: usize },
    /// Written by a newer refreshd: left alone.
    Newer(i64),
}

/// Brings the database to [`SCHEMA_VERSION`] (creating it when empty).
pub fn open(conn: &mut Connection) -> rusqlite::Result<Opened> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);",
    )?;
    let version: Option<i64> = conn
        .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
            r.get(0)
        })
        .optional()?;
    match version {
        None => {
            let tx = conn.transaction()?;
            tx.execute_batch(CREATE)?;
            tx.execute_batch(ADDED)?;
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('schema', ?1)",
                [SCHEMA_VERSION],
            )?;
            tx.commit()?;
            Ok(Opened::Current)
        }
        Some(SCHEMA_VERSION) => {
            conn.execute_batch(ADDED)?;
            Ok(Opened::Current)
        }
        Some(1) => {
            let tx = conn.transaction()?;
            let devices = from_1(&tx)?;
            tx.execute_batch(ADDED)?;
            tx.commit()?;
            Ok(Opened::Migrated { from: 1, devices })
        }
        Some(v) => Ok(Opened::Newer(v)),
    }
}

/// Schema 1 → 2, in one transaction: each device number the old rows name
/// is mapped to its filesystem's identity by a directory of those rows
/// that is on it now (the daemon is upgraded on the boot that wrote them,
/// so the numbers still hold); a device found nowhere keeps its number
/// ([`FsId::Dev`]), and the next scan re-keys its rows by directory,
/// inode and birth time, keeping their history.
fn from_1(tx: &Transaction<'_>) -> rusqlite::Result<usize> {
    let devs: Vec<i64> = {
        let mut q = tx.prepare("SELECT dev FROM files UNION SELECT dev FROM checkpoints")?;
        let rows = q.query_map([], |r| r.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let mut map: HashMap<i64, FsId> = HashMap::new();
    for dev in &devs {
        let dirs: Vec<Vec<u8>> = {
            let mut q = tx.prepare(
                "SELECT DISTINCT d.path FROM files f JOIN dirs d ON f.dir = d.id
                 WHERE f.dev = ?1 LIMIT 16",
            )?;
            let rows = q.query_map([dev], |r| r.get(0))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        let found = dirs
            .iter()
            .find_map(|d| fs_of_dir(Path::new(std::ffi::OsStr::from_bytes(d)), *dev as u64));
        map.insert(*dev, found.unwrap_or(FsId::Dev(*dev as u64)));
    }
    tx.execute_batch(
        "CREATE TEMP TABLE devmap (dev INTEGER PRIMARY KEY, fs TEXT NOT NULL);
         ALTER TABLE files RENAME TO files_v1;
         ALTER TABLE checkpoints RENAME TO checkpoints_v1;
         DROP INDEX IF EXISTS files_by_dir;",
    )?;
    for (dev, fs) in &map {
        tx.execute(
            "INSERT INTO devmap (dev, fs) VALUES (?1, ?2)",
            params![dev, fs.key()],
        )?;
    }
    tx.execute_batch(CREATE)?;
    // ns → (s, nsec) with floor division (times before 1970 too); a btime
    // of 0 meant "not reported".
    tx.execute_batch(
        "INSERT INTO files (fs, ino, dev, dir, name, size, alloc, mtime_s, mtime_nsec,
                            btime_s, btime_nsec, generation, last_refresh)
         SELECT m.fs, f.ino, f.dev, f.dir, f.name, f.size, f.alloc,
                (f.mtime_ns - ((f.mtime_ns % 1000000000) + 1000000000) % 1000000000) / 1000000000,
                ((f.mtime_ns % 1000000000) + 1000000000) % 1000000000,
                CASE WHEN f.btime_ns = 0 THEN NULL ELSE
                  (f.btime_ns - ((f.btime_ns % 1000000000) + 1000000000) % 1000000000) / 1000000000 END,
                CASE WHEN f.btime_ns = 0 THEN NULL ELSE
                  ((f.btime_ns % 1000000000) + 1000000000) % 1000000000 END,
                f.generation, f.last_refresh
         FROM files_v1 f JOIN devmap m ON m.dev = f.dev;
         INSERT INTO checkpoints (fs, ino, btime_s, btime_nsec, mtime_s, mtime_nsec, size, done, updated)
         SELECT m.fs, c.ino,
                CASE WHEN c.btime_ns = 0 THEN NULL ELSE
                  (c.btime_ns - ((c.btime_ns % 1000000000) + 1000000000) % 1000000000) / 1000000000 END,
                CASE WHEN c.btime_ns = 0 THEN NULL ELSE
                  ((c.btime_ns % 1000000000) + 1000000000) % 1000000000 END,
                (c.mtime_ns - ((c.mtime_ns % 1000000000) + 1000000000) % 1000000000) / 1000000000,
                ((c.mtime_ns % 1000000000) + 1000000000) % 1000000000,
                c.size, c.done, c.updated
         FROM checkpoints_v1 c JOIN devmap m ON m.dev = c.dev;
         DROP TABLE files_v1;
         DROP TABLE checkpoints_v1;
         DROP TABLE devmap;
         UPDATE meta SET value = 2 WHERE key = 'schema';",
    )?;
    Ok(map.len())
}

/// The identity of the filesystem at `dir`, if `dir` is on device `dev`.
fn fs_of_dir(dir: &Path, dev: u64) -> Option<FsId> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    (st.st_dev == dev).then(|| crate::io::fsid::of(fd.as_fd()).ok())?
}
