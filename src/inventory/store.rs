//! SQLite state: files and directories, scanned incrementally.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use super::scan::{self, Entry, WalkProblem};

const SCHEMA_VERSION: i64 = 1;

/// Error of the state database.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state database {path}: {source}")]
    Db {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("state database {path} has schema version {found}, this refreshd knows {SCHEMA_VERSION}: move it away to start over")]
    Version { path: PathBuf, found: i64 },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A file row and two optional extra columns.
type RowWithExtra = (FileRecord, Option<(i64, i64)>);

/// One file of the inventory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileRecord {
    pub dev: u64,
    pub ino: u64,
    pub path: PathBuf,
    pub size: u64,
    pub alloc: u64,
    pub mtime_ns: i64,
    pub btime_ns: i64,
    pub generation: Option<u32>,
    /// When refreshd last rewrote it (seconds since the epoch).
    pub last_refresh: Option<i64>,
}

impl FileRecord {
    /// When its data was last written: max(mtime, last refresh), seconds.
    pub fn data_written(&self) -> i64 {
        let m = self.mtime_ns.div_euclid(1_000_000_000);
        self.last_refresh.map_or(m, |r| r.max(m))
    }

    /// Who the file is, as the inventory knows it (a btime of 0 means the
    /// filesystem reported none).
    pub fn identity(&self) -> crate::engine::guard::Identity {
        crate::engine::guard::Identity {
            dev: self.dev,
            ino: self.ino,
            btime_ns: (self.btime_ns != 0).then_some(self.btime_ns),
            generation: self.generation,
        }
    }

    /// Age of its data at `now` (seconds since the epoch), never negative.
    pub fn data_age(&self, now: i64) -> Duration {
        Duration::from_secs(u64::try_from(now - self.data_written()).unwrap_or(0))
    }
}

/// What a scan did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ScanStats {
    pub dirs: u64,
    pub files: u64,
    pub bytes: u64,
    pub added: u64,
    pub changed: u64,
    pub removed: u64,
    /// Hard links beyond the first (each file is counted once).
    pub extra_links: u64,
    pub seconds: f64,
    #[serde(skip)]
    pub problems: Vec<String>,
}

/// The state database.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
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

    fn init(conn: Connection, path: PathBuf) -> Result<Store, StoreError> {
        let store = Store { conn, path };
        store.db(store.conn.execute_batch(
            // busy_timeout first: switching to WAL needs a lock another
            // connection (another drive's worker) may hold at that moment.
            // 30 s: one drive's scan holds the write lock for its whole walk.
            "PRAGMA busy_timeout = 30000;
             PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             PRAGMA cache_size = -16384;
             CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS dirs (
                 id INTEGER PRIMARY KEY,
                 path BLOB NOT NULL UNIQUE
             );
             CREATE TABLE IF NOT EXISTS files (
                 dev INTEGER NOT NULL,
                 ino INTEGER NOT NULL,
                 dir INTEGER NOT NULL,
                 name BLOB NOT NULL,
                 size INTEGER NOT NULL,
                 alloc INTEGER NOT NULL,
                 mtime_ns INTEGER NOT NULL,
                 btime_ns INTEGER NOT NULL,
                 generation INTEGER,
                 last_refresh INTEGER,
                 PRIMARY KEY (dev, ino)
             ) WITHOUT ROWID;
             CREATE INDEX IF NOT EXISTS files_by_dir ON files (dir);
             CREATE TABLE IF NOT EXISTS baselines (
                 drive TEXT PRIMARY KEY,
                 fresh_bps REAL NOT NULL,
                 at INTEGER NOT NULL,
                 written INTEGER
             );
             CREATE TABLE IF NOT EXISTS checkpoints (
                 dev INTEGER NOT NULL,
                 ino INTEGER NOT NULL,
                 btime_ns INTEGER NOT NULL,
                 mtime_ns INTEGER NOT NULL,
                 size INTEGER NOT NULL,
                 done INTEGER NOT NULL,
                 updated INTEGER NOT NULL,
                 PRIMARY KEY (dev, ino)
             ) WITHOUT ROWID;",
        ))?;
        let version: Option<i64> = store.db(store
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .optional())?;
        match version {
            None => {
                store.db(store.conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema', ?1)",
                    [SCHEMA_VERSION],
                ))?;
            }
            Some(SCHEMA_VERSION) => {}
            Some(found) => {
                return Err(StoreError::Version {
                    path: store.path.clone(),
                    found,
                })
            }
        }
        Ok(store)
    }

    /// Scans `root` (an absolute directory) and brings the rows under it up
    /// to date.
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

        let path = self.path.clone();
        let dberr = |source| StoreError::Db {
            path: path.clone(),
            source,
        };
        // IMMEDIATE: take the write lock up front. A deferred transaction
        // that reads first and writes later gets SQLITE_BUSY at once (no
        // busy wait) when another drive's worker wrote meanwhile.
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(dberr)?;
        let mut dirs: HashMap<Vec<u8>, i64> = HashMap::new();
        {
            let mut q = tx.prepare("SELECT id, path FROM dirs").map_err(dberr)?;
            let rows = q
                .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))
                .map_err(dberr)?;
            for row in rows {
                let (id, p) = row.map_err(dberr)?;
                dirs.insert(p, id);
            }
        }
        let empty_db = dirs.is_empty();
        let mut visited: HashSet<i64> = HashSet::new();
        let mut linked: HashSet<(u64, u64)> = HashSet::new();
        // Rows missing from their directory's listing: deleted or renamed
        // into a directory not scanned yet. Settled at the end.
        let mut missing: Vec<(u64, u64, i64)> = vec![];
        {
            let mut insert_dir = tx
                .prepare("INSERT INTO dirs (path) VALUES (?1)")
                .map_err(dberr)?;
            let mut rows_of = tx
                .prepare(
                    "SELECT dev, ino, name, size, alloc, mtime_ns, btime_ns FROM files WHERE dir = ?1",
                )
                .map_err(dberr)?;
            let mut upsert = tx
                .prepare(
                    "INSERT INTO files (dev, ino, dir, name, size, alloc, mtime_ns, btime_ns)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                     ON CONFLICT (dev, ino) DO UPDATE SET
                         dir = excluded.dir, name = excluded.name, size = excluded.size,
                         alloc = excluded.alloc, mtime_ns = excluded.mtime_ns,
                         generation = CASE WHEN btime_ns = excluded.btime_ns THEN generation END,
                         last_refresh = CASE WHEN btime_ns = excluded.btime_ns THEN last_refresh END,
                         btime_ns = excluded.btime_ns",
                )
                .map_err(dberr)?;
            let mut exists = tx
                .prepare("SELECT 1 FROM files WHERE dev = ?1 AND ino = ?2")
                .map_err(dberr)?;
            for batch in rx {
                stats.dirs += 1;
                let key = batch.dir.as_os_str().as_bytes().to_vec();
                let (id, known) = match dirs.get(&key) {
                    Some(&id) => {
                        let mut known: HashMap<(u64, u64), Entry> = HashMap::new();
                        let rows = rows_of
                            .query_map([id], |r| {
                                Ok(Entry {
                                    dev: r.get::<_, i64>(0)? as u64,
                                    ino: r.get::<_, i64>(1)? as u64,
                                    name: r.get(2)?,
                                    size: r.get::<_, i64>(3)? as u64,
                                    alloc: r.get::<_, i64>(4)? as u64,
                                    mtime_ns: r.get(5)?,
                                    btime_ns: r.get(6)?,
                                    nlink: 0,
                                })
                            })
                            .map_err(dberr)?;
                        for row in rows {
                            let e = row.map_err(dberr)?;
                            known.insert((e.dev, e.ino), e);
                        }
                        (id, known)
                    }
                    None => {
                        insert_dir.execute([&key]).map_err(dberr)?;
                        let id = tx.last_insert_rowid();
                        dirs.insert(key, id);
                        (id, HashMap::new())
                    }
                };
                visited.insert(id);
                let mut known = known;
                for e in &batch.files {
                    if e.nlink > 1 && !linked.insert((e.dev, e.ino)) {
                        stats.extra_links += 1;
                        continue;
                    }
                    stats.files += 1;
                    stats.bytes += e.size;
                    let old = known.remove(&(e.dev, e.ino));
                    let same = old.as_ref().is_some_and(|o| {
                        o.name == e.name
                            && o.size == e.size
                            && o.alloc == e.alloc
                            && o.mtime_ns == e.mtime_ns
                            && o.btime_ns == e.btime_ns
                    });
                    if same {
                        continue;
                    }
                    // A file new to this directory may have moved here.
                    let moved = old.is_none()
                        && !empty_db
                        && exists
                            .exists(params![e.dev as i64, e.ino as i64])
                            .map_err(dberr)?;
                    let changed = upsert
                        .execute(params![
                            e.dev as i64,
                            e.ino as i64,
                            id,
                            e.name,
                            e.size as i64,
                            e.alloc as i64,
                            e.mtime_ns,
                            e.btime_ns
                        ])
                        .map_err(dberr)?;
                    debug_assert_eq!(changed, 1);
                    if old.is_some() || moved {
                        stats.changed += 1;
                    } else {
                        stats.added += 1;
                    }
                }
                missing.extend(known.into_keys().map(|(d, i)| (d, i, id)));
            }
            let mut delete = tx
                .prepare("DELETE FROM files WHERE dev = ?1 AND ino = ?2 AND dir = ?3")
                .map_err(dberr)?;
            for (dev, ino, dir) in missing {
                stats.removed += delete
                    .execute(params![dev as i64, ino as i64, dir])
                    .map_err(dberr)? as u64;
            }
            // Directories under the root that the walk did not see are gone.
            let mut prefix = root.as_os_str().as_bytes().to_vec();
            let gone: Vec<i64> = dirs
                .iter()
                .filter(|(p, id)| {
                    !visited.contains(id)
                        && (p.as_slice() == prefix.as_slice() || {
                            prefix.push(b'/');
                            let under = p.starts_with(&prefix);
                            prefix.pop();
                            under
                        })
                })
                .map(|(_, &id)| id)
                .collect();
            let mut delete_files = tx
                .prepare("DELETE FROM files WHERE dir = ?1")
                .map_err(dberr)?;
            let mut delete_dir = tx
                .prepare("DELETE FROM dirs WHERE id = ?1")
                .map_err(dberr)?;
            for id in gone {
                stats.removed += delete_files.execute([id]).map_err(dberr)? as u64;
                delete_dir.execute([id]).map_err(dberr)?;
            }
        }
        let (walked, problems) = walker.join().unwrap_or_else(|_| {
            (
                Err(std::io::Error::other("the walk thread panicked")),
                vec![],
            )
        });
        if let Err(source) = walked {
            // The root itself is unreadable: change nothing.
            drop(tx);
            return Err(StoreError::Io {
                path: root.into(),
                source,
            });
        }
        tx.commit().map_err(dberr)?;
        stats.problems = problems
            .into_iter()
            .map(|p| format!("{}: {}", p.path.display(), p.error))
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
            "SELECT f.dev, f.ino, d.path, f.name, f.size, f.alloc, f.mtime_ns, f.btime_ns,
                    f.generation, f.last_refresh, {cols}
             FROM files f JOIN dirs d ON f.dir = d.id {join}
             WHERE d.path = ?1 OR substr(d.path, 1, ?2) = ?3"
        );
        let mut q = self.db(self.conn.prepare(&sql))?;
        let rows = self.db(
            q.query_map(params![root_b, under.len() as i64, under], |r| {
                let dir: Vec<u8> = r.get(2)?;
                let name: Vec<u8> = r.get(3)?;
                let f = FileRecord {
                    dev: r.get::<_, i64>(0)? as u64,
                    ino: r.get::<_, i64>(1)? as u64,
                    path: Path::new(OsStr::from_bytes(&dir)).join(OsStr::from_bytes(&name)),
                    size: r.get::<_, i64>(4)? as u64,
                    alloc: r.get::<_, i64>(5)? as u64,
                    mtime_ns: r.get(6)?,
                    btime_ns: r.get(7)?,
                    generation: r.get(8)?,
                    last_refresh: r.get(9)?,
                };
                let x: Option<i64> = r.get(10)?;
                let y: Option<i64> = r.get(11)?;
                Ok((f, x.zip(y)))
            }),
        )?;
        for r in rows {
            each(self.db(r)?);
        }
        Ok(())
    }

    /// Records a completed refresh of (dev, ino) at `when`.
    pub fn mark_refreshed(
        &self,
        dev: u64,
        ino: u64,
        when: i64,
        generation: Option<u32>,
    ) -> Result<bool, StoreError> {
        let n = self.db(self.conn.execute(
            "UPDATE files SET last_refresh = ?3, generation = COALESCE(?4, generation)
             WHERE dev = ?1 AND ino = ?2",
            params![dev as i64, ino as i64, when, generation],
        ))?;
        Ok(n == 1)
    }

    /// Records that `done` planned bytes of the file are refreshed. The
    /// file's identity and state (btime, mtime, size) are kept with it: a
    /// file changed since is planned afresh instead of resumed.
    pub fn save_checkpoint(&self, f: &FileRecord, done: u64) -> Result<(), StoreError> {
        self.db(self.conn.execute(
            "INSERT INTO checkpoints (dev, ino, btime_ns, mtime_ns, size, done, updated)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (dev, ino) DO UPDATE SET btime_ns = excluded.btime_ns,
                 mtime_ns = excluded.mtime_ns, size = excluded.size, done = excluded.done,
                 updated = excluded.updated",
            params![
                f.dev as i64,
                f.ino as i64,
                f.btime_ns,
                f.mtime_ns,
                f.size as i64,
                done as i64,
                super::now_secs()
            ],
        ))?;
        Ok(())
    }

    /// Bytes already done for `f`, if a checkpoint matches it as it is now;
    /// a checkpoint for a changed file is dropped.
    pub fn resume_point(&self, f: &FileRecord) -> Result<u64, StoreError> {
        let row: Option<(i64, i64, i64, i64)> = self.db(
            self.conn
                .query_row(
                    "SELECT btime_ns, mtime_ns, size, done FROM checkpoints WHERE dev = ?1 AND ino = ?2",
                    params![f.dev as i64, f.ino as i64],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional(),
        )?;
        match row {
            Some((b, m, s, done)) if b == f.btime_ns && m == f.mtime_ns && s as u64 == f.size => {
                Ok(done as u64)
            }
            Some(_) => {
                self.clear_checkpoint(f.dev, f.ino)?;
                Ok(0)
            }
            None => Ok(0),
        }
    }

    /// Checkpoints of files under `root`: (file as last scanned, the
    /// checkpoint's mtime, when it was last updated).
    pub fn checkpoints(&self, root: &Path) -> Result<Vec<(FileRecord, i64, i64)>, StoreError> {
        Ok(self
            .files_where(
                root,
                "JOIN checkpoints c ON c.dev = f.dev AND c.ino = f.ino",
                "c.mtime_ns, c.updated",
            )?
            .into_iter()
            .filter_map(|(f, c)| c.map(|(mtime, updated)| (f, mtime, updated)))
            .collect())
    }

    /// What fresh data read at on the drive with identity `drive` (its
    /// wwid, or model and serial: it survives renames and reboots), and
    /// when that was measured.
    pub fn baseline(&self, drive: &str) -> Result<Option<(f64, i64)>, StoreError> {
        Ok(self.baseline_written(drive)?.map(|(b, at, _)| (b, at)))
    }

    /// [`Store::baseline`], with the drive's cumulative bytes written
    /// (diskstats) when it was measured.
    pub fn baseline_written(
        &self,
        drive: &str,
    ) -> Result<Option<(f64, i64, Option<u64>)>, StoreError> {
        self.db(self
            .conn
            .query_row(
                "SELECT fresh_bps, at, written FROM baselines WHERE drive = ?1",
                [drive],
                |r| {
                    let w: Option<i64> = r.get(2)?;
                    Ok((r.get(0)?, r.get(1)?, w.map(|w| w as u64)))
                },
            )
            .optional())
    }

    /// Records a fresh-data measurement: smoothed with the one before (a
    /// single busy round does not move the baseline far).
    pub fn record_baseline(
        &self,
        drive: &str,
        fresh_bps: f64,
        at: i64,
        written: Option<u64>,
    ) -> Result<(), StoreError> {
        let next = match self.baseline(drive)? {
            Some((old, _)) => 0.7 * old + 0.3 * fresh_bps,
            None => fresh_bps,
        };
        self.db(self.conn.execute(
            "INSERT INTO baselines (drive, fresh_bps, at, written) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (drive) DO UPDATE SET fresh_bps = excluded.fresh_bps, at = excluded.at,
                 written = excluded.written",
            params![drive, next, at, written.map(|w| w as i64)],
        ))?;
        Ok(())
    }

    pub fn clear_checkpoint(&self, dev: u64, ino: u64) -> Result<(), StoreError> {
        self.db(self.conn.execute(
            "DELETE FROM checkpoints WHERE dev = ?1 AND ino = ?2",
            params![dev as i64, ino as i64],
        ))?;
        Ok(())
    }

    /// Number of file rows.
    pub fn count(&self) -> Result<u64, StoreError> {
        self.db(self
            .conn
            .query_row("SELECT COUNT(*) FROM files", [], |r| r.get::<_, i64>(0)))
            .map(|n| n as u64)
    }
}
