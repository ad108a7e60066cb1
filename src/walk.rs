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

use rustix::fs::{statat, AtFlags, Dir, FileType, Mode, OFlags};

use crate::engine::{FileReport, SkipReason, Target};

/// A path given on the command line that cannot be used as a whole.
#[derive(Debug, thiserror::Error)]
#[error("{}: {error}", crate::pathtext::text(path))]
pub struct PathError {
    pub path: PathBuf,
    pub error: io::Error,
}

impl PathError {
    fn refused(path: &Path, why: String) -> PathError {
        PathError {
            path: path.to_path_buf(),
            error: io::Error::new(io::ErrorKind::InvalidInput, why),
        }
    }
}

/// Why a command-line path is refused as a whole: a symlink (never
/// followed), or on a filesystem refreshd does not rewrite.
fn refusal(p: &Path, lst: &std::fs::Metadata) -> Option<String> {
    if lst.file_type().is_symlink() {
        return Some(
            "a symlink: symlinks are never followed (name the file or directory it points to)"
                .into(),
        );
    }
    let magic = rustix::fs::statfs(p).ok()?.f_type;
    if crate::io::syscalls::FsKind::from_magic(magic).is_some() {
        return None;
    }
    let name = match magic {
        0x0102_1994 => "tmpfs".to_string(),
        0x6969 => "nfs".to_string(),
        0x794c_7630 => "overlayfs".to_string(),
        0x2fc1_2fc1 => "zfs".to_string(),
        0x6573_5546 => "fuse".to_string(),
        0x4d44 => "vfat".to_string(),
        0x9fa0 => "proc".to_string(),
        0x6265_6572 => "sysfs".to_string(),
        other => format!("type {other:#x}"),
    };
    Some(format!(
        "on a {name} filesystem: refreshd rewrites ext4, xfs and btrfs only"
    ))
}

/// The walk's output: files to refresh and entries already decided (hard
/// links seen before, unreadable directories).
#[derive(Debug, Default)]
pub struct Walked {
    pub targets: Vec<Found>,
    pub reports: Vec<FileReport>,
}

/// A file to refresh.
#[derive(Debug)]
pub struct Found {
    pub target: Target,
    pub size: u64,
    /// Found in a directory (not named on the command line): its mtime
    /// (seconds) and who it is, for the age filter.
    pub listed: Option<Listed>,
}

/// A file as the directory walk saw it.
#[derive(Debug, Clone, Copy)]
pub struct Listed {
    pub mtime: i64,
    /// Its filesystem (when its identity could be read) and inode.
    pub fs: Option<crate::io::fsid::FsId>,
    pub ino: u64,
}

/// Checks every path before anything is done: it exists, is not a
/// symlink, and is on a filesystem refreshd rewrites.
pub fn check_paths(paths: &[PathBuf]) -> Result<(), PathError> {
    for p in paths {
        if p.as_os_str().as_bytes().contains(&0) {
            return Err(PathError::refused(p, "path contains a NUL byte".into()));
        }
        let lst = std::fs::symlink_metadata(p).map_err(|error| PathError {
            path: p.clone(),
            error,
        })?;
        if let Some(why) = refusal(p, &lst) {
            return Err(PathError::refused(p, why));
        }
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
    crate::io::resolve::open(
        root,
        rel,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        crate::io::resolve::Rules::BENEATH,
    )
}

/// Expands `paths` into targets.
pub fn walk(paths: &[PathBuf]) -> Result<Walked, PathError> {
    check_paths(paths)?;
    let mut out = Walked::default();
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    for p in paths {
        let err = |error| PathError {
            path: p.clone(),
            error,
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
            out.targets.push(Found {
                target: t,
                size: lst.len(),
                listed: None,
            });
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
    let tree = Tree {
        root,
        root_dev: rustix::fs::fstat(&*root_fd)?.st_dev,
        fs: crate::io::fsid::of(root_fd.as_fd()).ok(),
        root_fd,
    };
    let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir_fd = match open_subdir(tree.root_fd.as_fd(), &rel) {
            Ok(fd) => fd,
            Err(e) => {
                out.reports.push(unopened_dir(root.join(&rel), e));
                continue;
            }
        };
        let mut subdirs = Vec::new();
        for (name, ft) in sorted_entries(&dir_fd)? {
            let child = rel.join(&name);
            let st = statat(&dir_fd, &name, AtFlags::SYMLINK_NOFOLLOW).ok();
            let ft = ft.or_else(|| st.as_ref().map(|s| FileType::from_raw_mode(s.st_mode)));
            match ft {
                Some(FileType::Directory) => subdirs.push(child),
                _ => tree.found(child, ft, st, out, seen),
            }
        }
        // Depth first, in name order.
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(())
}

/// The tree being walked.
struct Tree<'a> {
    root: &'a Path,
    root_fd: Arc<OwnedFd>,
    root_dev: u64,
    fs: Option<crate::io::fsid::FsId>,
}

impl Tree<'_> {
    /// A non-directory: a target, or a skip for a second hard link.
    fn found(
        &self,
        child: PathBuf,
        ft: Option<FileType>,
        st: Option<rustix::fs::Stat>,
        out: &mut Walked,
        seen: &mut HashSet<(u64, u64)>,
    ) {
        let (size, key, links, mtime) = st.map_or((0, None, 1, 0), |s| {
            (
                u64::try_from(s.st_size).unwrap_or(0),
                Some((s.st_dev, s.st_ino)),
                s.st_nlink,
                s.st_mtime,
            )
        });
        if ft == Some(FileType::RegularFile) && links > 1 {
            if let Some(k) = key {
                if !seen.insert(k) {
                    out.reports.push(FileReport::skipped(
                        self.root.join(&child),
                        SkipReason::HardLink,
                        "another link to it was refreshed",
                    ));
                    return;
                }
            }
        }
        let target = Target {
            dir: self.root_fd.clone(),
            rel: child.clone(),
            display: self.root.join(&child),
            root_dev: Some(self.root_dev),
            expect: None,
        };
        out.targets.push(Found {
            target,
            size,
            listed: key.map(|(_, ino)| Listed {
                mtime,
                fs: self.fs,
                ino,
            }),
        });
    }
}

/// A directory's entries in name order, with their type when the
/// directory says it.
fn sorted_entries(dir_fd: &OwnedFd) -> io::Result<Vec<(PathBuf, Option<FileType>)>> {
    let mut entries = Vec::new();
    let mut dir = Dir::read_from(dir_fd)?;
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
        entries.push((PathBuf::from(OsStr::from_bytes(name)), ft));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(entries)
}

/// The report for a directory that could not be entered.
fn unopened_dir(path: PathBuf, e: rustix::io::Errno) -> FileReport {
    let (reason, detail) = match e {
        rustix::io::Errno::XDEV => (
            SkipReason::OtherFilesystem,
            "a mount point: other filesystems are not walked",
        ),
        rustix::io::Errno::LOOP => (SkipReason::Symlink, "symlinks are never followed"),
        rustix::io::Errno::NOENT => (SkipReason::Vanished, "directory vanished during the walk"),
        e => {
            return FileReport::new(
                path,
                crate::engine::Outcome::Failed {
                    kind: crate::engine::report::FailKind::Io,
                    reason: format!("opening directory: {}", io::Error::from(e)),
                },
            )
        }
    };
    FileReport::skipped(path, reason, detail)
}
