//! The daemon's drives: the placed drives (see `placement`), each with its
//! controller; the trees that cannot be watched, apart, with why.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::Config;

use super::placement;
use super::{topology, DriveCell};

/// Trees that cannot be watched, with why.
pub type Unwatched = Vec<(PathBuf, String)>;

/// The configured trees as the daemon's drives, and the trees that cannot
/// be watched (logged, and shown by `status`).
pub fn drive_cells(cfg: &Config) -> (Vec<Arc<DriveCell>>, Unwatched) {
    let (placed, unplaced) = placement::place(cfg);
    let unwatched = unplaced
        .into_iter()
        .map(|u| {
            tracing::error!("{}: this tree is not watched", u.why);
            (u.path, u.why)
        })
        .collect();
    let sys = Path::new("/sys");
    let cells = placed
        .into_iter()
        .map(|p| {
            let controller = p.drives.first().map_or_else(
                || "unknown".into(),
                |d| topology::controller_of(sys, &d.name),
            );
            Arc::new(
                DriveCell::new(p.label, p.drives, p.roots)
                    .with_controller(controller)
                    .with_group(p.group),
            )
        })
        .collect();
    (cells, unwatched)
}
