//! Opening a file for refresh, safely: no symlink anywhere below the root,
//! never another filesystem, regular files only, nothing immutable,
//! append-only, swap or executing, filesystems on the allowlist only, and an
//! exclusive write lease so nobody else can change the file meanwhile.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{statx, AtFlags, FileType, Mode, OFlags, StatxAttributes, StatxFlags, Timestamps};

use crate::clock::Timestamp;
use crate::engine::report::SkipReason;
use crate::io::fsid::FsId;
use crate::io::syscalls::{self, FsKind};

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

/// Why a file could not be opened for refresh.
#[derive(Debug)]
pub enum Refusal {
    Skip(SkipReason, String),
    Fail(String),
}

/// A file open for O_DIRECT read and write, under our exclusive lease
/// (unless the lease was switched off for a test).
#[derive(Debug)]
pub struct Opened {
    pub fd: OwnedFd,
    pub meta: FileMeta,
    pub fs: FsKind,
    pub leased: bool,
    /// When the lease was granted (the lease clock starts here).
    pub lease_taken_at: std::time::Instant,
    /// The inode generation, where the filesystem has one.
    pub generation: Option<u32>,
    /// The filesystem's identity (UUID; see `fsid`).
    pub fs_id: FsId,
    /// What an in-place write would strip (see
    /// [`privileges_a_write_strips`]): such a file is never written.
    pub strips: Option<&'static str>,
}

impl Opened {
    /// Who the file is.
    pub fn identity(&self) -> Identity {
        Identity {
            fs: self.fs_id,
            ino: self.meta.ino,
            btime: self.meta.btime,
            generation: self.generation,
        }
    }
}

impl Opened {
    /// Lets the lease go and closes the file. Consumes `self`: nothing that
    /// borrows the fd (an I/O handle with requests in flight) can outlive it.
    pub fn release(self) -> io::Result<()> {
        if self.leased {
            syscalls::release_lease(self.fd.as_fd())?;
        }
        Ok(())
    }
}

fn file_kind(mode: u32) -> &'static str {
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

/// Opens `t` for refresh, or says why not. `take_lease = false` is for tests
/// that show what the lease protects against.
pub fn open(t: &Target, take_lease: bool) -> Result<Opened, Refusal> {
    use rustix::io::Errno;
    let path_fd = match crate::io::resolve::open(
        t.dir.as_fd(),
        &t.rel,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        crate::io::resolve::Rules::BENEATH,
    ) {
        Ok(fd) => fd,
        Err(Errno::LOOP) => {
            return Err(Refusal::Skip(
                SkipReason::Symlink,
                "symlinks are never followed".into(),
            ))
        }
        Err(Errno::XDEV) => {
            return Err(Refusal::Skip(
                SkipReason::OtherFilesystem,
                "on another filesystem (mount point)".into(),
            ))
        }
        Err(Errno::NOENT) => {
            return Err(Refusal::Skip(
                SkipReason::Vanished,
                "no longer exists".into(),
            ))
        }
        Err(e) => return Err(Refusal::Fail(format!("opening: {}", io::Error::from(e)))),
    };
    let m = meta(path_fd.as_fd()).map_err(|e| Refusal::Fail(format!("statx: {e}")))?;
    if FileType::from_raw_mode(m.mode) != FileType::RegularFile {
        let kind = file_kind(m.mode);
        if kind == "symlink" {
            return Err(Refusal::Skip(
                SkipReason::Symlink,
                "symlinks are never followed".into(),
            ));
        }
        return Err(Refusal::Skip(SkipReason::NotRegular, kind.to_string()));
    }
    if let Some(want) = &t.expect {
        // The filesystem and generation are checked once the file is open.
        let found = Identity {
            fs: want.fs,
            ino: m.ino,
            btime: m.btime,
            generation: None,
        };
        if !want.same_inode(&found) {
            return Err(Refusal::Skip(
                SkipReason::Replaced,
                "not the file the inventory knows there (replaced since the scan)".into(),
            ));
        }
    }
    if let Some(dev) = t.root_dev {
        if m.dev != dev {
            return Err(Refusal::Skip(
                SkipReason::OtherFilesystem,
                "on another filesystem".into(),
            ));
        }
    }
    let sfs = rustix::fs::fstatfs(&path_fd)
        .map_err(|e| Refusal::Fail(format!("statfs: {}", io::Error::from(e))))?;
    #[allow(clippy::unnecessary_cast)]
    let magic = sfs.f_type as i64;
    let Some(fs) = FsKind::from_magic(magic) else {
        return Err(Refusal::Skip(
            SkipReason::UnsupportedFilesystem,
            format!(
                "{} is not on the allowlist (ext4, xfs, btrfs)",
                syscalls::fs_magic_name(magic)
            ),
        ));
    };
    if m.immutable == Some(true) {
        return Err(Refusal::Skip(
            SkipReason::Immutable,
            "immutable (chattr +i)".into(),
        ));
    }
    if m.append == Some(true) {
        return Err(Refusal::Skip(
            SkipReason::AppendOnly,
            "append-only (chattr +a)".into(),
        ));
    }
    if m.verity == Some(true) {
        return Err(Refusal::Skip(
            SkipReason::Verity,
            "an fs-verity file: the kernel refuses to change its data; it cannot age-refresh"
                .into(),
        ));
    }
    if m.encrypted == Some(true) {
        return Err(Refusal::Skip(
            SkipReason::Encrypted,
            "an fscrypt-encrypted file: relocation cannot move its data and in-place \
             rewrites need its key; refresh it by copying it while unlocked"
                .into(),
        ));
    }
    if syscalls::is_swapfile(m.dev, m.ino) {
        return Err(Refusal::Skip(
            SkipReason::Swapfile,
            "an active swap file".into(),
        ));
    }

    // Reopen exactly this inode for I/O through its O_PATH descriptor.
    // O_NONBLOCK: if someone else holds a lease, fail instead of waiting.
    let flags = OFlags::RDWR | OFlags::DIRECT | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = match reopen(path_fd.as_fd(), flags) {
        Ok(fd) => fd,
        Err(Errno::TXTBSY) => {
            return Err(Refusal::Skip(
                SkipReason::RunningExecutable,
                "a running executable".into(),
            ))
        }
        Err(Errno::AGAIN) => {
            return Err(Refusal::Skip(
                SkipReason::InUse,
                "leased by another process".into(),
            ))
        }
        Err(Errno::INVAL) => {
            return Err(Refusal::Skip(
                SkipReason::NoDirectIo,
                "the filesystem refuses O_DIRECT for it".into(),
            ))
        }
        Err(Errno::PERM) if m.immutable.is_none() => {
            return Err(Refusal::Skip(
                SkipReason::Immutable,
                "not writable (immutable or append-only)".into(),
            ))
        }
        Err(e) => {
            return Err(Refusal::Fail(format!(
                "opening for I/O: {}",
                io::Error::from(e)
            )))
        }
    };
    drop(path_fd);
    // Flags the kernel did not report through statx.
    if m.immutable.is_none() || m.append.is_none() {
        if let Ok(flags) = rustix::fs::ioctl_getflags(&fd) {
            use rustix::fs::IFlags;
            if flags.contains(IFlags::IMMUTABLE) {
                return Err(Refusal::Skip(
                    SkipReason::Immutable,
                    "immutable (chattr +i)".into(),
                ));
            }
            if flags.contains(IFlags::APPEND) {
                return Err(Refusal::Skip(
                    SkipReason::AppendOnly,
                    "append-only (chattr +a)".into(),
                ));
            }
        }
    }
    let generation = syscalls::inode_generation(fd.as_fd()).ok();
    let fs_id = crate::io::fsid::of(fd.as_fd())
        .map_err(|e| Refusal::Fail(format!("reading the filesystem's identity: {e}")))?;
    if let Some(want) = &t.expect {
        if !want.fs.holds(&fs_id, m.dev) {
            return Err(Refusal::Skip(
                SkipReason::Replaced,
                format!(
                    "on another filesystem ({fs_id}) than the inventory's ({})",
                    want.fs
                ),
            ));
        }
        if let (Some(w), Some(found)) = (want.generation, generation) {
            if found != w {
                return Err(Refusal::Skip(
                    SkipReason::Replaced,
                    "inode generation differs from the inventory's (a new file)".into(),
                ));
            }
        }
    }
    let lease_taken_at = std::time::Instant::now();
    let leased = if take_lease {
        match syscalls::take_write_lease(fd.as_fd()) {
            Ok(()) => true,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                if m.mode & 0o111 != 0 && syscalls::is_running_executable(m.dev, m.ino) {
                    return Err(Refusal::Skip(
                        SkipReason::RunningExecutable,
                        "a running executable".into(),
                    ));
                }
                return Err(Refusal::Skip(
                    SkipReason::InUse,
                    "another process has it open".into(),
                ));
            }
            Err(e) => return Err(Refusal::Fail(format!("taking the write lease: {e}"))),
        }
    } else {
        false
    };
    // From here on nobody else can open or truncate the file: take the
    // baseline that must hold at the end.
    let meta_now = match meta(fd.as_fd()) {
        Ok(x) => x,
        Err(e) => {
            let _ = syscalls::release_lease(fd.as_fd());
            return Err(Refusal::Fail(format!("statx: {e}")));
        }
    };
    if meta_now.dev != m.dev || meta_now.ino != m.ino {
        let _ = syscalls::release_lease(fd.as_fd());
        return Err(Refusal::Skip(
            SkipReason::Vanished,
            "replaced while opening".into(),
        ));
    }
    let strips = privileges_a_write_strips(fd.as_fd(), meta_now.mode);
    Ok(Opened {
        fd,
        meta: meta_now,
        fs,
        leased,
        lease_taken_at,
        generation,
        fs_id,
        strips,
    })
}
