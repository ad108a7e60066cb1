//! SQLite state: files and directories, scanned incrementally, and
//! checkpoints and drive baselines. The schema and its migrations are in
//! `migrate`; applying a walk (short transactions) in `apply`;
//! checkpoints and baselines in `checkpoints`; the drives' forecast
//! rounds in `forecast`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::time::Instant;

use rusqlite::{params, Connection, OptionalExtension};

use super::record::{FileKey, FileRecord};
use super::scan::{self, WalkProblem};
use crate::clock::Timestamp;
use crate::io::fsid::FsId;

mod apply;
mod checkpoints;
mod error;
mod forecast;
mod group;
pub mod migrate;
mod turns;

pub use apply::ScanStats;
pub use error::StoreError;
pub use migrate::SCHEMA_VERSION;
use turns::Turns;

/// A file row and two optional extra columns.
type RowWithExtra = (FileRecord, Option<(i64, i64)>);

/// The state database.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// Writers of this database take turns (see `turns`).
    turns: Arc<Turns>,
}

impl Store {
    /// Opens (creating) `state_dir/state.db`.
    pub fn open(state_dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(state_dir).map_err(|source| StoreError::Io {
            path: state_dir.into(),
            source,
        })?;
        // Private, whoever starts the daemon: paths and identities of files.
        use std::os::unix::fs::PermissionsExt;
        let private = |p: &Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).map_err(|source| {
                StoreError::Io {
                    path: p.into(),
                    source,
                }
            })
        };
        private(state_dir, 0o700)?;
        let path = state_dir.join("state.db");
        let conn = Connection::open(&path).map_err(|source| StoreError::Db {
            path: path.clone(),
            source,
        })?;
        let store = Store::init(conn, path.clone())?;
        private(&path, 0o600)?;
        Ok(store)
    }

    /// Opens an existing database read-only (the one-shot commands reading
    /// the daemon's record): nothing is created, migrated or written. A
    /// database of another schema version is refused with why.
    pub fn open_read_only(state_dir: &Path) -> Result<Store, StoreError> {
        use rusqlite::OpenFlags;
        let path = state_dir.join("state.db");
        let db = |source| StoreError::Db {
            path: path.clone(),
            source,
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&path, flags).map_err(db)?;
        conn.execute_batch("PRAGMA busy_timeout = 5000;")
            .map_err(db)?;
        let found: i64 = conn
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .map_err(db)?;
        if found != SCHEMA_VERSION {
            return Err(StoreError::Version { path, found });
        }
        let turns = Turns::of(&path);
        Ok(Store { conn, path, turns })
    }

    /// When the file was last refreshed, by the daemon's record.
    pub fn last_refresh(&self, key: FileKey) -> Result<Option<i64>, StoreError> {
        let row: Option<Option<i64>> = self.db(self
            .conn
            .query_row(
                "SELECT last_refresh FROM files WHERE fs = ?1 AND ino = ?2",
                params![key.fs.key(), key.ino as i64],
                |r| r.get(0),
            )
            .optional())?;
        Ok(row.flatten())
    }

    /// A private in-memory database (one-shot commands, tests).
    pub fn memory() -> Result<Store, StoreError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|source| StoreError::Db {
            path: path.clone(),
            source,
        })?;
        Store::init(conn, path)
    }

    fn db<T>(&self, r: rusqlite::Result<T>) -> Result<T, StoreError> {
        r.map_err(|source| StoreError::Db {
            path: self.path.clone(),
            source,
        })
    }

    fn init(mut conn: Connection, path: PathBuf) -> Result<Store, StoreError> {
        let db = |source| StoreError::Db {
            path: path.clone(),
            source,
        };
        // busy_timeout first: switching to WAL needs a lock another
        // connection (another drive's worker) may hold at that moment.
        // A scan holds the write lock for at most ~25 ms at a time, and
        // this process's writers take turns (`turns`).
        conn.execute_batch(
            "PRAGMA busy_timeout = 30000;
             PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             PRAGMA cache_size = -16384;",
        )
        .map_err(db)?;
        let turns = Turns::of(&path);
        let turn = turns.batch();
        let opened = migrate::open(&mut conn).map_err(db)?;
        drop(turn);
        match opened {
            migrate::Opened::Current => {}
            migrate::Opened::Migrated { from, devices } => tracing::warn!(
                "state database {} migrated from schema {from} to {SCHEMA_VERSION} \
                 ({devices} filesystem(s) now named by UUID, not device number)",
                path.display()
            ),
            migrate::Opened::Newer(found) => return Err(StoreError::Version { path, found }),
        }
        Ok(Store { conn, path, turns })
    }

    /// Scans `root` (an absolute directory) and brings the rows under it up
    /// to date. The walk runs on its own thread and hands over a batch per
    /// directory; the database is written in short transactions.
    pub fn scan(&mut self, root: &Path) -> Result<ScanStats, StoreError> {
        let started = Instant::now();
        let mut stats = ScanStats::default();
        let (tx, rx) = sync_channel(256);
        let root_owned = root.to_path_buf();
        let walker = std::thread::Builder::new()
            .name("refreshd-walk".into())
            .spawn(move || {
                let mut problems: Vec<WalkProblem> = vec![];
                let r = scan::walk(&root_owned, &tx, &mut problems);
                (r, problems)
            })
            .map_err(|source| StoreError::Io {
                path: root.into(),
                source,
            })?;
        let applied = apply::apply(&self.conn, &self.path, &self.turns, rx, &mut stats);
        let (walked, problems) = walker.join().unwrap_or_else(|_| {
            (
                Err(std::io::Error::other("the walk thread panicked")),
                vec![],
            )
        });
        let applied = applied?;
        if let Err(source) = walked {
            // The root itself is unreadable: nothing is deleted.
            return Err(StoreError::Io {
                path: root.into(),
                source,
            });
        }
        let unreadable: Vec<PathBuf> = problems.iter().map(|p| p.path.clone()).collect();
        applied
            .settle(&self.conn, &self.turns, root, &unreadable, &mut stats)
            .map_err(|source| StoreError::Db {
                path: self.path.clone(),
                source,
            })?;
        stats.unreadable = problems.len() as u64;
        stats.problems = problems
            .into_iter()
            .map(|p| {
                format!(
                    "{}: {} (its rows are kept)",
                    crate::pathtext::text(&p.path),
                    p.error
                )
            })
            .collect();
        stats.seconds = started.elapsed().as_secs_f64();
        Ok(stats)
    }

    /// Files under `root`.
    pub fn files(&self, root: &Path) -> Result<Vec<FileRecord>, StoreError> {
        Ok(self
            .files_where(root, "", "")?
            .into_iter()
            .map(|(f, _)| f)
            .collect())
    }

    /// Every file under `root`, one at a time (nothing is collected: the
    /// daemon keeps no per-file state in memory).
    pub fn for_each_file(
        &self,
        root: &Path,
        f: &mut dyn FnMut(FileRecord),
    ) -> Result<(), StoreError> {
        self.each_where(root, "", "", &mut |(rec, _)| f(rec))
    }

    /// Rows of `files` (joined with `join`) whose directory is `root` or
    /// below it, with column `extra` (or NULL).
    fn files_where(
        &self,
        root: &Path,
        join: &str,
        extra: &str,
    ) -> Result<Vec<RowWithExtra>, StoreError> {
        let mut out = vec![];
        self.each_where(root, join, extra, &mut |r| out.push(r))?;
        Ok(out)
    }

    /// When a file under `root` was last refreshed (one query, not a walk
    /// of every record: the daemon's status after a restart).
    pub fn last_refresh_under(&self, root: &Path) -> Result<Option<i64>, StoreError> {
        let root_b = root.as_os_str().as_bytes();
        let mut under = root_b.to_vec();
        if !under.ends_with(b"/") {
            under.push(b'/');
        }
        let mut q = self.db(self.conn.prepare(
            "SELECT MAX(f.last_refresh) FROM files f JOIN dirs d ON f.dir = d.id
             WHERE d.path = ?1 OR substr(d.path, 1, ?2) = ?3",
        ))?;
        self.db(q.query_row(params![root_b, under.len() as i64, under], |r| r.get(0)))
    }

    fn each_where(
        &self,
        root: &Path,
        join: &str,
        extra: &str,
        each: &mut dyn FnMut(RowWithExtra),
    ) -> Result<(), StoreError> {
        let root_b = root.as_os_str().as_bytes();
        let mut under = root_b.to_vec();
        if !under.ends_with(b"/") {
            under.push(b'/');
        }
        let cols = if extra.is_empty() {
            "NULL, NULL"
        } else {
            extra
        };
        let sql = format!(
            "SELECT f.fs, f.ino, f.dev, d.path, f.name, f.size, f.alloc, f.mtime_s,
                    f.mtime_nsec, f.btime_s, f.btime_nsec, f.generation, f.last_refresh, {cols}
             FROM files f JOIN dirs d ON f.dir = d.id {join}
             WHERE d.path = ?1 OR substr(d.path, 1, ?2) = ?3"
        );
        let mut q = self.db(self.conn.prepare(&sql))?;
        let rows = self.db(
            q.query_map(params![root_b, under.len() as i64, under], |r| {
                let fs: String = r.get(0)?;
                let dir: Vec<u8> = r.get(3)?;
                let name: Vec<u8> = r.get(4)?;
                let btime = match (r.get::<_, Option<i64>>(9)?, r.get::<_, Option<i64>>(10)?) {
                    (Some(s), Some(n)) => Some(Timestamp::new(s, n as u32)),
                    _ => None,
                };
                let f = FileRecord {
                    fs: FsId::parse(&fs).unwrap_or(FsId::Dev(0)),
                    ino: r.get::<_, i64>(1)? as u64,
                    dev: r.get::<_, i64>(2)? as u64,
                    path: Path::new(OsStr::from_bytes(&dir)).join(OsStr::from_bytes(&name)),
                    size: r.get::<_, i64>(5)? as u64,
                    alloc: r.get::<_, i64>(6)? as u64,
                    mtime: Timestamp::new(r.get(7)?, r.get::<_, i64>(8)? as u32),
                    btime,
                    generation: r.get(11)?,
                    last_refresh: r.get(12)?,
                };
                let x: Option<i64> = r.get(13)?;
                let y: Option<i64> = r.get(14)?;
                Ok((f, x.zip(y)))
            }),
        )?;
        for r in rows {
            each(self.db(r)?);
        }
        Ok(())
    }

    /// Records a completed refresh of `key` at `when`.
    pub fn mark_refreshed(
        &self,
        key: FileKey,
        when: i64,
        generation: Option<u32>,
    ) -> Result<bool, StoreError> {
        let _turn = self.turns.statement();
        let n = self.db(self.conn.execute(
            "UPDATE files SET last_refresh = ?3, generation = COALESCE(?4, generation)
             WHERE fs = ?1 AND ino = ?2",
            params![key.fs.key(), key.ino as i64, when, generation],
        ))?;
        Ok(n == 1)
    }

    /// Number of file rows.
    pub fn count(&self) -> Result<u64, StoreError> {
        self.db(self
            .conn
            .query_row("SELECT COUNT(*) FROM files", [], |r| r.get::<_, i64>(0)))
            .map(|n| n as u64)
    }
}
