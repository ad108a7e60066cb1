//! The drives' forecast rounds (what `policy::forecast::History` keeps),
//! so that a restarted daemon — an upgrade, a reboot — forecasts from the
//! days before it, not from its own first rounds. One row per drive: its
//! kept rounds as JSON, written whole after every sampling round (at most
//! 128 rounds of a few buckets: tens of KiB, every `sample_interval`).

use rusqlite::types::Type;
use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::{Store, StoreError};

/// One sampling round as the forecast keeps it: when (Unix seconds), its
/// fresh reference (bytes/s), and each age bucket's mean age (months)
/// and median throughput (bytes/s).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForecastRound {
    pub at: i64,
    pub fresh_bps: f64,
    pub buckets: Vec<(f64, f64)>,
}

impl Store {
    /// The rounds kept for `drive` (oldest first); none if nothing was
    /// kept. A row that does not read back is an error (the caller starts
    /// the drive's history afresh and says so).
    pub fn forecast_rounds(&self, drive: &str) -> Result<Vec<ForecastRound>, StoreError> {
        let row: Option<String> = self.db(self
            .conn
            .query_row(
                "SELECT rounds FROM forecast_history WHERE drive = ?1",
                [drive],
                |r| r.get(0),
            )
            .optional())?;
        let Some(json) = row else {
            return Ok(vec![]);
        };
        self.db(serde_json::from_str(&json)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, Type::Text, Box::new(e))))
    }

    /// Keeps exactly `rounds` for `drive` (what its history holds now).
    pub fn keep_forecast_rounds(
        &self,
        drive: &str,
        rounds: &[ForecastRound],
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(rounds).unwrap_or_else(|_| "[]".into());
        let _turn = self.turns.statement();
        self.db(self.conn.execute(
            "INSERT INTO forecast_history (drive, rounds) VALUES (?1, ?2)
             ON CONFLICT (drive) DO UPDATE SET rounds = excluded.rounds",
            params![drive, json],
        ))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn round(at: i64) -> ForecastRound {
        ForecastRound {
            at,
            fresh_bps: 5.0e8,
            buckets: vec![(1.35, 2.1e8), (0.95, 4.4e8)],
        }
    }

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
            assert_eq!(s.forecast_rounds("a").unwrap(), vec![]);
            s.keep_forecast_rounds("a", &[round(1), round(2)]).unwrap();
            s.keep_forecast_rounds("b", &[round(3)]).unwrap();
        }
        let s = Store::open(&dir).unwrap();
        assert_eq!(s.forecast_rounds("a").unwrap(), vec![round(1), round(2)]);
        assert_eq!(s.forecast_rounds("b").unwrap(), vec![round(3)]);
        s.keep_forecast_rounds("a", &[round(2), round(4)]).unwrap();
        assert_eq!(s.forecast_rounds("a").unwrap(), vec![round(2), round(4)]);
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
        s.keep_forecast_rounds("a", &[round(1)]).unwrap();
        assert_eq!(s.forecast_rounds("a").unwrap(), vec![round(1)]);
        let version: i64 = raw(&dir)
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(version, super::super::SCHEMA_VERSION);
    }

    /// A row that does not read back is an error naming the database,
    /// not an empty history passed off as the truth.
    #[test]
    fn a_row_that_does_not_read_back_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("state");
        let s = Store::open(&dir).unwrap();
        raw(&dir)
            .execute(
                "INSERT INTO forecast_history (drive, rounds) VALUES ('a', '[{\"at\":')",
                [],
            )
            .unwrap();
        let err = s.forecast_rounds("a").unwrap_err().to_string();
        assert!(err.contains("state.db"), "{err}");
    }
}
