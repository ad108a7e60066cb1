//! The drives' forecast rounds, kept so that a restarted daemon — an
//! upgrade, a reboot — forecasts from the days before it, not from its
//! own first rounds. One row per drive: what `policy::forecast::History`
//! keeps, as its JSON (the store does not read it), written whole after
//! every sampling round (at most 128 rounds of a few buckets: tens of KiB,
//! every `sample_interval`).

use rusqlite::{params, OptionalExtension};

use super::{Store, StoreError};

impl Store {
    /// The rounds kept for `drive`, as written; `None` if none were.
    pub fn forecast_rounds(&self, drive: &str) -> Result<Option<String>, StoreError> {
        self.db(self
            .conn
            .query_row(
                "SELECT rounds FROM forecast_history WHERE drive = ?1",
                [drive],
                |r| r.get(0),
            )
            .optional())
    }

    /// Keeps exactly `rounds` for `drive` (what its history holds now).
    pub fn keep_forecast_rounds(&self, drive: &str, rounds: &str) -> Result<(), StoreError> {
        let _turn = self.turns.statement();
        self.db(self.conn.execute(
            "INSERT INTO forecast_history (drive, rounds) VALUES (?1, ?2)
             ON CONFLICT (drive) DO UPDATE SET rounds = excluded.rounds",
            params![drive, rounds],
        ))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn raw(dir: &std::path::Path) -> rusqlite::Connection {
        rusqlite::Connection::open(dir.join("state.db")).unwrap()
    }

    /// Kept per drive, whole, and read back after a reopen (a restart).
    #[test]
    fn rounds_are_kept_per_drive_across_a_reopen() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("state");
        {
            let s = Store::open(&dir).unwrap();
            assert_eq!(s.forecast_rounds("a").unwrap(), None);
            s.keep_forecast_rounds("a", "[1,2]").unwrap();
            s.keep_forecast_rounds("b", "[3]").unwrap();
        }
        let s = Store::open(&dir).unwrap();
        assert_eq!(s.forecast_rounds("a").unwrap().as_deref(), Some("[1,2]"));
        assert_eq!(s.forecast_rounds("b").unwrap().as_deref(), Some("[3]"));
        s.keep_forecast_rounds("a", "[2,4]").unwrap();
        assert_eq!(s.forecast_rounds("a").unwrap().as_deref(), Some("[2,4]"));
    }

    /// A database of schema 2 from before the table (the daemon before
    /// this one) gets it when opened, and its version stays 2.
    #[test]
    fn a_database_from_before_the_table_gets_it_and_keeps_its_version() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("state");
        drop(Store::open(&dir).unwrap());
        raw(&dir)
            .execute_batch("DROP TABLE forecast_history;")
            .unwrap();
        let s = Store::open(&dir).unwrap();
        s.keep_forecast_rounds("a", "[1]").unwrap();
        assert_eq!(s.forecast_rounds("a").unwrap().as_deref(), Some("[1]"));
        let version: i64 = raw(&dir)
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(version, super::super::SCHEMA_VERSION);
    }
}
