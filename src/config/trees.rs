//! What `check-config` checks on the machine, beyond the file's syntax:
//! each configured tree exists, is a directory (not a symlink) on an
//! allowed filesystem, and the state directory can be created. The daemon
//! runs the same checks and shows a tree it cannot use in `status`,
//! `drives` and a metric instead of stopping.

use std::path::Path;

use super::{Config, Problem};
use crate::io::syscalls::FsKind;

/// Why a configured tree cannot be used now, or `None`.
pub fn tree_problem(path: &Path) -> Option<String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some(format!("tree {} does not exist", path.display()))
        }
        Err(e) => return Some(format!("tree {}: {e}", path.display())),
    };
    if meta.file_type().is_symlink() {
        return Some(format!(
            "tree {} is a symlink (symlinks are never followed; name the directory it points to)",
            path.display()
        ));
    }
    if !meta.is_dir() {
        return Some(format!("tree {} is not a directory", path.display()));
    }
    match rustix::fs::statfs(path) {
        Ok(s) => match FsKind::from_magic(s.f_type) {
            Some(_) => None,
            None => Some(format!(
                "tree {} is on a filesystem refreshd does not rewrite (type {:#x}; allowed: ext4, xfs, btrfs)",
                path.display(),
                s.f_type
            )),
        },
        Err(e) => Some(format!("tree {}: statfs: {e}", path.display())),
    }
}

/// Why the state directory cannot be used or created, or `None`.
pub fn state_dir_problem(dir: &Path) -> Option<String> {
    let mut at = dir;
    loop {
        match std::fs::symlink_metadata(at) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                return Some(format!(
                    "state_dir {}: {} exists and is not a directory",
                    dir.display(),
                    at.display()
                ))
            }
            Err(_) => match at.parent() {
                Some(p) => at = p,
                None => return Some(format!("state_dir {}: no existing parent", dir.display())),
            },
        }
    }
    match rustix::fs::access(
        at,
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
    ) {
        Ok(()) => None,
        Err(e) => Some(format!(
            "state_dir {}: cannot create or write in {}: {e}",
            dir.display(),
            at.display()
        )),
    }
}

/// Trees on one drive that name different fleet groups (a drive refreshes
/// under one group): the later ones, with their position.
fn group_clashes(cfg: &Config) -> Vec<((usize, usize), String)> {
    let Some(default) = cfg.coordination.as_ref().map(|c| c.group.as_str()) else {
        return vec![];
    };
    let mut seen: Vec<(String, &Path, &str)> = vec![];
    let mut out = vec![];
    for p in &cfg.paths {
        let Ok(drives) = crate::drive::drives_of(&p.path) else {
            continue;
        };
        let label = drives
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join("+");
        let group = p.group.as_deref().unwrap_or(default);
        match seen.iter().find(|(l, _, _)| *l == label) {
            Some((_, first, g)) if *g != group => out.push((
                p.at,
                format!(
                    "tree {} is on drive {label} with {} (group {g}) but names group {group}: a drive refreshes under one group",
                    p.path.display(),
                    first.display()
                ),
            )),
            Some(_) => {}
            None => seen.push((label, &p.path, group)),
        }
    }
    out
}

/// Every problem on this machine, at the line and column of its key.
pub fn check(cfg: &Config) -> Vec<Problem> {
    let file = cfg
        .source
        .as_ref()
        .map_or_else(|| "config".to_string(), |p| p.display().to_string());
    let at = |pos: (usize, usize), message: String| Problem {
        file: file.clone(),
        line: pos.0,
        col: pos.1,
        message,
    };
    let mut out = vec![];
    if let Some(m) = state_dir_problem(&cfg.state_dir) {
        out.push(at(cfg.state_dir_at, m));
    }
    for p in &cfg.paths {
        if let Some(m) = tree_problem(&p.path) {
            out.push(at(p.at, m));
        }
    }
    for (p, m) in group_clashes(cfg) {
        out.push(at(p, m));
    }
    #[cfg(feature = "fleet")]
    if let Some(c) = &cfg.coordination {
        if let Err(m) = crate::coordination::probe(c) {
            out.push(at(c.endpoints_at, m));
        }
    }
    out.sort_by_key(|q| (q.line, q.col));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_problem_is_named_at_its_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("real")).unwrap();
        std::os::unix::fs::symlink(d.join("real"), d.join("link")).unwrap();
        std::fs::write(d.join("file"), b"x").unwrap();
        let text = format!(
            "state_dir = \"{0}/file/state\"\n\
             [[paths]]\npath = \"{0}/missing\"\n\
             [[paths]]\npath = \"{0}/link\"\n\
             [[paths]]\npath = \"{0}/file\"\n",
            d.display()
        );
        let mut cfg = crate::config::parse(&text, "t.toml").unwrap();
        cfg.source = Some("t.toml".into());
        let problems: Vec<String> = check(&cfg).iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 4, "{problems:#?}");
        assert!(
            problems[0].starts_with("t.toml:1:13: state_dir"),
            "{}",
            problems[0]
        );
        assert!(
            problems[0].contains("is not a directory"),
            "{}",
            problems[0]
        );
        assert!(
            problems[1].starts_with("t.toml:3:8: tree"),
            "{}",
            problems[1]
        );
        assert!(problems[1].contains("does not exist"), "{}", problems[1]);
        assert!(problems[2].contains("is a symlink"), "{}", problems[2]);
        assert!(
            problems[3].contains("is not a directory"),
            "{}",
            problems[3]
        );
    }

    #[test]
    fn an_unsupported_filesystem_is_named() {
        // /proc is never ext4, xfs or btrfs.
        let m = tree_problem(Path::new("/proc")).unwrap();
        assert!(m.contains("does not rewrite"), "{m}");
        assert!(tree_problem(Path::new("/proc/self/cwd"))
            .unwrap()
            .contains("symlink"));
    }
}
