//! The drive's connection to the state database.

use std::time::Duration;

use crate::inventory::{ForecastRound, Store};
use crate::policy::forecast;

use super::super::shared::{DriveCell, Shared};

/// When a file under the drive's trees was last refreshed, from the
/// database (the status after a restart).
pub(super) fn last_refresh(store: &Store, cell: &DriveCell) -> Option<i64> {
    cell.roots
        .iter()
        .filter_map(|root| store.last_refresh_under(root).ok().flatten())
        .max()
}

/// The drive's forecast rounds of before a restart; none (said in the
/// log) if they do not read back: the forecast starts afresh.
fn forecast_rounds(store: &Store, cell: &DriveCell) -> Vec<ForecastRound> {
    store
        .forecast_rounds(&super::sample::drive_identity(cell))
        .unwrap_or_else(|e| {
            tracing::warn!("the forecast's rounds before the restart are lost: {e}");
            vec![]
        })
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
                let last = last_refresh(&s, cell);
                let rounds = forecast_rounds(&s, cell);
                let mut st = cell.lock();
                if st.last_refresh.is_none() {
                    // After a restart: what the database remembers.
                    st.last_refresh = last;
                }
                if st.ages.is_empty() {
                    st.ages = forecast::History::restored(rounds);
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
        let cfg = Config {
            state_dir: dir,
            ..Config::default()
        };
        let cell = Arc::new(DriveCell::new("test0".into(), vec![], vec![]));
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
}
