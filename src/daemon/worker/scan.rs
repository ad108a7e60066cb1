//! A rescan of the drive's trees, and what is stale on it.

use crate::config::Settings;
use crate::inventory::{self, Store};

use super::super::shared::{DriveCell, Shared};

/// Rescans the drive's trees and counts what is stale, streaming the
/// inventory (no list of files is kept).
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
    let now = inventory::now_secs();
    let (mut files, mut stale_files, mut stale_bytes) = (0u64, 0u64, 0u64);
    let mut wrong_clock = 0u64;
    for root in &cell.roots {
        let counted = store.for_each_file(root, &mut |f| {
            files += 1;
            wrong_clock += u64::from(f.from_a_wrong_clock(now));
            if f.data_age(now) >= s.stale_after {
                stale_files += 1;
                stale_bytes += f.data_bytes();
            }
        });
        if let Err(e) = counted {
            error = Some(e.to_string());
        }
    }
    if wrong_clock > 0 {
        tracing::warn!(
            files = wrong_clock,
            "timestamps in the future (mtime or last refresh more than {} s ahead: a clock \
             that was wrong): those files count as of unknown age, so they are due; they \
             are never taken for fresh",
            crate::clock::FUTURE_TOLERANCE
        );
    }
    let mut st = cell.lock();
    st.files = files;
    st.stale_files = stale_files;
    st.stale_bytes = stale_bytes;
    st.last_scan = Some(now);
    st.error = error;
}
