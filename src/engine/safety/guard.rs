//! Opening a file for refresh, safely: no symlink anywhere below the root,
//! never another filesystem, regular files only, nothing immutable,
//! append-only, swap or executing, filesystems on the allowlist only, and an
//! exclusive write lease so nobody else can change the file meanwhile.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{FileType, Mode, OFlags};

use crate::engine::report::SkipReason;
use crate::io::fsid::FsId;
use crate::io::syscalls::{self, FsKind};

pub use super::meta::{
    file_kind, meta, privileges_a_write_strips, reopen, times_to_put_back, FileMeta,
};
pub use super::target::{Identity, Target};

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
    /// Bytes its extents hold within its size, at the baseline (`None`:
    /// FIEMAP refused): what the layout check compares when st_blocks moved.
    pub allocated: Option<u64>,
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

/// Opens `t` for refresh, or says why not. `take_lease = false` is for tests
/// that show what the lease protects against.
pub fn open(t: &Target, take_lease: bool) -> Result<Opened, Refusal> {
    let path_fd = resolve(t)?;
    let m = meta(path_fd.as_fd()).map_err(|e| Refusal::Fail(format!("statx: {e}")))?;
    check_kind(&m)?;
    check_inode(t, &m)?;
    let fs = check_filesystem(t, &path_fd, &m)?;
    check_attributes(&m)?;
    // Reopen exactly this inode for I/O through its O_PATH descriptor.
    let fd = reopen_for_io(path_fd.as_fd(), &m)?;
    drop(path_fd);
    check_inode_flags(&fd, &m)?;
    let (generation, fs_id) = check_identity(t, &fd, &m)?;
    let lease_taken_at = std::time::Instant::now();
    let leased = take_lease && lease(&fd, &m)?;
    // From here on nobody else can open or truncate the file: take the
    // baseline that must hold at the end.
    let meta_now = baseline(&fd, &m)?;
    let strips = privileges_a_write_strips(fd.as_fd(), meta_now.mode);
    let allocated = crate::io::syscalls::allocated_within_size(fd.as_fd(), meta_now.size).ok();
    Ok(Opened {
        fd,
        meta: meta_now,
        fs,
        leased,
        lease_taken_at,
        generation,
        fs_id,
        strips,
        allocated,
    })
}

fn skip(reason: SkipReason, detail: impl Into<String>) -> Refusal {
    Refusal::Skip(reason, detail.into())
}

const NEVER_FOLLOWED: &str = "symlinks are never followed";

/// The name, resolved beneath its root to an `O_PATH` descriptor: no
/// symlink anywhere, no other mount.
fn resolve(t: &Target) -> Result<OwnedFd, Refusal> {
    use rustix::io::Errno;
    match crate::io::resolve::open(
        t.dir.as_fd(),
        &t.rel,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        crate::io::resolve::Rules::BENEATH,
    ) {
        Ok(fd) => Ok(fd),
        Err(Errno::LOOP) => Err(skip(SkipReason::Symlink, NEVER_FOLLOWED)),
        Err(Errno::XDEV) => Err(skip(
            SkipReason::OtherFilesystem,
            "on another filesystem (mount point)",
        )),
        Err(Errno::NOENT) => Err(skip(SkipReason::Vanished, "no longer exists")),
        Err(e) => Err(Refusal::Fail(format!("opening: {}", io::Error::from(e)))),
    }
}

/// A regular file, nothing else.
fn check_kind(m: &FileMeta) -> Result<(), Refusal> {
    if FileType::from_raw_mode(m.mode) == FileType::RegularFile {
        return Ok(());
    }
    match file_kind(m.mode) {
        "symlink" => Err(skip(SkipReason::Symlink, NEVER_FOLLOWED)),
        kind => Err(skip(SkipReason::NotRegular, kind)),
    }
}

/// The inode the inventory knows (the filesystem and generation are
/// checked once the file is open).
fn check_inode(t: &Target, m: &FileMeta) -> Result<(), Refusal> {
    let Some(want) = &t.expect else {
        return Ok(());
    };
    let found = Identity {
        fs: want.fs,
        ino: m.ino,
        btime: m.btime,
        generation: None,
    };
    if want.same_inode(&found) {
        return Ok(());
    }
    Err(skip(
        SkipReason::Replaced,
        "not the file the inventory knows there (replaced since the scan)",
    ))
}

/// On its root's filesystem, and that one is allowed.
fn check_filesystem(t: &Target, path_fd: &OwnedFd, m: &FileMeta) -> Result<FsKind, Refusal> {
    if t.root_dev.is_some_and(|dev| m.dev != dev) {
        return Err(skip(SkipReason::OtherFilesystem, "on another filesystem"));
    }
    let sfs = rustix::fs::fstatfs(path_fd)
        .map_err(|e| Refusal::Fail(format!("statfs: {}", io::Error::from(e))))?;
    #[allow(clippy::unnecessary_cast)]
    let magic = sfs.f_type as i64;
    FsKind::from_magic(magic).ok_or_else(|| {
        skip(
            SkipReason::UnsupportedFilesystem,
            format!(
                "{} is not on the allowlist (ext4, xfs, btrfs)",
                syscalls::fs_magic_name(magic)
            ),
        )
    })
}

/// Nothing about the file forbids rewriting its data.
fn check_attributes(m: &FileMeta) -> Result<(), Refusal> {
    if m.immutable == Some(true) {
        return Err(skip(SkipReason::Immutable, "immutable (chattr +i)"));
    }
    if m.append == Some(true) {
        return Err(skip(SkipReason::AppendOnly, "append-only (chattr +a)"));
    }
    if m.verity == Some(true) {
        return Err(skip(
            SkipReason::Verity,
            "an fs-verity file: the kernel refuses to change its data; it cannot age-refresh",
        ));
    }
    if m.encrypted == Some(true) {
        return Err(skip(
            SkipReason::Encrypted,
            "an fscrypt-encrypted file: relocation cannot move its data and in-place \
             rewrites need its key; refresh it by copying it while unlocked",
        ));
    }
    if syscalls::is_swapfile(m.dev, m.ino) {
        return Err(skip(SkipReason::Swapfile, "an active swap file"));
    }
    Ok(())
}

/// Reopens the inode for O_DIRECT I/O. O_NONBLOCK: if someone else holds
/// a lease, fail instead of waiting.
fn reopen_for_io(path_fd: BorrowedFd<'_>, m: &FileMeta) -> Result<OwnedFd, Refusal> {
    use rustix::io::Errno;
    let flags = OFlags::RDWR | OFlags::DIRECT | OFlags::NONBLOCK | OFlags::CLOEXEC;
    match reopen(path_fd, flags) {
        Ok(fd) => Ok(fd),
        Err(Errno::TXTBSY) => Err(skip(SkipReason::RunningExecutable, "a running executable")),
        Err(Errno::AGAIN) => Err(skip(SkipReason::InUse, "leased by another process")),
        Err(Errno::INVAL) => Err(skip(
            SkipReason::NoDirectIo,
            "the filesystem refuses O_DIRECT for it",
        )),
        Err(Errno::PERM) if m.immutable.is_none() => Err(skip(
            SkipReason::Immutable,
            "not writable (immutable or append-only)",
        )),
        Err(e) => Err(Refusal::Fail(format!(
            "opening for I/O: {}",
            io::Error::from(e)
        ))),
    }
}

/// The immutable and append-only flags, where statx did not report them.
fn check_inode_flags(fd: &OwnedFd, m: &FileMeta) -> Result<(), Refusal> {
    if m.immutable.is_some() && m.append.is_some() {
        return Ok(());
    }
    let Ok(flags) = rustix::fs::ioctl_getflags(fd) else {
        return Ok(());
    };
    use rustix::fs::IFlags;
    if flags.contains(IFlags::IMMUTABLE) {
        return Err(skip(SkipReason::Immutable, "immutable (chattr +i)"));
    }
    if flags.contains(IFlags::APPEND) {
        return Err(skip(SkipReason::AppendOnly, "append-only (chattr +a)"));
    }
    Ok(())
}

/// The open file's generation and filesystem identity, and that they are
/// the inventory's.
fn check_identity(t: &Target, fd: &OwnedFd, m: &FileMeta) -> Result<(Option<u32>, FsId), Refusal> {
    let generation = syscalls::inode_generation(fd.as_fd()).ok();
    let fs_id = crate::io::fsid::of(fd.as_fd())
        .map_err(|e| Refusal::Fail(format!("reading the filesystem's identity: {e}")))?;
    let Some(want) = &t.expect else {
        return Ok((generation, fs_id));
    };
    if !want.fs.holds(&fs_id, m.dev) {
        return Err(skip(
            SkipReason::Replaced,
            format!(
                "on another filesystem ({fs_id}) than the inventory's ({})",
                want.fs
            ),
        ));
    }
    if let (Some(w), Some(found)) = (want.generation, generation) {
        if found != w {
            return Err(skip(
                SkipReason::Replaced,
                "inode generation differs from the inventory's (a new file)",
            ));
        }
    }
    Ok((generation, fs_id))
}

/// Takes the write lease: nobody else has the file open, and nobody can
/// open it without our knowing.
fn lease(fd: &OwnedFd, m: &FileMeta) -> Result<bool, Refusal> {
    match syscalls::take_write_lease(fd.as_fd()) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
            if m.mode & 0o111 != 0 && syscalls::is_running_executable(m.dev, m.ino) {
                return Err(skip(SkipReason::RunningExecutable, "a running executable"));
            }
            Err(skip(SkipReason::InUse, "another process has it open"))
        }
        Err(e) => Err(Refusal::Fail(format!("taking the write lease: {e}"))),
    }
}

/// The file as it is now (under the lease): still the inode resolved.
fn baseline(fd: &OwnedFd, m: &FileMeta) -> Result<FileMeta, Refusal> {
    let now = meta(fd.as_fd()).map_err(|e| {
        let _ = syscalls::release_lease(fd.as_fd());
        Refusal::Fail(format!("statx: {e}"))
    })?;
    if now.dev != m.dev || now.ino != m.ino {
        let _ = syscalls::release_lease(fd.as_fd());
        return Err(skip(SkipReason::Vanished, "replaced while opening"));
    }
    Ok(now)
}
