//! What is to be refreshed: a name beneath an open directory, and the
//! identity the inventory knows it by.

use std::io;
use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::clock::Timestamp;
use crate::io::fsid::FsId;

/// A file to refresh: `rel` under the directory `dir`, resolved without
/// following any symlink and without leaving `dir`'s filesystem.
#[derive(Debug, Clone)]
pub struct Target {
    pub dir: Arc<OwnedFd>,
    pub rel: PathBuf,
    /// The path shown to people.
    pub display: PathBuf,
    /// Device the file must be on (the walk's root), if any.
    pub root_dev: Option<u64>,
    /// The file the inventory knows: anything else at that name is left
    /// alone (replaced since the scan).
    pub expect: Option<Identity>,
}

/// Who a file is, across reboots: its filesystem (UUID, btrfs subvolume;
/// see `fsid`), inode, birth time and inode generation (the last two
/// where the filesystem reports them). Never `st_dev`, which changes at
/// boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub fs: FsId,
    pub ino: u64,
    pub btime: Option<Timestamp>,
    pub generation: Option<u32>,
}

impl Identity {
    /// Whether a file seen now (`found`, on device `found_dev` this boot)
    /// is this one (unknown parts are not compared).
    pub fn matches(&self, found: &Identity, found_dev: u64) -> bool {
        self.fs.holds(&found.fs, found_dev) && self.same_inode(found)
    }

    /// Inode, birth time and generation agree (the filesystem is checked
    /// apart: it needs an open descriptor).
    pub fn same_inode(&self, found: &Identity) -> bool {
        fn same<T: PartialEq>(a: Option<T>, b: Option<T>) -> bool {
            a.is_none() || b.is_none() || a == b
        }
        self.ino == found.ino
            && same(self.btime, found.btime)
            && same(self.generation, found.generation)
    }
}

impl Target {
    /// A target for one explicit path: its parent directory is resolved
    /// (the caller named it), the last component is not followed.
    pub fn for_path(path: &Path) -> io::Result<Target> {
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = rustix::fs::open(
            parent,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Target {
            dir: Arc::new(dir),
            rel: PathBuf::from(name),
            display: path.to_path_buf(),
            root_dev: None,
            expect: None,
        })
    }
}
