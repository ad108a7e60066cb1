//! `refreshd refresh --stale-after`: the files found in directories whose
//! data is younger are left alone. Their age is what the daemon would
//! say (`clock::data_age`: the later of the mtime and the daemon's last
//! refresh of the file, read from its state database when there is one).
//! Files named on the command line are always refreshed: asked for by
//! name, they are taken as meant.

use std::path::Path;
use std::time::Duration;

use crate::inventory::{FileKey, Store};
use crate::walk::Found;

/// Decides which found files are old enough.
#[derive(Debug)]
pub struct AgeFilter {
    stale_after: Duration,
    now: i64,
    /// The daemon's record, when it could be read.
    record: Option<Store>,
    /// Why the daemon's record is not used (said once).
    pub note: Option<String>,
}

impl AgeFilter {
    /// A filter for `stale_after`, reading the daemon's record in
    /// `state_dir` when there is one.
    pub fn new(stale_after: Duration, state_dir: &Path) -> AgeFilter {
        let (record, note) = if state_dir.join("state.db").exists() {
            match Store::open_read_only(state_dir) {
                Ok(s) => (Some(s), None),
                Err(e) => (
                    None,
                    Some(format!(
                        "the daemon's record is not used ({e}): ages are by mtime"
                    )),
                ),
            }
        } else {
            let shown = crate::pathtext::text(state_dir);
            (
                None,
                Some(format!("no daemon record in {shown}: ages are by mtime")),
            )
        };
        AgeFilter {
            stale_after,
            now: crate::clock::now_secs(),
            record,
            note,
        }
    }

    /// Whether the file is due: named on the command line, or its data is
    /// at least `stale_after` old.
    pub fn due(&self, f: &Found) -> bool {
        let Some(l) = f.listed else {
            return true;
        };
        let refreshed = match (&self.record, l.fs) {
            (Some(store), Some(fs)) => store
                .last_refresh(FileKey { fs, ino: l.ino })
                .ok()
                .flatten(),
            _ => None,
        };
        crate::clock::data_age(l.mtime, refreshed, self.now) >= self.stale_after
    }
}
