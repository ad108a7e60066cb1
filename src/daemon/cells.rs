//! The daemon's drives: the configured trees grouped by the drive(s) they
//! live on, each drive with its controller and fleet group; the trees that
//! cannot be watched, apart, with why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::{self, Config};
use crate::drive;

use super::{topology, DriveCell};

/// Trees that cannot be watched, with why.
pub type Unwatched = Vec<(PathBuf, String)>;

/// A drive being assembled: its members, trees, and fleet group.
struct Entry {
    drives: Vec<drive::Drive>,
    roots: Vec<PathBuf>,
    group: Option<String>,
}

/// Groups the configured trees by the drive(s) they live on; the trees
/// that cannot be watched (missing, a symlink, an unsupported filesystem,
/// no drive found, a second fleet group on one drive) are returned apart,
/// with the reason.
pub fn drive_cells(cfg: &Config) -> (Vec<Arc<DriveCell>>, Unwatched) {
    let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
    let mut unwatched = vec![];
    let default_group = cfg.coordination.as_ref().map(|c| c.group.clone());
    for p in &cfg.paths {
        if let Some(why) = config::trees::tree_problem(&p.path) {
            tracing::error!("{why}: this tree is not watched");
            unwatched.push((p.path.clone(), why));
            continue;
        }
        let ds = match drive::drives_of(&p.path) {
            Ok(ds) => ds,
            Err(e) => {
                tracing::error!("{e}: this tree is not watched");
                unwatched.push((p.path.clone(), e.to_string()));
                continue;
            }
        };
        let label = ds
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join("+");
        let group = p.group.clone().or_else(|| default_group.clone());
        let e = entries.entry(label.clone()).or_insert_with(|| Entry {
            drives: ds,
            roots: vec![],
            group: group.clone(),
        });
        if e.group != group {
            let why = format!(
                "tree {} is on drive {label} with {}, but names fleet group {}: a drive refreshes under one group",
                p.path.display(),
                e.roots.first().map_or_else(String::new, |r| format!("{} (group {})", r.display(), e.group.as_deref().unwrap_or("none"))),
                group.as_deref().unwrap_or("none"),
            );
            tracing::error!("{why}; this tree is not watched");
            unwatched.push((p.path.clone(), why));
            continue;
        }
        e.roots.push(p.path.clone());
    }
    let sys = Path::new("/sys");
    let cells = entries
        .into_iter()
        .map(|(label, e)| {
            let controller = e.drives.first().map_or_else(
                || "unknown".into(),
                |d| topology::controller_of(sys, &d.name),
            );
            Arc::new(
                DriveCell::new(label, e.drives, e.roots)
                    .with_controller(controller)
                    .with_group(e.group),
            )
        })
        .collect();
    (cells, unwatched)
}
