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
/// (`sample::forecast_key`). Rounds that do not parse are lost (said in
/// the log: the forecast starts afresh). A database that cannot be asked
/// for them (a table of another refreshd, after a downgrade) is an error:
/// the drive works on without them, and does not overwrite them.
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

/// After a (re)open: the drive's last refresh and forecast rounds as the
/// database remembers them, where the drive has none yet.
fn restore(store: &Store, cell: &DriveCell) {
    let last = last_refresh(store, cell);
    let kept = kept_forecast(store, cell);
    let mut st = cell.lock();
    if st.last_refresh.is_none() {
        st.last_refresh = last;
    }
    match kept {
        Ok(Some(h)) if st.ages.is_empty() => st.ages = h,
        Ok(_) => {}
        Err(e) => {
            tracing::warn!("the forecast's rounds before the restart cannot be read ({e}): not kept by this run");
            st.kept_rounds_unread = true;
        }
    }
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
        match Store::open(&shared.config().state_dir) {
            Ok(s) => {
                up.set(1);
                restore(&s, cell);
                let mut st = cell.lock();
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

    /// A restart: the rounds come back; rounds that do not parse are
    /// dropped; a database that cannot be asked for them (a table of
    /// another refreshd) is served without them, and they are not
    /// overwritten (never taken for "no rounds").
    #[test]
    fn kept_rounds_come_back_and_unreadable_ones_are_not_overwritten() {
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
        let open = || {
            let (shared, cell) = shared_with_drives(
                state.clone(),
                &tmp.path().join("j"),
                vec![drive("sda", "w")],
            );
            let (s2, c2) = (shared.clone(), cell.clone());
            let worker = std::thread::spawn(move || open_store(&s2, &c2).is_some());
            (worker, cell)
        };
        Store::open(&state)
            .and_then(|s| s.keep_forecast_rounds("w", &h.to_json()))
            .unwrap_or_else(|e| panic!("{e}"));
        let (worker, cell) = open();
        assert!(worker.join().unwrap_or(false));
        assert_eq!(cell.lock().ages.len(), 2, "the rounds came back");
        assert!(cell.lock().rounds_to_keep(true).is_some());
        sql("UPDATE forecast_history SET rounds = '[{\"at\":'");
        let (worker, cell) = open();
        assert!(worker.join().unwrap_or(false), "served without them");
        assert!(cell.lock().ages.is_empty());
        // A table the query fails on: served, the rounds marked unread.
        sql("DROP TABLE forecast_history; CREATE TABLE forecast_history (drive TEXT PRIMARY KEY, x TEXT);");
        let (worker, cell) = open();
        assert!(worker.join().unwrap_or(false), "served without them");
        let st = cell.lock();
        assert!(st.ages.is_empty() && st.kept_rounds_unread);
        assert_eq!(st.rounds_to_keep(true), None, "theirs are not overwritten");
    }
}
