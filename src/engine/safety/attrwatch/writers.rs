//! Who changed a file: fanotify names the process behind each change.
//!
//! inotify's events carry no process, and the kernel merges an event
//! with the one queued before it when they are alike: another process's
//! `utimensat` of the mtime alone and refreshd's write in flight raise
//! one `IN_MODIFY` between them. When that write stores its own time
//! after the other's (an io_uring write punted to a worker stores it
//! when the worker runs it), the other's mtime is gone and nothing in
//! the times tells (a stress run of the suite saw the daemon put its old
//! times back over a `touch -m -d`; this is the one path found to it). fanotify's events carry the
//! process and are merged only with the same process's: a change by
//! any process but refreshd is seen, whatever refreshd's writes did
//! after it.
//!
//! Without `CAP_SYS_ADMIN` (the systemd unit) the group is an
//! unprivileged one (Linux 5.13+, `FAN_REPORT_FID`, inode marks only):
//! it shows other processes as pid 0, which is just as much not ours.
//! Where fanotify cannot be had the watch runs on inotify's rules alone
//! and says so once in the log: refused (a seccomp filter, a kernel
//! before 5.13 without `CAP_SYS_ADMIN`) it is also counted,
//! `refreshd_syscall_refused_total{call="fanotify_init"}`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Once;

use crate::io::refused::{self, Call};

/// A fanotify group with one mark: the inode of one file.
#[derive(Debug)]
pub(super) struct Writers(OwnedFd);

/// `struct fanotify_event_metadata`: event_len (u32), vers (u8), reserved
/// (u8), metadata_len (u16), mask (u64), fd (i32), pid (i32).
const METADATA_LEN: usize = 24;

impl Writers {
    /// Watches the inode `file` refers to (through `/proc/self/fd`), or
    /// `None` where fanotify is not to be had.
    pub(super) fn watch(file: BorrowedFd<'_>) -> Option<Writers> {
        match Writers::try_watch(file) {
            Ok(w) => Some(w),
            Err(e) if refused::is_refusal(&e) => {
                refused::note(Call::Fanotify, &e);
                None
            }
            Err(e) => {
                static ONCE: Once = Once::new();
                ONCE.call_once(|| {
                    tracing::info!(
                        "fanotify is not available ({e}): another process's change of a \
                         file's times is told by inotify and the times alone, which miss one \
                         made while a write of refreshd's is in flight"
                    );
                });
                None
            }
        }
    }

    fn try_watch(file: BorrowedFd<'_>) -> io::Result<Writers> {
        let flags =
            libc::FAN_CLASS_NOTIF | libc::FAN_REPORT_FID | libc::FAN_NONBLOCK | libc::FAN_CLOEXEC;
        let event_flags = (libc::O_RDONLY | libc::O_CLOEXEC) as libc::c_uint;
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::fanotify_init(flags, event_flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fanotify_init returned a new descriptor we own.
        let group = unsafe { OwnedFd::from_raw_fd(fd) };
        let path = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: `path` is a valid C string for the duration of the call.
        let r = unsafe {
            libc::fanotify_mark(
                group.as_raw_fd(),
                libc::FAN_MARK_ADD,
                libc::FAN_MODIFY | libc::FAN_ATTRIB,
                libc::AT_FDCWD,
                path.as_ptr(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Writers(group))
    }

    /// Whether any change since the last call was another process's (or
    /// events were lost, or could not be read: the worst is assumed).
    pub(super) fn anothers(&self) -> bool {
        let me = std::process::id() as i32;
        let mut buf = [0u8; 4096];
        let mut found = false;
        loop {
            // SAFETY: `buf` is valid for `buf.len()` bytes.
            let n = unsafe {
                libc::read(
                    self.0.as_raw_fd(),
                    buf.as_mut_ptr().cast::<libc::c_void>(),
                    buf.len(),
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                return found || e.kind() != io::ErrorKind::WouldBlock;
            }
            if n == 0 {
                return found;
            }
            found |= parse_events(&buf[..n as usize])
                .any(|(mask, pid)| mask.is_none_or(|m| m & libc::FAN_Q_OVERFLOW != 0) || pid != me);
        }
    }
}

/// (mask, pid) of each event in `buf` (whole events: the kernel never
/// splits one across reads); a mask of `None` for an event of a layout
/// this code does not know.
fn parse_events(buf: &[u8]) -> impl Iterator<Item = (Option<u64>, i32)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let head = buf.get(at..at + METADATA_LEN)?;
        let len = u32::from_ne_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let version = head[4];
        let mut mask = [0u8; 8];
        mask.copy_from_slice(&head[8..16]);
        let pid = i32::from_ne_bytes([head[20], head[21], head[22], head[23]]);
        if len < METADATA_LEN {
            at = buf.len(); // nothing more can be told from here
            return Some((None, pid));
        }
        at += len;
        let known = version == libc::FANOTIFY_METADATA_VERSION;
        Some((known.then(|| u64::from_ne_bytes(mask)), pid))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(len: u32, version: u8, mask: u64, pid: i32) -> Vec<u8> {
        let mut v = vec![];
        v.extend(len.to_ne_bytes());
        v.push(version);
        v.push(0);
        v.extend((METADATA_LEN as u16).to_ne_bytes());
        v.extend(mask.to_ne_bytes());
        v.extend((-1i32).to_ne_bytes());
        v.extend(pid.to_ne_bytes());
        v.resize(len.max(METADATA_LEN as u32) as usize, 0); // info records
        v
    }

    #[test]
    fn events_with_info_records_are_walked_by_their_length() {
        let v = libc::FANOTIFY_METADATA_VERSION;
        let mut buf = event(52, v, libc::FAN_MODIFY, 7);
        buf.extend(event(24, v, libc::FAN_ATTRIB, 9));
        buf.extend(event(8, v, libc::FAN_ATTRIB, 11)); // too short
        buf.extend(event(24, v, libc::FAN_ATTRIB, 13)); // not reached
        let got: Vec<_> = parse_events(&buf).collect();
        assert_eq!(
            got,
            vec![
                (Some(libc::FAN_MODIFY), 7),
                (Some(libc::FAN_ATTRIB), 9),
                (None, 11)
            ]
        );
        let old = event(24, v - 1, libc::FAN_MODIFY, 5);
        assert_eq!(parse_events(&old).collect::<Vec<_>>(), vec![(None, 5)]);
    }
}
