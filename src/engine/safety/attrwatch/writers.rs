//! Who changed a file: fanotify names the process behind each change.
//!
//! inotify's events carry no process, and the kernel merges an event
//! with the one queued before it when they are alike: another process's
//! `utimensat` of the mtime alone and refreshd's write in flight raise
//! one `IN_MODIFY` between them. When that write stores its own time
//! after the other's (an io_uring write punted to a worker stores it
//! when the worker runs it), the other's mtime is gone and nothing in
//! the times tells (a stress run of the suite saw the daemon put its old
//! times back over a `touch -m -d`; this is the one path found to it).
//! fanotify's events carry the process and are merged only with the
//! same process's: a change by any process but refreshd is seen,
//! whatever refreshd's writes did after it.
//!
//! Without `CAP_SYS_ADMIN` (the systemd unit) the group is an
//! unprivileged one (Linux 5.13+, `FAN_REPORT_FID`, inode marks only):
//! it shows other processes as pid 0, which is just as much not ours.
//! Where fanotify cannot be had (kernels before 6.1, see
//! [`kernel_names_io_uring_writers`]; a filesystem without file handles
//! for it) the watch runs on inotify's rules alone and says so once in
//! the log; refused (a seccomp filter) it is also counted,
//! `refreshd_syscall_refused_total{call="fanotify_init"}`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Once;

use crate::io::refused::{self, Call};

/// The I/O thread's fanotify group: one inode mark at a time, on the
/// file it writes in place. One group per thread, not per file: closing
/// a group waits for the kernel's mark reaper (an SRCU grace period,
/// 8 ms a file measured here), adding and removing a mark does not
/// (0.02 ms).
#[derive(Debug)]
pub(super) struct Writers(OwnedFd);

/// `struct fanotify_event_metadata`: event_len (u32), vers (u8), reserved
/// (u8), metadata_len (u16), mask (u64), fd (i32), pid (i32).
const METADATA_LEN: usize = 24;

/// Says once why rule 0 is not in use.
fn without_fanotify(why: &dyn std::fmt::Display) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // A warning: a guard runs on less than it could (the default
        // level shows it, as it does a refused call).
        tracing::warn!(
            "not using fanotify ({why}): another process's change of a file's times is \
             told by inotify and the times alone, which miss one made while a write of \
             refreshd's is in flight"
        );
    });
}

/// Why a fanotify call failed, said once: a seccomp filter's refusal is
/// also counted, anything else is told as the cause.
fn given_up(doing: &str, e: io::Error) {
    if refused::is_refusal(&e) {
        refused::note(Call::Fanotify, &e);
    } else {
        without_fanotify(&format!("{doing}{e}"));
    }
}

impl Writers {
    /// The thread's group, or `None` where fanotify is not to be had.
    pub(super) fn new() -> Option<Writers> {
        if !kernel_names_io_uring_writers() {
            without_fanotify(
                &"before Linux 6.1, io_uring's writes can be reported under \
                               another process's id",
            );
            return None;
        }
        let flags =
            libc::FAN_CLASS_NOTIF | libc::FAN_REPORT_FID | libc::FAN_NONBLOCK | libc::FAN_CLOEXEC;
        let event_flags = (libc::O_RDONLY | libc::O_CLOEXEC) as libc::c_uint;
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::fanotify_init(flags, event_flags) };
        if fd < 0 {
            given_up("", io::Error::last_os_error());
            return None;
        }
        // SAFETY: fanotify_init returned a new descriptor we own.
        Some(Writers(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Marks the inode `file` refers to (through `/proc/self/fd`), after
    /// dropping what is queued from the files before it. `false` (said
    /// once) where its filesystem has no file handles for fanotify
    /// (EXDEV, ENODEV, EOPNOTSUPP) or a limit was reached.
    pub(super) fn mark(&self, file: BorrowedFd<'_>) -> bool {
        self.anothers();
        let Ok(path) = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())) else {
            return false;
        };
        // SAFETY: `path` is a valid C string for the duration of the call.
        let r = unsafe {
            libc::fanotify_mark(
                self.0.as_raw_fd(),
                libc::FAN_MARK_ADD,
                libc::FAN_MODIFY | libc::FAN_ATTRIB,
                libc::AT_FDCWD,
                path.as_ptr(),
            )
        };
        if r < 0 {
            given_up("marking a file: ", io::Error::last_os_error());
            return false;
        }
        true
    }

    /// Removes the mark (every inode mark of the group: there is one).
    pub(super) fn unmark(&self) {
        // SAFETY: no path is passed with FAN_MARK_FLUSH.
        unsafe {
            libc::fanotify_mark(
                self.0.as_raw_fd(),
                libc::FAN_MARK_FLUSH,
                0,
                libc::AT_FDCWD,
                std::ptr::null(),
            )
        };
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

/// Whether the kernel reports io_uring's writes under the submitter's id.
/// From 5.18 (and some 5.15 stables) until 6.0.3 an O_DIRECT write's
/// event was raised in the completion interrupt, under whatever task it
/// interrupted: every file would look changed by another. Distribution
/// kernels carry fixes under older numbers; 6.1 is the first line that
/// has it from its start.
fn kernel_names_io_uring_writers() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut nums = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (nums.next().unwrap_or(0), nums.next().unwrap_or(0));
    (major, minor) >= (6, 1)
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
