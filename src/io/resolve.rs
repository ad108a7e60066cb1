//! Opening a name beneath a directory, never following a symlink and never
//! crossing a mount: `openat2(RESOLVE_*)` where the kernel and the sandbox
//! allow it, else a walk one component at a time with the same checks.
//!
//! Why a fallback: systemd's seccomp filters answer `openat2` with ENOSYS
//! when a unit has `RestrictSUIDSGID=yes` (systemd cannot inspect the
//! flags of `struct open_how`, so it refuses the call and expects libc to
//! fall back); gVisor and kernels before 5.6 have no `openat2` at all.
//! The walk opens each directory with `openat(O_PATH | O_NOFOLLOW |
//! O_DIRECTORY)` relative to the one before (never by a path from `/`),
//! refuses `..` and absolute names beneath a root, and checks after every
//! step that it is still on the starting mount (`st_dev` and the mount id
//! from `statx`), which is what `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_XDEV` guarantee. Errors are the ones `openat2` gives:
//! ELOOP for a symlink, EXDEV for a mount or a name that leaves the root.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{
    openat, openat2, statx, AtFlags, FileType, Mode, OFlags, ResolveFlags, StatxFlags,
};
use rustix::io::Errno;

/// How names are resolved in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `openat2` with `RESOLVE_*` flags: the kernel checks every step.
    Openat2,
    /// `openat2` is refused (seccomp, an old kernel): one component at a
    /// time, with the same checks.
    Walk,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Openat2 => "openat2",
            Method::Walk => "walk",
        }
    }
}

/// Set once the start-up probe found `openat2` refused for the whole
/// process (a seccomp filter from exec on): every open walks.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// What the resolution must not do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// Stay beneath the starting directory: no `..`, no absolute name.
    pub beneath: bool,
    /// Stay on the starting mount.
    pub no_xdev: bool,
}

impl Rules {
    /// Beneath a tree's root, on its mount, no symlinks.
    pub const BENEATH: Rules = Rules {
        beneath: true,
        no_xdev: true,
    };
    /// An absolute path from `/`, no symlinks anywhere (mounts allowed).
    pub const NO_SYMLINKS: Rules = Rules {
        beneath: false,
        no_xdev: false,
    };

    fn resolve_flags(self) -> ResolveFlags {
        let mut f = ResolveFlags::NO_SYMLINKS;
        if self.beneath {
            f |= ResolveFlags::BENEATH;
        }
        if self.no_xdev {
            f |= ResolveFlags::NO_XDEV;
        }
        f
    }
}

/// Whether this thread may call `openat2`: the harmless probe the start-up
/// check uses. ENOSYS or EPERM: refused by a filter (or no such call).
fn openat2_refused() -> Option<Errno> {
    match openat2(
        rustix::fs::CWD,
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS,
    ) {
        Err(e @ (Errno::NOSYS | Errno::PERM)) => Some(e),
        _ => None,
    }
}

/// Finds out, once at start (before threads that inherit a filter are
/// made), which method this process uses, and says so in the log.
pub fn probe() -> Method {
    match openat2_refused() {
        Some(e) => {
            REFUSED.store(true, Ordering::Relaxed);
            say_refused(e);
            Method::Walk
        }
        None => {
            tracing::info!(
                "resolving names beneath the trees with openat2(RESOLVE_BENEATH | \
                 RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV)"
            );
            Method::Openat2
        }
    }
}

/// The method the start-up probe chose (`Openat2` before any probe).
pub fn method() -> Method {
    if REFUSED.load(Ordering::Relaxed) {
        Method::Walk
    } else {
        Method::Openat2
    }
}

fn say_refused(why: Errno) {
    crate::io::refused::note(
        crate::io::refused::Call::Openat2,
        &std::io::Error::from(why),
    );
}

/// Opens `name` relative to `dir` under `rules`, never following a
/// symlink: a symlink in the middle is ELOOP; a trailing one is ELOOP,
/// unless `flags` holds `O_PATH | O_NOFOLLOW` (then the link itself is
/// opened, as with `openat2`).
///
/// Without a probe at start (a library caller, or a filter on one thread
/// only), a refused `openat2` is found out per call: ENOSYS is a refusal;
/// EPERM is one only if the harmless probe is refused too (an open may
/// fail with EPERM for its own reasons, such as `O_NOATIME`).
pub fn open(
    dir: BorrowedFd<'_>,
    name: &Path,
    flags: OFlags,
    mode: Mode,
    rules: Rules,
) -> Result<OwnedFd, Errno> {
    if !REFUSED.load(Ordering::Relaxed) {
        match openat2(dir, name, flags, mode, rules.resolve_flags()) {
            Err(Errno::NOSYS) => say_refused(Errno::NOSYS),
            Err(Errno::PERM) => match openat2_refused() {
                Some(e) => say_refused(e),
                None => return Err(Errno::PERM),
            },
            other => return other,
        }
    }
    walk(dir, name, flags, mode, rules)
}

/// Opens an absolute `path` from `/`, no symlink anywhere in it.
pub fn open_absolute(path: &Path, flags: OFlags, mode: Mode) -> Result<OwnedFd, Errno> {
    open(rustix::fs::CWD, path, flags, mode, Rules::NO_SYMLINKS)
}

/// Where a descriptor is: device and mount id (0 when statx has none).
fn place(fd: BorrowedFd<'_>) -> Result<(u64, u64), Errno> {
    let st = statx(
        fd,
        c"",
        AtFlags::EMPTY_PATH,
        StatxFlags::BASIC_STATS | StatxFlags::MNT_ID,
    )?;
    let dev = rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor);
    let mnt = if st.stx_mask & StatxFlags::MNT_ID.bits() != 0 {
        st.stx_mnt_id
    } else {
        0
    };
    Ok((dev, mnt))
}

/// The component-by-component resolution (see the module doc).
pub(crate) fn walk(
    dir: BorrowedFd<'_>,
    name: &Path,
    flags: OFlags,
    mode: Mode,
    rules: Rules,
) -> Result<OwnedFd, Errno> {
    if name.as_os_str().is_empty() {
        return Err(Errno::NOENT);
    }
    let mut parts: Vec<&OsStr> = vec![];
    let mut from_root = false;
    for c in name.components() {
        match c {
            Component::RootDir if rules.beneath => return Err(Errno::XDEV),
            Component::RootDir => from_root = true,
            Component::ParentDir if rules.beneath => return Err(Errno::XDEV),
            Component::ParentDir => parts.push(OsStr::new("..")),
            Component::CurDir => {}
            Component::Normal(p) => parts.push(p),
            Component::Prefix(_) => return Err(Errno::INVAL),
        }
    }
    let root;
    let start: BorrowedFd<'_> = if from_root {
        root = openat(
            rustix::fs::CWD,
            "/",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        root.as_fd()
    } else {
        dir
    };
    let Some((last, middle)) = parts.split_last() else {
        return openat(start, ".", flags, mode);
    };
    let home = if rules.no_xdev {
        Some(place(start)?)
    } else {
        None
    };
    let same_mount = |fd: BorrowedFd<'_>| -> Result<(), Errno> {
        match home {
            Some(h) if place(fd)? != h => Err(Errno::XDEV),
            _ => Ok(()),
        }
    };
    let mut held: Option<OwnedFd> = None;
    for part in middle {
        let cur = held.as_ref().map_or(start, |f| f.as_fd());
        let next = match openat(
            cur,
            *part,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOTDIR | Errno::LOOP) => return Err(symlink_or(cur, part, Errno::NOTDIR)),
            Err(e) => return Err(e),
        };
        same_mount(next.as_fd())?;
        held = Some(next);
    }
    let cur = held.as_ref().map_or(start, |f| f.as_fd());
    let fd = match openat(cur, *last, flags | OFlags::NOFOLLOW, mode) {
        Ok(fd) => fd,
        Err(Errno::NOTDIR) if flags.contains(OFlags::DIRECTORY) => {
            return Err(symlink_or(cur, last, Errno::NOTDIR))
        }
        Err(e) => return Err(e),
    };
    // O_TMPFILE makes a new inode in the directory: nothing to cross.
    if !flags.contains(OFlags::TMPFILE) {
        same_mount(fd.as_fd())?;
    }
    Ok(fd)
}

/// ELOOP when `name` in `dir` is a symlink, else `otherwise`.
fn symlink_or(dir: BorrowedFd<'_>, name: &OsStr, otherwise: Errno) -> Errno {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => Errno::LOOP,
        _ => otherwise,
    }
}

#[cfg(test)]
mod tests;
