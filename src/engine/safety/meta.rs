//! What the kernel says about an open file (statx, its flags), and what a
//! write to it would change beyond its data.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{statx, AtFlags, FileType, Mode, OFlags, StatxAttributes, StatxFlags, Timestamps};

use crate::clock::Timestamp;

/// What the kernel told us about the file, under the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMeta {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    /// Direct-I/O offset alignment, if the kernel reported one (0: none).
    pub dio_offset_align: Option<u32>,
    pub immutable: Option<bool>,
    pub append: Option<bool>,
    /// Birth time, where the filesystem reports it.
    pub btime: Option<Timestamp>,
    /// fs-verity: the kernel refuses writes and relocation.
    pub verity: Option<bool>,
    /// fscrypt: relocation would move ciphertext the kernel cannot check.
    pub encrypted: Option<bool>,
}

impl FileMeta {
    pub fn timestamps(&self) -> Timestamps {
        Timestamps {
            last_access: self.atime.to_timespec(),
            last_modification: self.mtime.to_timespec(),
        }
    }
}

pub fn meta(fd: BorrowedFd<'_>) -> io::Result<FileMeta> {
    let want = StatxFlags::BASIC_STATS | StatxFlags::DIOALIGN | StatxFlags::BTIME;
    let st = statx(fd, c"", AtFlags::EMPTY_PATH, want)?;
    let attr = |flag: StatxAttributes| {
        if st.stx_attributes_mask.contains(flag) {
            Some(st.stx_attributes.contains(flag))
        } else {
            None
        }
    };
    let dio = if st.stx_mask & StatxFlags::DIOALIGN.bits() != 0 {
        Some(st.stx_dio_offset_align)
    } else {
        None
    };
    Ok(FileMeta {
        dev: rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
        ino: st.stx_ino,
        size: st.stx_size,
        blocks: st.stx_blocks,
        mode: u32::from(st.stx_mode),
        uid: st.stx_uid,
        gid: st.stx_gid,
        atime: Timestamp::from_statx(st.stx_atime),
        mtime: Timestamp::from_statx(st.stx_mtime),
        ctime: Timestamp::from_statx(st.stx_ctime),
        dio_offset_align: dio,
        immutable: attr(StatxAttributes::IMMUTABLE),
        append: attr(StatxAttributes::APPEND),
        btime: (st.stx_mask & StatxFlags::BTIME.bits() != 0)
            .then(|| Timestamp::from_statx(st.stx_btime)),
        verity: attr(StatxAttributes::VERITY),
        encrypted: attr(StatxAttributes::ENCRYPTED),
    })
}

/// The times to put back at the end of an in-place refresh: `mtime`
/// (the one refreshd took the file with, or another process's), and
/// `atime` only where refreshd's reads may have moved it (`fd` opened
/// without `O_NOATIME`: not the owner, no `CAP_FOWNER`) or
/// `force_atime` (the guard off). With `O_NOATIME` nothing of refreshd's
/// moves the atime, so one that moved is another process's — a
/// `touch -a`, which raises neither watch's events (`IN_ACCESS` is not
/// watched: every read raises it) and leaves no sign once a later write
/// of refreshd's covers the ctime — and the atime the file has now is
/// set again. Both times are set, not the mtime alone: that is one
/// `IN_ATTRIB`, which `AttrWatch::restored` tells from another's
/// `touch -m`; the mtime alone raises an `IN_MODIFY` that inotify merges
/// with theirs.
pub fn times_to_put_back(
    fd: BorrowedFd<'_>,
    atime: Timestamp,
    mtime: Timestamp,
    force_atime: bool,
) -> Timestamps {
    let noatime = !reads_move_atime(fd);
    // The atime the file has now, where only another process can have
    // moved it. If the file cannot be asked (fstat fails on an open
    // descriptor only on a broken filesystem), the taken one: both times
    // are still set, as one `IN_ATTRIB`.
    let file_now = if noatime && !force_atime {
        rustix::fs::fstat(fd).ok()
    } else {
        None
    };
    let atime = match file_now {
        Some(st) => Timestamp::from_stat(st.st_atime, st.st_atime_nsec),
        None => atime,
    };
    Timestamps {
        last_access: atime.to_timespec(),
        last_modification: mtime.to_timespec(),
    }
}

/// Whether reads through `fd` move the file's atime: opened without
/// `O_NOATIME` (not the owner, no `CAP_FOWNER`: `reopen` falls back), or
/// its flags unreadable. Recorded in the crash-recovery record, so that
/// recovery, whose own descriptor may hold `O_NOATIME`, knows the atime
/// may be refreshd's.
pub fn reads_move_atime(fd: BorrowedFd<'_>) -> bool {
    !rustix::fs::fcntl_getfl(fd).is_ok_and(|f| f.contains(OFlags::NOATIME))
}

/// Opens the very inode an `O_PATH` descriptor names (through
/// `/proc/self/fd`, so no name is resolved again), with `O_NOATIME` where
/// the caller may use it.
pub fn reopen(path_fd: BorrowedFd<'_>, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    let proc =
        CString::new(format!("/proc/self/fd/{}", path_fd.as_raw_fd())).expect("no NUL in a number");
    match rustix::fs::open(proc.as_c_str(), flags | OFlags::NOATIME, Mode::empty()) {
        Err(rustix::io::Errno::PERM) => rustix::fs::open(proc.as_c_str(), flags, Mode::empty()),
        r => r,
    }
}

/// What an in-place write would make the kernel strip from the file
/// (`file_remove_privs`): file capabilities (`security.capability`) on
/// every write, whoever writes; setuid and setgid bits unless the writer
/// holds CAP_FSETID. `None`: nothing; such files are relocated instead
/// (relocation goes through no write of the file) or skipped.
pub fn privileges_a_write_strips(fd: BorrowedFd<'_>, mode: u32) -> Option<&'static str> {
    if has_file_capabilities(fd) {
        return Some("file capabilities (security.capability)");
    }
    if mode & (libc::S_ISUID | libc::S_ISGID) != 0 && !holds_cap_fsetid() {
        return Some(if mode & libc::S_ISUID != 0 {
            "its setuid bit (refreshd does not hold CAP_FSETID)"
        } else {
            "its setgid bit (refreshd does not hold CAP_FSETID)"
        });
    }
    None
}

fn has_file_capabilities(fd: BorrowedFd<'_>) -> bool {
    let name = c"security.capability";
    // SAFETY: a size query (NULL buffer, size 0) of a NUL-terminated name
    // on a valid descriptor; the kernel writes nothing.
    let n = unsafe { libc::fgetxattr(fd.as_raw_fd(), name.as_ptr(), std::ptr::null_mut(), 0) };
    n > 0
}

/// Whether this process may keep setuid/setgid bits through a write
/// (CAP_FSETID, bit 4, in the effective set).
pub fn holds_cap_fsetid() -> bool {
    static HOLDS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HOLDS.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("CapEff:"))
                    .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
            })
            .is_some_and(|caps| caps & (1 << 4) != 0)
    })
}

pub fn file_kind(mode: u32) -> &'static str {
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Unknown => "unknown file type",
    }
}
