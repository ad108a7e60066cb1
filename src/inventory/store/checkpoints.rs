//! Checkpoints (how far a file's refresh got, with the file's identity
//! and state, so a changed file is planned afresh) and drive baselines.

use std::path::Path;

use rusqlite::{params, OptionalExtension};

use super::{Store, StoreError};
use crate::clock::Timestamp;
use crate::inventory::record::{FileKey, FileRecord};

impl Store {
    /// Records that `done` planned bytes of the file are refreshed. The
    /// file's identity and state (btime, mtime, size) are kept with it: a
    /// file changed since is planned afresh instead of resumed.
    pub fn save_checkpoint(&self, f: &FileRecord, done: u64) -> Result<(), StoreError> {
        let _turn = self.turns.statement();
        self.db(self.conn.execute(
            "INSERT INTO checkpoints (fs, ino, btime_s, btime_nsec, mtime_s, mtime_nsec, size,
                                      done, updated)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (fs, ino) DO UPDATE SET btime_s = excluded.btime_s,
                 btime_nsec = excluded.btime_nsec, mtime_s = excluded.mtime_s,
                 mtime_nsec = excluded.mtime_nsec, size = excluded.size, done = excluded.done,
                 updated = excluded.updated",
            params![
                f.fs.key(),
                f.ino as i64,
                f.btime.map(|b| b.sec),
                f.btime.map(|b| b.nsec),
                f.mtime.sec,
                f.mtime.nsec,
                f.size as i64,
                done as i64,
                crate::clock::now_secs()
            ],
        ))?;
        Ok(())
    }

    /// Bytes already done for `f`, if a checkpoint matches it as it is now;
    /// a checkpoint for a changed file is dropped.
    pub fn resume_point(&self, f: &FileRecord) -> Result<u64, StoreError> {
        type Row = (Option<i64>, Option<i64>, i64, i64, i64, i64);
        let row: Option<Row> = self.db(self
            .conn
            .query_row(
                "SELECT btime_s, btime_nsec, mtime_s, mtime_nsec, size, done
                     FROM checkpoints WHERE fs = ?1 AND ino = ?2",
                params![f.fs.key(), f.ino as i64],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
                },
            )
            .optional())?;
        let Some((bs, bn, ms, mn, size, done)) = row else {
            return Ok(0);
        };
        let btime = bs.zip(bn).map(|(s, n)| Timestamp::new(s, n as u32));
        if btime == f.btime && Timestamp::new(ms, mn as u32) == f.mtime && size as u64 == f.size {
            return Ok(done as u64);
        }
        self.clear_checkpoint(f.key())?;
        Ok(0)
    }

    /// Checkpoints of files under `root`: (file as last scanned, the
    /// checkpoint's mtime, when it was last updated).
    pub fn checkpoints(
        &self,
        root: &Path,
    ) -> Result<Vec<(FileRecord, Timestamp, i64)>, StoreError> {
        let rows = self.files_where(
            root,
            "JOIN checkpoints c ON c.fs = f.fs AND c.ino = f.ino",
            "c.mtime_s, c.updated",
        )?;
        let mut out = vec![];
        for (f, c) in rows {
            let Some((mtime_s, updated)) = c else {
                continue;
            };
            let nsec: Option<i64> = self.db(self
                .conn
                .query_row(
                    "SELECT mtime_nsec FROM checkpoints WHERE fs = ?1 AND ino = ?2",
                    params![f.fs.key(), f.ino as i64],
                    |r| r.get(0),
                )
                .optional())?;
            out.push((
                f,
                Timestamp::new(mtime_s, nsec.unwrap_or(0) as u32),
                updated,
            ));
        }
        Ok(out)
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
        let _turn = self.turns.statement();
        self.db(self.conn.execute(
            "INSERT INTO baselines (drive, fresh_bps, at, written) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (drive) DO UPDATE SET fresh_bps = excluded.fresh_bps, at = excluded.at,
                 written = excluded.written",
            params![drive, next, at, written.map(|w| w as i64)],
        ))?;
        Ok(())
    }

    pub fn clear_checkpoint(&self, key: FileKey) -> Result<(), StoreError> {
        let _turn = self.turns.statement();
        self.db(self.conn.execute(
            "DELETE FROM checkpoints WHERE fs = ?1 AND ino = ?2",
            params![key.fs.key(), key.ino as i64],
        ))?;
        Ok(())
    }
}
