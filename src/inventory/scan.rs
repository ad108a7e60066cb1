//! The walker: one filesystem, no symlinks, depth first. It runs on its own
//! thread and hands one batch per directory to the store, so reading the
//! tree and writing SQLite overlap.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;

use rustix::fs::{statx, AtFlags, Dir, FileType, Mode, OFlags, StatxFlags};

use crate::clock::Timestamp;
use crate::io::fsid::FsId;

/// One regular file as the walk saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: Vec<u8>,
    /// `st_dev` (this boot: hard links, display).
    pub dev: u64,
    pub ino: u64,
    pub nlink: u64,
    pub size: u64,
    /// Allocated bytes (st_blocks × 512).
    pub alloc: u64,
    pub mtime: Timestamp,
    /// Birth time where the filesystem records it (ext4, XFS, btrfs).
    pub btime: Option<Timestamp>,
}

/// One directory's regular files.
#[derive(Debug)]
pub struct Batch {
    /// Absolute path of the directory.
    pub dir: PathBuf,
    pub files: Vec<Entry>,
    /// Every entry was read: rows of files not in `files` are gone.
    /// `false` when reading the directory failed part way (its other rows
    /// are kept: a file that cannot be listed is not a deleted file).
    pub complete: bool,
}

/// What the walk sends: the root's filesystem first, then a batch per
/// directory.
#[derive(Debug)]
pub enum Walked {
    /// The identity of the root's filesystem (every file walked is on it).
    Root(FsId),
    Dir(Batch),
}

/// Something the walk could not read; the walk goes on.
#[derive(Debug)]
pub struct WalkProblem {
    pub path: PathBuf,
    pub error: io::Error,
}

/// Walks `root` (a directory) and sends a batch per directory. Stops early
/// when the receiver hangs up. Subdirectories on other filesystems (mount
/// points, btrfs subvolumes) are not entered.
pub fn walk(
    root: &Path,
    tx: &SyncSender<Walked>,
    problems: &mut Vec<WalkProblem>,
) -> io::Result<()> {
    let root_fd: OwnedFd = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let root_dev = rustix::fs::fstat(&root_fd)?.st_dev;
    let fs = crate::io::fsid::of(root_fd.as_fd())?;
    if tx.send(Walked::Root(fs)).is_err() {
        return Ok(());
    }
    let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let abs = root.join(&rel);
        let dir_fd = match crate::walk::open_subdir(root_fd.as_fd(), &rel) {
            Ok(fd) => fd,
            // Replaced by a symlink or gone since it was listed.
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOENT) => continue,
            Err(e) => {
                problems.push(WalkProblem {
                    path: abs,
                    error: e.into(),
                });
                continue;
            }
        };
        let Some((batch, mut subdirs)) = read_dir(&dir_fd, abs, &rel, root_dev, problems) else {
            continue;
        };
        if tx.send(Walked::Dir(batch)).is_err() {
            return Ok(());
        }
        subdirs.sort();
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(())
}

/// One directory: its regular files (a batch, incomplete when an entry
/// could not be read) and its subdirectories on the root's filesystem
/// (relative to the root). `None` when it cannot be listed at all.
fn read_dir(
    dir_fd: &OwnedFd,
    abs: PathBuf,
    rel: &Path,
    root_dev: u64,
    problems: &mut Vec<WalkProblem>,
) -> Option<(Batch, Vec<PathBuf>)> {
    let mask = StatxFlags::TYPE
        | StatxFlags::INO
        | StatxFlags::NLINK
        | StatxFlags::SIZE
        | StatxFlags::BLOCKS
        | StatxFlags::MTIME
        | StatxFlags::BTIME;
    let mut files = Vec::new();
    let mut subdirs = Vec::new();
    let mut complete = true;
    let mut dir = match Dir::read_from(dir_fd) {
        Ok(d) => d,
        Err(e) => {
            problems.push(WalkProblem {
                path: abs,
                error: e.into(),
            });
            return None;
        }
    };
    while let Some(entry) = dir.read() {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                problems.push(WalkProblem {
                    path: abs.clone(),
                    error: e.into(),
                });
                complete = false;
                break;
            }
        };
        let name = entry.file_name();
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        match entry.file_type() {
            FileType::RegularFile | FileType::Directory | FileType::Unknown => {}
            _ => continue, // symlinks, devices, sockets, fifos
        }
        let st = match statx(dir_fd, name, AtFlags::SYMLINK_NOFOLLOW, mask) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => continue, // vanished
            Err(e) => {
                problems.push(WalkProblem {
                    path: abs.join(OsStr::from_bytes(bytes)),
                    error: e.into(),
                });
                complete = false;
                continue;
            }
        };
        let dev = rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor);
        match FileType::from_raw_mode(u32::from(st.stx_mode)) {
            FileType::Directory if dev == root_dev => {
                subdirs.push(rel.join(OsStr::from_bytes(bytes)))
            }
            FileType::RegularFile => files.push(entry_of(bytes, dev, &st)),
            _ => {}
        }
    }
    let batch = Batch {
        dir: abs,
        files,
        complete,
    };
    Some((batch, subdirs))
}

fn entry_of(name: &[u8], dev: u64, st: &rustix::fs::Statx) -> Entry {
    let has_btime = st.stx_mask & StatxFlags::BTIME.bits() != 0;
    Entry {
        name: name.to_vec(),
        dev,
        ino: st.stx_ino,
        nlink: u64::from(st.stx_nlink),
        size: st.stx_size,
        alloc: st.stx_blocks * 512,
        mtime: Timestamp::from_statx(st.stx_mtime),
        btime: has_btime.then(|| Timestamp::from_statx(st.stx_btime)),
    }
}
