//! Where the configured trees are on this machine: grouped by the drive(s)
//! they live on, each drive with one fleet group and one set of settings.
//! A tree that cannot be watched (missing, a symlink, an unsupported
//! filesystem, no drive found, on a drive whose other tree names another
//! group or other settings) is set apart with why. The daemon watches the
//! placed drives and shows the others in `status`; `check-config` reports
//! the same reasons at their lines, so the two never disagree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::{Config, PathConfig, Position, Problem, Settings};
use crate::drive::{self, Drive};
use crate::io::syscalls::FsKind;
use crate::pathtext;

/// A drive with the trees on it.
#[derive(Debug, Clone)]
pub struct Placed {
    /// The drives' names joined with "+" (`sda`, `sdb+sdc` for btrfs raid).
    pub label: String,
    pub drives: Vec<Drive>,
    pub roots: Vec<PathBuf>,
    pub group: Option<String>,
    /// The settings of its trees (they agree).
    pub settings: Settings,
}

/// A tree that cannot be watched.
#[derive(Debug, Clone)]
pub struct Unplaced {
    pub path: PathBuf,
    /// Where the config says what is wrong.
    pub at: Position,
    pub why: String,
}

/// Groups the configured trees by the drive(s) they live on.
pub fn place(cfg: &Config) -> (Vec<Placed>, Vec<Unplaced>) {
    let mut placed: BTreeMap<String, (Placed, &PathConfig)> = BTreeMap::new();
    let mut unplaced = vec![];
    let default_group = cfg.coordination.as_ref().map(|c| c.group.clone());
    for tree in &cfg.paths {
        let refuse = |at: Position, why: String| Unplaced {
            path: tree.path.clone(),
            at,
            why,
        };
        if let Some(why) = tree_problem(&tree.path) {
            unplaced.push(refuse(tree.at, why));
            continue;
        }
        let drives = match drive::drives_of(&tree.path) {
            Ok(ds) => ds,
            Err(e) => {
                unplaced.push(refuse(tree.at, e.to_string()));
                continue;
            }
        };
        let label = drives
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join("+");
        let group = tree.group.clone().or_else(|| default_group.clone());
        let Some((drive, first)) = placed.get_mut(&label) else {
            let p = Placed {
                label: label.clone(),
                drives,
                roots: vec![tree.path.clone()],
                group,
                settings: tree.settings.clone(),
            };
            placed.insert(label, (p, tree));
            continue;
        };
        match clash(&label, drive, first, tree, group.as_deref()) {
            Some((at, why)) => unplaced.push(refuse(at, why)),
            None => drive.roots.push(tree.path.clone()),
        }
    }
    (placed.into_values().map(|(p, _)| p).collect(), unplaced)
}

/// Why a second tree cannot join a drive: another fleet group, or other
/// settings (a drive is sampled, judged and refreshed as one).
fn clash(
    label: &str,
    drive: &Placed,
    first: &PathConfig,
    tree: &PathConfig,
    group: Option<&str>,
) -> Option<(Position, String)> {
    let other = pathtext::text(&first.path);
    let this = pathtext::text(&tree.path);
    if drive.group.as_deref() != group {
        return Some((
            tree.at,
            format!(
                "tree {this} is on drive {label} with {other} (line {}, group {}) but names group {}: a drive refreshes under one group",
                first.at.0,
                drive.group.as_deref().unwrap_or("none"),
                group.unwrap_or("none"),
            ),
        ));
    }
    let keys = drive.settings.differences(&tree.settings);
    let key = *keys.first()?;
    let values: Vec<String> = keys
        .iter()
        .map(|k| {
            format!(
                "{k} = {} here, {} there",
                tree.settings.shown(k).unwrap_or_default(),
                drive.settings.shown(k).unwrap_or_default()
            )
        })
        .collect();
    let at = tree
        .set_at
        .get(key)
        .or_else(|| first.set_at.get(key))
        .copied();
    Some((
        at.unwrap_or(tree.at),
        format!(
            "tree {this} is on drive {label} with {other} (line {}) but its settings differ ({}): a drive is sampled and refreshed with one set of settings; give both entries the same values, or set them in [defaults]",
            first.at.0,
            values.join("; ")
        ),
    ))
}

/// Why a configured tree cannot be used now, or `None`.
pub fn tree_problem(path: &Path) -> Option<String> {
    let shown = pathtext::text(path);
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some(format!("tree {shown} does not exist"))
        }
        Err(e) => return Some(format!("tree {shown}: {e}")),
    };
    if meta.file_type().is_symlink() {
        return Some(format!(
            "tree {shown} is a symlink (symlinks are never followed; name the directory it points to)"
        ));
    }
    if !meta.is_dir() {
        return Some(format!("tree {shown} is not a directory"));
    }
    let magic = match rustix::fs::statfs(path) {
        Ok(s) => s.f_type,
        Err(e) => return Some(format!("tree {shown}: statfs: {e}")),
    };
    if FsKind::from_magic(magic).is_some() {
        return None;
    }
    let name = FsKind::other_name(magic)
        .map_or_else(|| format!("filesystem type {magic:#x}"), |n| n.to_string());
    Some(format!(
        "tree {shown} is on {name}, which refreshd does not rewrite (allowed: ext4, xfs, btrfs)"
    ))
}

/// Why the state directory cannot be used or created, or `None`. Run as
/// another user than root (who runs the daemon), a directory it may not
/// write is not a problem of the config.
pub fn state_dir_problem(dir: &Path) -> Option<String> {
    let shown = pathtext::text(dir);
    let mut at = dir;
    loop {
        match std::fs::symlink_metadata(at) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                return Some(format!(
                    "state_dir {shown}: {} exists and is not a directory",
                    pathtext::text(at)
                ))
            }
            Err(_) => match at.parent() {
                Some(p) => at = p,
                None => return Some(format!("state_dir {shown}: no existing parent")),
            },
        }
    }
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    match rustix::fs::access(
        at,
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
    ) {
        Ok(()) => None,
        Err(e) => Some(format!(
            "state_dir {shown}: cannot create or write in {}: {e}",
            pathtext::text(at)
        )),
    }
}

/// Every problem of the config on this machine, at its line and column.
pub fn check(cfg: &Config) -> Vec<Problem> {
    let file = cfg
        .source
        .as_ref()
        .map_or_else(|| "config".to_string(), |p| p.display().to_string());
    let at = |pos: Position, message: String| Problem {
        file: file.clone(),
        at: Some(pos),
        message,
    };
    let mut out = vec![];
    if let Some(m) = state_dir_problem(&cfg.state_dir) {
        let pos = cfg.at.get("state_dir").copied().unwrap_or((1, 1));
        out.push(at(pos, m));
    }
    let (_, unplaced) = place(cfg);
    out.extend(unplaced.into_iter().map(|u| at(u.at, u.why)));
    #[cfg(feature = "fleet")]
    if let Some(c) = &cfg.coordination {
        if let Err(m) = crate::coordination::probe(c) {
            out.push(at(c.endpoints_at, m.to_string()));
        }
    }
    out.sort_by_key(|q| q.at);
    out
}

#[cfg(test)]
#[path = "placement_tests.rs"]
mod tests;
