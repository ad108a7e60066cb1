//! Thin safe wrappers around the few syscalls that neither rustix nor nix
//! cover: file leases and FIEMAP. Each `unsafe` lives here, once.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Filesystems the engine may write to, by `statfs.f_type`.
pub const EXT4_SUPER_MAGIC: i64 = 0xEF53;
pub const XFS_SUPER_MAGIC: i64 = 0x5846_5342;
pub const BTRFS_SUPER_MAGIC: i64 = 0x9123_683E;

/// The kind of a filesystem, as far as the engine cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FsKind {
    Ext4,
    Xfs,
    Btrfs,
}

impl FsKind {
    /// Maps `statfs.f_type` to an allowed filesystem, or `None`.
    pub fn from_magic(magic: i64) -> Option<FsKind> {
        match magic {
            EXT4_SUPER_MAGIC => Some(FsKind::Ext4),
            XFS_SUPER_MAGIC => Some(FsKind::Xfs),
            BTRFS_SUPER_MAGIC => Some(FsKind::Btrfs),
            _ => None,
        }
    }

    /// Copy-on-write filesystems need free space for every rewritten chunk.
    pub fn is_cow(self) -> bool {
        matches!(self, FsKind::Btrfs)
    }

    pub fn name(self) -> &'static str {
        match self {
            FsKind::Ext4 => "ext4",
            FsKind::Xfs => "xfs",
            FsKind::Btrfs => "btrfs",
        }
    }
}

/// A human name for common filesystem magics, for skip reasons.
pub fn fs_magic_name(magic: i64) -> String {
    let name = match magic {
        0x0102_1994 => "tmpfs",
        0x6573_5546 => "fuse",
        0x6969 => "nfs",
        0x9fa0 => "proc",
        0x6265_6572 => "sysfs",
        0x794c_7630 => "overlayfs",
        0x4d44 => "vfat",
        0x2fc1_2fc1 => "zfs",
        0xf2f5_2010 => "f2fs",
        _ => return format!("filesystem type {magic:#x}"),
    };
    name.to_string()
}

/// What `F_GETLEASE` says about our lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// We hold an exclusive write lease and nobody wants it.
    Held,
    /// Someone opened or truncated the file: the kernel asks us to let go.
    Breaking,
    /// No lease (never taken, released, or revoked by the kernel).
    None,
}

/// Takes an exclusive write lease (`F_SETLEASE F_WRLCK`).
///
/// Fails with `EAGAIN` when any other file description has the file open
/// (including mappings and running executables).
pub fn take_write_lease(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_lease(fd, libc::F_WRLCK)
}

/// Releases our lease (`F_SETLEASE F_UNLCK`). Unblocks a waiting opener.
pub fn release_lease(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_lease(fd, libc::F_UNLCK)
}

fn set_lease(fd: BorrowedFd<'_>, kind: libc::c_int) -> io::Result<()> {
    // SAFETY: fcntl(F_SETLEASE) takes an int argument and touches no memory
    // of ours; the fd is valid for the duration of the borrow.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, kind) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks the kernel about our lease. While a break is pending, `F_GETLEASE`
/// returns the type the holder must downgrade to (`F_UNLCK` or `F_RDLCK`).
pub fn lease_state(fd: BorrowedFd<'_>) -> io::Result<LeaseState> {
    // SAFETY: fcntl(F_GETLEASE) takes no argument and touches no memory.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETLEASE) };
    match rc {
        libc::F_WRLCK => Ok(LeaseState::Held),
        libc::F_RDLCK => Ok(LeaseState::Breaking),
        libc::F_UNLCK => Ok(LeaseState::None),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The kernel signals a lease break with SIGIO, whose default action kills
/// the process. The engine polls `F_GETLEASE` instead, so SIGIO is ignored
/// (only if nobody installed a handler for it).
pub fn ignore_sigio() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let ignore = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
    // SAFETY: installing SIG_IGN runs no handler code; we restore a previous
    // custom handler right away if there was one.
    let old = unsafe { sigaction(Signal::SIGIO, &ignore) };
    if let Ok(old) = old {
        if !matches!(old.handler(), SigHandler::SigDfl | SigHandler::SigIgn) {
            // SAFETY: putting back exactly the handler that was installed.
            let _ = unsafe { sigaction(Signal::SIGIO, &old) };
        }
    }
}

// FIEMAP, from <linux/fiemap.h> and <linux/fs.h>.
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
const FIEMAP_FLAG_SYNC: u32 = 0x1;
pub const FIEMAP_EXTENT_LAST: u32 = 0x1;
pub const FIEMAP_EXTENT_UNKNOWN: u32 = 0x2;
pub const FIEMAP_EXTENT_DELALLOC: u32 = 0x4;
pub const FIEMAP_EXTENT_ENCODED: u32 = 0x8;
pub const FIEMAP_EXTENT_DATA_ENCRYPTED: u32 = 0x80;
pub const FIEMAP_EXTENT_NOT_ALIGNED: u32 = 0x100;
pub const FIEMAP_EXTENT_DATA_INLINE: u32 = 0x200;
pub const FIEMAP_EXTENT_DATA_TAIL: u32 = 0x400;
pub const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;
pub const FIEMAP_EXTENT_MERGED: u32 = 0x1000;
pub const FIEMAP_EXTENT_SHARED: u32 = 0x2000;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RawFiemapExtent {
    fe_logical: u64,
    fe_physical: u64,
    fe_length: u64,
    fe_reserved64: [u64; 2],
    fe_flags: u32,
    fe_reserved: [u32; 3],
}

#[repr(C)]
struct RawFiemap<const N: usize> {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
    fm_extents: [RawFiemapExtent; N],
}

/// One extent as FIEMAP reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub logical: u64,
    pub physical: u64,
    pub length: u64,
    pub flags: u32,
}

/// All extents of the file, after syncing delayed allocations
/// (`FIEMAP_FLAG_SYNC`) so that dirty data has real extents.
pub fn fiemap(fd: BorrowedFd<'_>) -> io::Result<Vec<Extent>> {
    const BATCH: usize = 128;
    let mut out = Vec::new();
    let mut start = 0u64;
    loop {
        let mut req = RawFiemap::<BATCH> {
            fm_start: start,
            fm_length: u64::MAX - start,
            fm_flags: FIEMAP_FLAG_SYNC,
            fm_mapped_extents: 0,
            fm_extent_count: BATCH as u32,
            fm_reserved: 0,
            fm_extents: [RawFiemapExtent::default(); BATCH],
        };
        // SAFETY: `req` is a properly laid out `struct fiemap` followed by
        // room for `fm_extent_count` extents; the kernel writes at most that
        // many. The fd is valid for the borrow.
        let rc = unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                FS_IOC_FIEMAP,
                &mut req as *mut RawFiemap<BATCH>,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = (req.fm_mapped_extents as usize).min(BATCH);
        if n == 0 {
            return Ok(out);
        }
        let mut last = false;
        for raw in &req.fm_extents[..n] {
            out.push(Extent {
                logical: raw.fe_logical,
                physical: raw.fe_physical,
                length: raw.fe_length,
                flags: raw.fe_flags,
            });
            last |= raw.fe_flags & FIEMAP_EXTENT_LAST != 0;
            start = raw.fe_logical.saturating_add(raw.fe_length);
        }
        if last || start == u64::MAX {
            return Ok(out);
        }
    }
}

/// Is (dev, ino) an active swap file? Reads `/proc/swaps`.
pub fn is_swapfile(dev: u64, ino: u64) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/swaps") else {
        return false;
    };
    text.lines().skip(1).any(|line| {
        let Some(path) = line.split_whitespace().next() else {
            return false;
        };
        // /proc/swaps escapes spaces as \040.
        let path = path.replace("\\040", " ");
        match rustix::fs::stat(path.as_str()) {
            Ok(st) => st.st_dev == dev && st.st_ino == ino,
            Err(_) => false,
        }
    })
}

/// Is (dev, ino) the executable of a running process? Scans `/proc/*/exe`;
/// only called when a lease was refused for an executable file.
pub fn is_running_executable(dev: u64, ino: u64) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .any(|e| match rustix::fs::stat(e.path().join("exe")) {
            Ok(st) => st.st_dev == dev && st.st_ino == ino,
            Err(_) => false,
        })
}
