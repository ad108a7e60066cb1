//! Thin safe wrappers around the few syscalls that neither rustix nor nix
//! cover: FIEMAP, I/O priorities, `mincore`, the inode generation, file
//! leases ([`lease`]) and relocation's ioctls ([`relocate`]). Each
//! `unsafe` lives here, once.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

pub mod relocate;
pub use relocate::{dedupe, move_extents, Dedupe};
pub mod lease;
pub use lease::{lease_state, release_lease, take_write_lease, LeaseState};

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

    /// A name for a filesystem refreshd does not rewrite, for messages
    /// (`statfs(2)`'s magic numbers of the common ones).
    pub fn other_name(magic: i64) -> Option<&'static str> {
        Some(match magic {
            0x0102_1994 => "tmpfs",
            0x8584_58f6 => "ramfs",
            0x6969 => "nfs",
            0x794c_7630 => "overlayfs",
            0x2fc1_2fc1 => "zfs",
            0xf2f5_2010 => "f2fs",
            0x4d44 => "vfat",
            0x2011_bab0 => "exfat",
            0x6573_5546 => "fuse",
            0x7371_7368 => "squashfs",
            0x9fa0 => "proc",
            0x6265_6572 => "sysfs",
            0xff53_4d42 => "cifs",
            0xfe53_4d42 => "smb2",
            0x00c3_6400 => "ceph",
            _ => return None,
        })
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

const IOPRIO_CLASS_SHIFT: u16 = 13;
const IOPRIO_CLASS_BE: u16 = 2;
const IOPRIO_CLASS_IDLE: u16 = 3;
/// Best-effort class, lowest level: never starved, last in line.
pub const IOPRIO_BE7: u16 = (IOPRIO_CLASS_BE << IOPRIO_CLASS_SHIFT) | 7;
/// The idle class: served when nothing else waits.
pub const IOPRIO_IDLE: u16 = IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT;

/// The I/O priority for the refresh's own writes under a lease: the
/// thread's own (0), unless the thread runs in the idle class. Idle-class
/// I/O can wait indefinitely behind other I/O, and a write that waits
/// past the lease-break time could land after the kernel let another
/// writer in; so writes then run best-effort at the lowest level (7).
pub fn write_ioprio() -> u16 {
    const IOPRIO_WHO_PROCESS: libc::c_int = 1;
    // SAFETY: ioprio_get takes two ints and touches no memory; 0 is the
    // calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0) };
    write_ioprio_for(rc)
}

fn write_ioprio_for(current: libc::c_long) -> u16 {
    if current >= 0 && (current as u16) >> IOPRIO_CLASS_SHIFT == IOPRIO_CLASS_IDLE {
        (IOPRIO_CLASS_BE << IOPRIO_CLASS_SHIFT) | 7
    } else {
        0
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

/// Bytes the file's extents hold within its size (rounded up to 4 KiB):
/// its data's allocation, without blocks past its end (XFS's speculative
/// preallocation, trimmed when some process closes the file) or the
/// filesystem's own metadata (an ext4 extent-tree block), which st_blocks
/// also counts.
pub fn allocated_within_size(fd: BorrowedFd<'_>, size: u64) -> io::Result<u64> {
    let end = size.div_ceil(4096) * 4096;
    Ok(fiemap(fd)?
        .iter()
        .map(|e| {
            let to = (e.logical.saturating_add(e.length)).min(end);
            to.saturating_sub(e.logical.min(end))
        })
        .sum())
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

/// Which pages of `[off, off+len)` are in the page cache (one bool per
/// page). Maps the range read-only without touching it.
pub fn resident_pages(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<Vec<bool>> {
    const PAGE: u64 = 4096;
    let start = off / PAGE * PAGE;
    let map_len = usize::try_from((off + len).next_multiple_of(PAGE) - start)
        .map_err(|_| io::Error::other("range too large"))?;
    if map_len == 0 {
        return Ok(vec![]);
    }
    // SAFETY: a fresh read-only shared mapping of a file range; it is never
    // dereferenced, only passed to mincore, and unmapped below.
    let ptr = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            map_len,
            rustix::mm::ProtFlags::READ,
            rustix::mm::MapFlags::SHARED,
            fd,
            start,
        )?
    };
    let mut vec = vec![0u8; map_len / PAGE as usize];
    // SAFETY: `ptr` is a mapping of `map_len` bytes; `vec` has one byte per page.
    let rc = unsafe { libc::mincore(ptr, map_len, vec.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: unmapping exactly the mapping made above.
    let _ = unsafe { rustix::mm::munmap(ptr, map_len) };
    if rc < 0 {
        return Err(err);
    }
    Ok(vec.into_iter().map(|b| b & 1 != 0).collect())
}

/// `FS_IOC_GETVERSION` (`_IOR('v', 1, long)`): the inode generation, which
/// changes when an inode number is reused (ext4, XFS, btrfs).
pub fn inode_generation(fd: BorrowedFd<'_>) -> io::Result<u32> {
    const FS_IOC_GETVERSION: libc::c_ulong = 0x8008_7601;
    let mut gen: libc::c_long = 0;
    // SAFETY: the kernel writes one `long` through the pointer; fd is valid.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            FS_IOC_GETVERSION,
            &mut gen as *mut libc::c_long,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(gen as u32)
}

/// `pread` until `buf` is full (EINTR retried); EOF before that is an error.
pub fn read_exact_at(fd: BorrowedFd<'_>, buf: &mut [u8], mut off: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pread(fd, &mut buf[done..], off) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shorter than planned",
                ))
            }
            Ok(n) => {
                done += n;
                off += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// `pwrite` all of `buf` (EINTR retried).
pub fn write_all_at(fd: BorrowedFd<'_>, buf: &[u8], mut off: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pwrite(fd, &buf[done..], off) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0")),
            Ok(n) => {
                done += n;
                off += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
