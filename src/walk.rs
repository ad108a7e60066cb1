//! Turns command-line paths into refresh targets: directories recursively,
//! on their own filesystem only, with no symlink followed and every hard
//! link refreshed once. Entries are opened relative to the root's fd, so a
//! path swapped for a symlink mid-walk cannot lead elsewhere.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{openat2, statat, AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags};

use crate::engine::{FileReport, SkipReason, Target};

/// A path given on the command line that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct PathError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// The walk's output: files to refresh (with their sizes) and entries
/// already decided (hard links seen before, unreadable directories).
#[derive(Debug, Default)]
pub struct Walked {
    pub targets: Vec<(Target, u64)>,
    pub reports: Vec<FileReport>,
}

/// Checks that every path exists before anything is done.
pub fn check_paths(paths: &[PathBuf]) -> Result<(), PathError> {
    for p in paths {
        if p.as_os_str().as_bytes().contains(&0) {
            return Err(PathError {
                path: p.clone(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"),
            });
        }
        std::fs::symlink_metadata(p).map_err(|source| PathError {
            path: p.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Opens the directory `rel` below `root` for reading (`root` itself when
/// `rel` is empty), never following a symlink, never leaving `root`'s
/// filesystem or going above it.
pub(crate) fn open_subdir(root: BorrowedFd<'_>, rel: &Path) -> rustix::io::Result<OwnedFd> {
    if rel.as_os_str().is_empty() {
        return rustix::io::dup(root);
    }
    openat2(
        root,
        rel,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV | ResolveFlags::BENEATH,
    )
}

/// Expands `paths` into targets.
pub fn walk(paths: &[PathBuf]) -> Result<Walked, PathError> {
    check_paths(paths)?;
    let mut out = Walked::default();
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    for p in paths {
        let err = |source| PathError {
            path: p.clone(),
            source,
        };
        let lst = std::fs::symlink_metadata(p).map_err(err)?;
        if lst.is_dir() {
            walk_dir(p, &mut out, &mut seen).map_err(err)?;
        } else {
            let t = Target::for_path(p).map_err(err)?;
            use std::os::unix::fs::MetadataExt;
            if lst.is_file() && lst.nlink() > 1 && !seen.insert((lst.dev(), lst.ino())) {
                out.reports.push(FileReport::skipped(
                    p.clone(),
                    SkipReason::HardLink,
                    "another link to it was refreshed",
                ));
                continue;
            }
            out.targets.push((t, lst.len()));
        }
    }
    Ok(out)
}

fn walk_dir(root: &Path, out: &mut Walked, seen: &mut HashSet<(u64, u64)>) -> io::Result<()> {
    let root_fd: Arc<OwnedFd> = Arc::new(rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?);
    let root_dev = rustix::fs::fstat(&*root_fd)?.st_dev;
    let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir_fd = match open_subdir(root_fd.as_fd(), &rel) {
            Ok(fd) => fd,
            Err(e) => {
                let (reason, detail) = match e {
                    rustix::io::Errno::XDEV => (
                        SkipReason::OtherFilesystem,
                        "a mount point: other filesystems are not walked".to_string(),
                    ),
                    rustix::io::Errno::LOOP => (
                        SkipReason::Symlink,
                        "symlinks are never followed".to_string(),
                    ),
                    rustix::io::Errno::NOENT => (
                        SkipReason::Vanished,
                        "directory vanished during the walk".to_string(),
                    ),
                    e => {
                        out.reports.push(FileReport::new(
                            root.join(&rel),
                            crate::engine::Outcome::Failed {
                                reason: format!("opening directory: {}", io::Error::from(e)),
                            },
                        ));
                        continue;
                    }
                };
                out.reports
                    .push(FileReport::skipped(root.join(&rel), reason, detail));
                continue;
            }
        };
        let mut entries: Vec<(PathBuf, Option<FileType>, u64)> = Vec::new();
        let mut dir = Dir::read_from(&dir_fd)?;
        while let Some(entry) = dir.read() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let ft = match entry.file_type() {
                FileType::Unknown => None,
                ft => Some(ft),
            };
            entries.push((PathBuf::from(OsStr::from_bytes(name)), ft, entry.ino()));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut subdirs = Vec::new();
        for (name, ft, _ino) in entries {
            let child = rel.join(&name);
            let st = statat(&dir_fd, &name, AtFlags::SYMLINK_NOFOLLOW).ok();
            let ft = ft.or_else(|| st.as_ref().map(|s| FileType::from_raw_mode(s.st_mode)));
            match ft {
                Some(FileType::Directory) => subdirs.push(child),
                _ => {
                    let (size, key, links) = st.map_or((0, None, 1), |s| {
                        (
                            u64::try_from(s.st_size).unwrap_or(0),
                            Some((s.st_dev, s.st_ino)),
                            s.st_nlink,
                        )
                    });
                    if ft == Some(FileType::RegularFile) && links > 1 {
                        if let Some(k) = key {
                            if !seen.insert(k) {
                                out.reports.push(FileReport::skipped(
                                    root.join(&child),
                                    SkipReason::HardLink,
                                    "another link to it was refreshed",
                                ));
                                continue;
                            }
                        }
                    }
                    let target = Target {
                        dir: root_fd.clone(),
                        rel: child.clone(),
                        display: root.join(&child),
                        root_dev: Some(root_dev),
                        expect: None,
                    };
                    out.targets.push((target, size));
                }
            }
        }
        // Depth first, in name order.
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(())
}
