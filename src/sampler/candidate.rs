//! The files a round reads: opened by identity for O_DIRECT reads, with
//! their readable data extents.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use rustix::fs::{Mode, OFlags};

/// Reads are O_DIRECT: offsets and lengths in 4 KiB.
pub(super) const ALIGN: u64 = 4096;

use crate::inventory::FileRecord;
use crate::io::syscalls::{
    self, FIEMAP_EXTENT_DATA_INLINE, FIEMAP_EXTENT_DELALLOC, FIEMAP_EXTENT_ENCODED,
    FIEMAP_EXTENT_NOT_ALIGNED, FIEMAP_EXTENT_UNKNOWN, FIEMAP_EXTENT_UNWRITTEN,
};

/// A file's readable data extents.
pub(super) struct Candidate {
    pub(super) fd: OwnedFd,
    /// (logical offset, length), aligned to 4 KiB, within the file size.
    pub(super) extents: Vec<(u64, u64)>,
    pub(super) total: u64,
}

/// Opens the inventory's file for O_DIRECT reads, or nothing: the name is
/// first resolved to an `O_PATH` descriptor (no symlink anywhere; opening
/// it that way is not an open of the file), its identity compared with the
/// inventory's, and only then the inode itself reopened for reading. A
/// file replaced since the scan is never opened.
fn open_direct(f: &FileRecord) -> io::Result<OwnedFd> {
    let path_fd = crate::io::resolve::open_absolute(
        &f.path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let m = crate::engine::safety::guard::meta(path_fd.as_fd())?;
    let want = f.identity();
    let inode = crate::engine::safety::guard::Identity {
        fs: want.fs,
        ino: m.ino,
        btime: m.btime,
        generation: None,
    };
    if !want.same_inode(&inode) {
        return Err(io::Error::other(REPLACED));
    }
    let flags = OFlags::RDONLY | OFlags::DIRECT | OFlags::CLOEXEC;
    let fd = crate::engine::safety::guard::reopen(path_fd.as_fd(), flags)?;
    // The filesystem, once open (the ioctls need a real descriptor).
    if !want.fs.holds(&crate::io::fsid::of(fd.as_fd())?, m.dev) {
        return Err(io::Error::other(REPLACED));
    }
    Ok(fd)
}

/// A file's readable data, `None` when it has none or is gone (deleted
/// or replaced since the scan: not the drive's fault); an error when it
/// is there and cannot be read (a refused call, permissions).
pub(super) fn candidate(f: &FileRecord) -> io::Result<Option<Candidate>> {
    let fd = match open_direct(f) {
        Ok(fd) => fd,
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let st = rustix::fs::fstat(&fd)?;
    let size = u64::try_from(st.st_size).unwrap_or(0);
    let skip = FIEMAP_EXTENT_UNKNOWN
        | FIEMAP_EXTENT_DELALLOC
        | FIEMAP_EXTENT_ENCODED
        | FIEMAP_EXTENT_NOT_ALIGNED
        | FIEMAP_EXTENT_DATA_INLINE
        | FIEMAP_EXTENT_UNWRITTEN;
    let extents: Vec<(u64, u64)> = syscalls::fiemap(fd.as_fd())?
        .into_iter()
        .filter(|e| e.flags & skip == 0)
        .filter_map(|e| {
            let start = e.logical.next_multiple_of(ALIGN);
            let end = (e.logical + e.length).min(size) / ALIGN * ALIGN;
            (end > start).then_some((start, end - start))
        })
        .collect();
    let total = extents.iter().map(|e| e.1).sum();
    Ok((total > 0).then_some(Candidate { fd, extents, total }))
}

/// The file is not there any more (or another one is): skipped quietly.
fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.to_string() == REPLACED
}

const REPLACED: &str = "replaced since the scan";

/// Files of a round that could not be opened for reading: when none of a
/// round's stale files could be, the round fails with the first reason
/// (a sampling failure is a state with its reason, never "no stale data").
#[derive(Default)]
pub(super) struct Unreadable {
    count: u64,
    first: Option<(PathBuf, io::Error)>,
}

impl Unreadable {
    pub(super) fn note(&mut self, f: &FileRecord, e: io::Error) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some((f.path.clone(), e));
        }
    }

    pub(super) fn into_error(self, tried: u64) -> Option<io::Error> {
        let (path, e) = self.first?;
        Some(io::Error::new(
            e.kind(),
            format!(
                "none of the stale files could be opened for reading ({} of {tried} failed); \
                 first {}: {e}",
                self.count,
                crate::pathtext::text(&path)
            ),
        ))
    }
}
