//! A rescan of the drive's trees, and what is stale on it.

use crate::config::Settings;
use crate::inventory::{self, Store};

use super::super::round::take_stock;

use super::super::shared::{DriveCell, Shared};

/// Rescans the drive's trees, then takes stock: what is stale and the plan,
/// streaming the inventory (only the stale files are kept).
pub(super) fn scan(shared: &Shared, store: &mut Store, cell: &DriveCell, s: &Settings) {
    let mut error = None;
    let mut unreadable = 0;
    for root in &cell.roots {
        match store.scan(root) {
            Ok(stats) => {
                unreadable += stats.unreadable;
                if stats.unreadable > 0 {
                    tracing::warn!(
                        root = %crate::pathtext::Log(root),
                        unreadable = stats.unreadable,
                        "the scan could not read some directories: their files keep their records"
                    );
                }
                tracing::debug!(
                    files = stats.files,
                    seconds = stats.seconds,
                    root = %crate::pathtext::Log(root),
                    "scanned"
                );
                for p in stats.problems.iter().take(20) {
                    tracing::warn!("{p}");
                }
            }
            Err(e) => {
                tracing::error!("{e}");
                error = Some(e.to_string());
            }
        }
    }
    shared
        .metrics
        .scan_unreadable
        .get_or_create(&crate::daemon::metrics::Dev {
            device: cell.label.clone(),
        })
        .set(i64::try_from(unreadable).unwrap_or(i64::MAX));
    // The counts and the plan from one pass: what status, `plan` and the
    // metrics show agree.
    let stock = take_stock(cell, store, s, false, None);
    if stock.wrong_clock > 0 {
        tracing::warn!(
            files = stock.wrong_clock,
            "timestamps in the future (mtime or last refresh more than {} s ahead: a clock \
             that was wrong): those files count as of unknown age, so they are due; they \
             are never taken for fresh",
            crate::clock::FUTURE_TOLERANCE
        );
    }
    shared
        .metrics
        .set_stale_bytes(&cell.label, stock.stale_bytes);
    let mut st = cell.lock();
    st.files = stock.files;
    st.stale_files = stock.stale_files;
    st.stale_bytes = stock.stale_bytes;
    st.plan = stock.plan;
    st.last_scan = Some(inventory::now_secs());
    st.error = error.or(stock.error);
}
