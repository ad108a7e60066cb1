//! The drive's connection to the state database.

use std::time::Duration;

use crate::inventory::{Store, StoreError};
use crate::policy::forecast::History;

use super::super::shared::{DriveCell, Shared};

/// When a file under the drive's trees was last refreshed, from the
/// database (the status after a restart).
pub(super) fn last_refresh(store: &Store, cell: &DriveCell) -> Option<i64> {
    cell.roots
        .iter()
        .filter_map(|root| store.last_refresh_under(root).ok().flatten())
        .max()
}

/// The drive's forecast rounds of before a restart, if it keeps them
/// (`sample::forecast_key`). Rounds that do not read back are lost (said
/// in the log: the forecast starts afresh); a database that cannot be
/// asked is an error, retried as one that cannot be opened (so a
/// transient failure never overwrites the kept rounds with one round).
fn kept_forecast(store: &Store, cell: &DriveCell) -> Result<Option<History>, StoreError> {
    let Some(key) = super::sample::forecast_key(cell) else {
        return Ok(None);
    };
    let Some(json) = store.forecast_rounds(&key)? else {
        return Ok(None);
    };
    Ok(History::from_json(&json)
        .inspect_err(|e| tracing::warn!("the forecast's rounds before the restart are lost: {e}"))
        .ok())
}

/// Opens the state database, retrying with backoff (1 s doubling to 60 s)
/// while it fails: the drive shows the error in `refreshctl status` and
/// `refreshd_store_up{device} 0` until it opens. `None` when stopping.
pub(super) fn open_store(shared: &Shared, cell: &DriveCell) -> Option<Store> {
    let mut backoff = Duration::from_secs(1);
    let up = shared
        .metrics
        .store_up
        .get_or_create(&crate::daemon::metrics::Dev {
            device: cell.label.clone(),
        });
    loop {
        let opened =
            Store::open(&shared.config().state_dir).and_then(|s| Ok((kept_forecast(&s, cell)?, s)));
        match opened {
            Ok((kept, s)) => {
                up.set(1);
                let last = last_refresh(&s, cell);
                let mut st = cell.lock();
                if st.last_refresh.is_none() {
                    // After a restart: what the database remembers.
                    st.last_refresh = last;
                }
                if let Some(h) = kept.filter(|_| st.ages.is_empty()) {
                    st.ages = h;
                }
                if st
                    .error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("state database"))
                {
                    st.error = None;
                }
                return Some(s);
            }
            Err(e) => {
                up.set(0);
                tracing::error!("{e}; retrying in {backoff:?}");
                let mut st = cell.lock();
                st.error = Some(format!("state database: {e} (retrying in {backoff:?})"));
                let (_st, _) = cell
                    .wake
                    .wait_timeout(st, backoff)
                    .unwrap_or_else(|e| e.into_inner());
            }
        }
        if shared.stopping() {
            return None;
        }
        backoff = (backoff * 2).min(Duration::from_secs(60));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::sync::Arc;
    use std::time::Instant;

    fn shared_with_state_dir(
        dir: std::path::PathBuf,
        journal: &std::path::Path,
    ) -> (Arc<Shared>, Arc<DriveCell>) {
        shared_with_drives(dir, journal, vec![])
    }

    fn shared_with_drives(
        dir: std::path::PathBuf,
        journal: &std::path::Path,
        drives: Vec<crate::drive::Drive>,
    ) -> (Arc<Shared>, Arc<DriveCell>) {
        let cfg = Config {
            state_dir: dir,
            ..Config::default()
        };
        let cell = Arc::new(DriveCell::new("test0".into(), drives, vec![]));
        let shared = crate::daemon::Shared::for_tests(cfg, vec![cell.clone()], journal);
        (shared, cell)
    }

    #[test]
    fn a_store_that_fails_to_open_is_retried_shown_and_then_served() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let state = tmp.path().join("state");
        // A plain file where the state directory should be: open fails.
        std::fs::write(&state, b"not a directory").unwrap_or_else(|e| panic!("{e}"));
        let (shared, cell) = shared_with_state_dir(state.clone(), &tmp.path().join("j"));
        let (s2, c2) = (shared.clone(), cell.clone());
        let worker = std::thread::spawn(move || open_store(&s2, &c2).is_some());
        let t = Instant::now();
        while cell.lock().error.is_none() {
            assert!(t.elapsed() < Duration::from_secs(10), "no error shown");
            std::thread::sleep(Duration::from_millis(20));
        }
        let err = cell.lock().error.clone().unwrap_or_default();
        assert!(err.starts_with("state database"), "{err}");
        assert!(shared
            .metrics
            .encode()
            .contains("refreshd_store_up{device=\"test0\"} 0"));
        // The operator fixes it; the next attempt opens the store.
        std::fs::remove_file(&state).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir(&state).unwrap_or_else(|e| panic!("{e}"));
        assert!(worker.join().unwrap_or(false), "the store opened");
        assert_eq!(cell.lock().error, None, "the error is cleared");
        assert!(shared
            .metrics
            .encode()
            .contains("refreshd_store_up{device=\"test0\"} 1"));
    }

    fn drive(name: &str, id: &str) -> crate::drive::Drive {
        crate::drive::Drive {
            name: name.into(),
            dev: "8:0".into(),
            id: id.into(),
            model: None,
            serial: None,
        }
    }

    /// Two groups sharing a member keep their own rounds; a member known
    /// only by its kernel name keeps none (names can swap at a reboot).
    #[test]
    fn forecast_rounds_are_keyed_by_every_member() {
        use super::super::sample::forecast_key;
        let cell = |drives| DriveCell::new("x".into(), drives, vec![]);
        let one = forecast_key(&cell(vec![drive("sda", "wwn-a")]));
        let two = forecast_key(&cell(vec![drive("sdb", "wwn-b"), drive("sda", "wwn-a")]));
        assert_eq!(one.as_deref(), Some("wwn-a"));
        assert_eq!(two.as_deref(), Some("wwn-a+wwn-b"));
        assert_eq!(forecast_key(&cell(vec![drive("vda", "vda")])), None);
        assert_eq!(forecast_key(&cell(vec![])), None);
    }

    /// A restart: the rounds come back; rounds that do not read back are
    /// dropped (the drive still works); a database that cannot be asked is
    /// retried and shown, never taken for "no rounds".
    #[test]
    fn kept_rounds_come_back_and_an_unaskable_database_is_retried() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let state = tmp.path().join("state");
        let mut h = History::default();
        h.add_readings(5e8, vec![(1.3, 3e8), (0.9, 4e8)], 1_000);
        h.add_readings(5e8, vec![(1.31, 3e8)], 2_000);
        let sql = |q: &str| {
            let c = rusqlite::Connection::open(state.join("state.db"));
            c.and_then(|c| c.execute_batch(q))
                .unwrap_or_else(|e| panic!("{e}"));
        };
        let open = |what: &str| {
            let (shared, cell) = shared_with_drives(
                state.clone(),
                &tmp.path().join("j"),
                vec![drive("sda", "w")],
            );
            let (s2, c2) = (shared.clone(), cell.clone());
            let worker = std::thread::spawn(move || open_store(&s2, &c2).is_some());
            (worker, cell, what.to_string())
        };
        Store::open(&state)
            .and_then(|s| s.keep_forecast_rounds("w", &h.to_json()))
            .unwrap_or_else(|e| panic!("{e}"));
        let (worker, cell, _) = open("kept");
        assert!(worker.join().unwrap_or(false));
        assert_eq!(cell.lock().ages.len(), 2, "the rounds came back");
        sql("UPDATE forecast_history SET rounds = '[{\"at\":'");
        let (worker, cell, _) = open("garbled");
        assert!(worker.join().unwrap_or(false), "served without them");
        assert!(cell.lock().ages.is_empty());
        // A table the query fails on: the store is not served until fixed.
        sql("DROP TABLE forecast_history; CREATE TABLE forecast_history (drive TEXT PRIMARY KEY, x TEXT);");
        let (worker, cell, _) = open("unaskable");
        let t = Instant::now();
        while cell.lock().error.is_none() {
            assert!(t.elapsed() < Duration::from_secs(10), "no error shown");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!worker.is_finished(), "retrying, not served");
        sql("DROP TABLE forecast_history;");
        assert!(
            worker.join().unwrap_or(false),
            "served once it can be asked"
        );
    }
}
