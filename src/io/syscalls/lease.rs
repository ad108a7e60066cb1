//! File leases: `F_SETLEASE` / `F_GETLEASE`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

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
