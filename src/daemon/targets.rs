//! Planned files as engine targets, by identity beneath their trees: each
//! configured root is opened once per refresh round, and a file is then
//! resolved from the root's descriptor with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV)`, or the
//! same checks one component at a time where openat2 is refused (in
//! the engine's guard), never by an absolute path. A directory swapped for
//! a symlink after the scan stops the resolution there; a file replaced by
//! another one (other inode, birth time or generation) is skipped as
//! `replaced`. Either way nothing outside the tree is opened.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};

use crate::engine::safety::guard::Target;
use crate::inventory::FileRecord;

/// The configured roots of one drive, open.
#[derive(Debug)]
pub struct Roots {
    open: Vec<(PathBuf, Arc<OwnedFd>, u64)>,
}

impl Roots {
    /// Opens each root (a directory, its last component not a symlink).
    /// A root that cannot be opened is logged and has no targets.
    pub fn open(roots: &[PathBuf]) -> Roots {
        let mut open = vec![];
        for r in roots {
            let fd = rustix::fs::open(
                r,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            );
            match fd.and_then(|fd| Ok((rustix::fs::fstat(&fd)?.st_dev, fd))) {
                Ok((dev, fd)) => open.push((r.clone(), Arc::new(fd), dev)),
                Err(e) => tracing::error!(root = %crate::pathtext::Log(r), "opening the tree: {e}"),
            }
        }
        Roots { open }
    }

    /// The target for a planned file: beneath the deepest root that holds
    /// its path, on that root's filesystem, expected to be `rec`.
    pub fn target(&self, rec: &FileRecord) -> Option<Target> {
        let (root, fd, dev) = self
            .open
            .iter()
            .filter(|(r, _, _)| rec.path.starts_with(r))
            .max_by_key(|(r, _, _)| r.as_os_str().len())?;
        let rel = rec.path.strip_prefix(root).ok()?;
        if rel.as_os_str().is_empty() {
            return None;
        }
        Some(Target {
            dir: fd.clone(),
            rel: rel.to_path_buf(),
            display: rec.path.clone(),
            root_dev: Some(*dev),
            expect: Some(rec.identity()),
        })
    }

    pub fn roots(&self) -> impl Iterator<Item = &Path> {
        self.open.iter().map(|(r, _, _)| r.as_path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(path: &str) -> FileRecord {
        FileRecord {
            fs: crate::io::fsid::FsId::Dev(1),
            dev: 1,
            ino: 2,
            path: path.into(),
            size: 0,
            alloc: 0,
            mtime: crate::clock::Timestamp::new(0, 0),
            btime: Some(crate::clock::Timestamp::new(5, 0)),
            generation: Some(7),
            last_refresh: None,
        }
    }

    #[test]
    fn targets_are_relative_to_the_deepest_root_with_the_identity() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let a = tmp.path().join("a");
        let ab = a.join("b");
        std::fs::create_dir_all(&ab).unwrap_or_else(|e| panic!("{e}"));
        let roots = Roots::open(&[a.clone(), ab.clone()]);
        let t = roots.target(&rec(ab.join("x/f").to_str().unwrap_or_default()));
        let t = t.unwrap_or_else(|| panic!("a target"));
        assert_eq!(t.rel, Path::new("x/f"));
        assert_eq!(t.expect.and_then(|e| e.generation), Some(7));
        assert!(roots.target(&rec("/elsewhere/f")).is_none());
        assert!(roots.target(&rec(a.to_str().unwrap_or_default())).is_none());
    }

    #[test]
    fn a_root_that_is_a_symlink_is_not_opened() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap_or_else(|e| panic!("{e}"));
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Roots::open(&[link]).roots().count(), 0);
    }
}
