//! The scan's write transactions: committed in groups of at most
//! [`GROUP_TIME`] or [`GROUP_ROWS`] changed rows, so that another drive's
//! checkpoint write never waits behind a whole tree's walk.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::turns::{Turn, Turns};

/// Longest a scan holds the write lock at once.
pub const GROUP_TIME: Duration = Duration::from_millis(25);
/// Most rows changed in one transaction.
pub const GROUP_ROWS: u64 = 4096;

/// A write transaction that is committed in groups and rolled back if
/// dropped open (an error part way).
pub(super) struct Group<'c> {
    pub(super) conn: &'c Connection,
    pub(super) turns: &'c Arc<Turns>,
    /// While a transaction is open: this writer's turn, and since when.
    pub(super) open: Option<(Turn, Instant)>,
    pub(super) rows: u64,
}

impl<'c> Group<'c> {
    pub(super) fn begin(&mut self) -> rusqlite::Result<()> {
        if self.open.is_none() {
            // Our turn first (first come, first served among this
            // process's writers), then IMMEDIATE: the write lock up front,
            // waiting (busy_timeout) for another process's writer instead
            // of failing when upgrading.
            let turn = self.turns.batch();
            self.conn.execute_batch("BEGIN IMMEDIATE")?;
            self.open = Some((turn, Instant::now()));
            self.rows = 0;
        }
        Ok(())
    }

    /// Commits when the group is long enough.
    pub(super) fn maybe_commit(&mut self) -> rusqlite::Result<()> {
        match self.open {
            Some((_, t)) if t.elapsed() >= GROUP_TIME || self.rows >= GROUP_ROWS => self.commit(),
            _ => Ok(()),
        }
    }

    pub(super) fn commit(&mut self) -> rusqlite::Result<()> {
        if self.open.take().is_some() {
            self.conn.execute_batch("COMMIT")?;
        }
        Ok(())
    }
}

impl Drop for Group<'_> {
    fn drop(&mut self) {
        if self.open.is_some() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}
