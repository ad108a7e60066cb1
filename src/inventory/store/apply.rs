//! A walk applied to the database: per directory only differences are
//! written, in short transactions — one holds the write lock for at most
//! about `GROUP_TIME` (or `GROUP_ROWS` changed rows, see `group`), so another
//! drive's checkpoint write never waits behind a whole tree's walk. Rows
//! of files that are gone are deleted at the end, once every directory
//! was seen (a rename into a later directory keeps its history); rows
//! under a directory the walk could not read are kept.

use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};

use super::super::scan::{Batch, Entry, Walked};
use serde::Serialize;

use super::error::StoreError;
use super::group::Group;
use super::turns::Turns;
use crate::clock::Timestamp;
use crate::io::fsid::FsId;

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
    /// Directories (or entries) the walk could not read: their rows are
    /// kept, and the reasons are in `problems`.
    pub unreadable: u64,
    #[serde(skip)]
    pub problems: Vec<String>,
}

/// A row of a directory, as the database has it.
struct Known {
    fs: FsId,
    dev: u64,
    name: Vec<u8>,
    size: u64,
    alloc: u64,
    mtime: Timestamp,
    btime: Option<Timestamp>,
}

/// Applies what the walk sends to the rows under `root`.
pub(super) fn apply(
    conn: &Connection,
    path: &Path,
    turns: &Arc<Turns>,
    rx: Receiver<Walked>,
    stats: &mut ScanStats,
) -> Result<Applied, StoreError> {
    let db = |source| StoreError::Db {
        path: path.to_path_buf(),
        source,
    };
    let mut dirs: HashMap<Vec<u8>, i64> = HashMap::new();
    {
        let mut q = conn.prepare("SELECT id, path FROM dirs").map_err(db)?;
        let rows = q
            .query_map([], |r| Ok((r.get::<_, Vec<u8>>(1)?, r.get::<_, i64>(0)?)))
            .map_err(db)?;
        for row in rows {
            let (p, id) = row.map_err(db)?;
            dirs.insert(p, id);
        }
    }
    let mut a = Apply {
        conn,
        empty_db: dirs.is_empty(),
        dirs,
        root_fs: None,
        visited: HashSet::new(),
        linked: HashSet::new(),
        missing: vec![],
        group: Group {
            conn,
            turns,
            open: None,
            rows: 0,
        },
    };
    loop {
        // Never wait for the walk with the write lock held: a directory
        // slow to read would hold up every other writer.
        let msg = match rx.try_recv() {
            Ok(m) => m,
            Err(TryRecvError::Empty) => {
                a.group.commit().map_err(db)?;
                match rx.recv() {
                    Ok(m) => m,
                    Err(_) => break,
                }
            }
            Err(TryRecvError::Disconnected) => break,
        };
        match msg {
            Walked::Root(fs) => a.root_fs = Some(fs),
            Walked::Dir(batch) => {
                a.group.begin().map_err(db)?;
                a.dir(&batch, stats).map_err(db)?;
                a.group.maybe_commit().map_err(db)?;
            }
        }
    }
    a.group.commit().map_err(db)?;
    Ok(Applied {
        missing: a.missing,
        dirs: a.dirs,
        visited: a.visited,
    })
}

/// What the end of a scan settles: rows not seen in their directory, and
/// directories not visited.
pub(super) struct Applied {
    missing: Vec<(FsId, u64, i64)>,
    dirs: HashMap<Vec<u8>, i64>,
    visited: HashSet<i64>,
}

impl Applied {
    /// Deletes what is gone: rows missing from a fully read directory,
    /// and directories under `root` the walk did not visit — except under
    /// `unreadable` ones (a directory that cannot be read is not gone).
    pub(super) fn settle(
        self,
        conn: &Connection,
        turns: &Arc<Turns>,
        root: &Path,
        unreadable: &[PathBuf],
        stats: &mut ScanStats,
    ) -> rusqlite::Result<()> {
        let mut group = Group {
            conn,
            turns,
            open: None,
            rows: 0,
        };
        group.begin()?;
        {
            let mut delete =
                conn.prepare_cached("DELETE FROM files WHERE fs = ?1 AND ino = ?2 AND dir = ?3")?;
            for (fs, ino, dir) in &self.missing {
                stats.removed += delete.execute(params![fs.key(), *ino as i64, dir])? as u64;
            }
        }
        let under = |p: &[u8], r: &[u8]| {
            p == r || (p.starts_with(r) && (r.ends_with(b"/") || p.get(r.len()) == Some(&b'/')))
        };
        let root_b = root.as_os_str().as_bytes();
        let gone: Vec<i64> = self
            .dirs
            .iter()
            .filter(|(p, id)| {
                !self.visited.contains(id)
                    && under(p, root_b)
                    && !unreadable
                        .iter()
                        .any(|u| under(p, u.as_os_str().as_bytes()))
            })
            .map(|(_, &id)| id)
            .collect();
        let mut delete_files = conn.prepare_cached("DELETE FROM files WHERE dir = ?1")?;
        let mut delete_dir = conn.prepare_cached("DELETE FROM dirs WHERE id = ?1")?;
        for id in gone {
            stats.removed += delete_files.execute([id])? as u64;
            delete_dir.execute([id])?;
        }
        group.commit()
    }
}

struct Apply<'c> {
    conn: &'c Connection,
    empty_db: bool,
    dirs: HashMap<Vec<u8>, i64>,
    root_fs: Option<FsId>,
    visited: HashSet<i64>,
    /// Hard links seen (this boot's st_dev, ino): each file once.
    linked: HashSet<(u64, u64)>,
    missing: Vec<(FsId, u64, i64)>,
    group: Group<'c>,
}

impl Apply<'_> {
    fn dir_id(&mut self, dir: &Path) -> rusqlite::Result<(i64, bool)> {
        let key = dir.as_os_str().as_bytes().to_vec();
        if let Some(&id) = self.dirs.get(&key) {
            return Ok((id, true));
        }
        self.conn
            .prepare_cached("INSERT INTO dirs (path) VALUES (?1)")?
            .execute([&key])?;
        let id = self.conn.last_insert_rowid();
        self.dirs.insert(key, id);
        Ok((id, false))
    }

    fn known(&self, dir: i64) -> rusqlite::Result<HashMap<u64, Known>> {
        let mut q = self.conn.prepare_cached(
            "SELECT fs, ino, dev, name, size, alloc, mtime_s, mtime_nsec, btime_s, btime_nsec
             FROM files WHERE dir = ?1",
        )?;
        let rows = q.query_map([dir], |r| {
            let fs: String = r.get(0)?;
            let btime = match (r.get::<_, Option<i64>>(8)?, r.get::<_, Option<i64>>(9)?) {
                (Some(s), Some(n)) => Some(Timestamp::new(s, n as u32)),
                _ => None,
            };
            Ok((
                r.get::<_, i64>(1)? as u64,
                Known {
                    fs: FsId::parse(&fs).unwrap_or(FsId::Dev(0)),
                    dev: r.get::<_, i64>(2)? as u64,
                    name: r.get(3)?,
                    size: r.get::<_, i64>(4)? as u64,
                    alloc: r.get::<_, i64>(5)? as u64,
                    mtime: Timestamp::new(r.get(6)?, r.get::<_, i64>(7)? as u32),
                    btime,
                },
            ))
        })?;
        rows.collect()
    }

    fn dir(&mut self, batch: &Batch, stats: &mut ScanStats) -> rusqlite::Result<()> {
        stats.dirs += 1;
        let (id, existed) = self.dir_id(&batch.dir)?;
        self.visited.insert(id);
        let mut known = if existed {
            self.known(id)?
        } else {
            HashMap::new()
        };
        let Some(fs) = self.root_fs else {
            return Ok(());
        };
        for e in &batch.files {
            if e.nlink > 1 && !self.linked.insert((e.dev, e.ino)) {
                stats.extra_links += 1;
                continue;
            }
            stats.files += 1;
            stats.bytes += e.size;
            let mut old = known.remove(&e.ino);
            if let Some(o) = old.as_ref().filter(|o| o.fs != fs) {
                // Keyed on another identity: a record from before
                // identities were UUIDs (or the UUID changed). The same
                // file (same device this boot, or the same birth time)
                // keeps its history under the new key.
                let same = o.fs.holds(&fs, e.dev) || (o.btime.is_some() && o.btime == e.btime);
                if same {
                    self.rekey(o.fs, fs, e.ino)?;
                } else {
                    self.missing.push((o.fs, e.ino, id));
                    old = None;
                }
            }
            let unchanged = old.as_ref().is_some_and(|o| {
                o.name == e.name
                    && o.size == e.size
                    && o.alloc == e.alloc
                    && o.mtime == e.mtime
                    && o.btime == e.btime
                    && o.dev == e.dev
            });
            if unchanged {
                continue;
            }
            // A file new to this directory may have moved here.
            let moved = old.is_none() && !self.empty_db && self.exists(fs, e.ino)?;
            self.upsert(fs, id, e)?;
            self.group.rows += 1;
            if old.is_some() || moved {
                stats.changed += 1;
            } else {
                stats.added += 1;
            }
        }
        if batch.complete {
            self.missing
                .extend(known.into_iter().map(|(ino, k)| (k.fs, ino, id)));
        }
        Ok(())
    }

    fn exists(&self, fs: FsId, ino: u64) -> rusqlite::Result<bool> {
        self.conn
            .prepare_cached("SELECT 1 FROM files WHERE fs = ?1 AND ino = ?2")?
            .query_row(params![fs.key(), ino as i64], |_| Ok(()))
            .optional()
            .map(|r| r.is_some())
    }

    fn rekey(&mut self, from: FsId, to: FsId, ino: u64) -> rusqlite::Result<()> {
        for table in ["files", "checkpoints"] {
            self.conn
                .prepare_cached(&format!(
                    "UPDATE OR REPLACE {table} SET fs = ?2 WHERE fs = ?1 AND ino = ?3"
                ))?
                .execute(params![from.key(), to.key(), ino as i64])?;
        }
        self.group.rows += 1;
        Ok(())
    }

    fn upsert(&self, fs: FsId, dir: i64, e: &Entry) -> rusqlite::Result<()> {
        let n = self
            .conn
            .prepare_cached(
                "INSERT INTO files (fs, ino, dev, dir, name, size, alloc, mtime_s, mtime_nsec,
                                    btime_s, btime_nsec)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                 ON CONFLICT (fs, ino) DO UPDATE SET
                     dev = excluded.dev, dir = excluded.dir, name = excluded.name,
                     size = excluded.size, alloc = excluded.alloc,
                     mtime_s = excluded.mtime_s, mtime_nsec = excluded.mtime_nsec,
                     generation = CASE WHEN btime_s IS excluded.btime_s
                         AND btime_nsec IS excluded.btime_nsec THEN generation END,
                     last_refresh = CASE WHEN btime_s IS excluded.btime_s
                         AND btime_nsec IS excluded.btime_nsec THEN last_refresh END,
                     btime_s = excluded.btime_s, btime_nsec = excluded.btime_nsec",
            )?
            .execute(params![
                fs.key(),
                e.ino as i64,
                e.dev as i64,
                dir,
                e.name,
                e.size as i64,
                e.alloc as i64,
                e.mtime.sec,
                e.mtime.nsec,
                e.btime.map(|b| b.sec),
                e.btime.map(|b| b.nsec)
            ])?;
        debug_assert_eq!(n, 1);
        Ok(())
    }
}
