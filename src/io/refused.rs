//! System calls the kernel or a sandbox refused, and what doing without
//! them costs. A refusal never degrades a guard or a measurement silently:
//! each kind is said once in the log (with its cost) and counted, and
//! `/metrics` exports the counts (`refreshd_syscall_refused_total{call}`)
//! from the first scrape.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A call refreshd can do without, at a cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `openat2`: names are resolved one component at a time instead
    /// (same guarantees; see `resolve`).
    Openat2,
    /// `mincore`: relocation cannot tell which pages the application had
    /// cached.
    Mincore,
    /// `fanotify_init` (and `fanotify_mark`): another process's change of
    /// a file's times made while a write of refreshd's is in flight is
    /// not told from that write (see `attrwatch`).
    Fanotify,
}

impl Call {
    pub const ALL: [Call; 3] = [Call::Openat2, Call::Mincore, Call::Fanotify];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Call::Openat2 => "openat2",
            Call::Mincore => "mincore",
            Call::Fanotify => "fanotify_init",
        }
    }

    /// What doing without it costs, for the log.
    pub fn cost(self) -> &'static str {
        match self {
            Call::Openat2 => {
                "names are resolved one component at a time with the same checks (no cost \
                 but a few system calls)"
            }
            Call::Mincore => {
                "relocation cannot see which pages the application had cached: the pages it \
                 reads stay cached (memory), and on XFS and btrfs the application's pages of \
                 each relocated unit are not read back (its next reads go to the drive); \
                 allow mincore in the unit's SystemCallFilter="
            }
            Call::Fanotify => {
                "another process's change of a file's times made while a write of refreshd's \
                 is in flight, before that write stores its own time, is taken for refreshd's \
                 (its times put back over it); allow fanotify_init and fanotify_mark in the \
                 unit's SystemCallFilter="
            }
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

static COUNTS: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
static SAID: [AtomicBool; 3] = [
    AtomicBool::new(false),
    AtomicBool::new(false),
    AtomicBool::new(false),
];

/// Whether an error is a refusal of the call itself (a seccomp filter's
/// EPERM or ENOSYS), not an answer about its arguments.
pub fn is_refusal(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOSYS))
}

/// Counts a refusal of `call`; the first one is logged with its cost.
pub fn note(call: Call, e: &std::io::Error) {
    COUNTS[call.index()].fetch_add(1, Ordering::Relaxed);
    if !SAID[call.index()].swap(true, Ordering::Relaxed) {
        tracing::warn!(
            call = call.label(),
            "{} is refused here ({e}): {}",
            call.label(),
            call.cost()
        );
    }
}

/// Refusals counted so far, per call.
pub fn counts() -> impl Iterator<Item = (Call, u64)> {
    Call::ALL
        .into_iter()
        .map(|c| (c, COUNTS[c.index()].load(Ordering::Relaxed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_counted_and_told_apart_from_other_errors() {
        let before: Vec<u64> = counts().map(|(_, n)| n).collect();
        let eperm = std::io::Error::from_raw_os_error(libc::EPERM);
        assert!(is_refusal(&eperm));
        assert!(is_refusal(&std::io::Error::from_raw_os_error(libc::ENOSYS)));
        assert!(!is_refusal(&std::io::Error::from_raw_os_error(
            libc::ENOMEM
        )));
        note(Call::Mincore, &eperm);
        note(Call::Mincore, &eperm);
        let after: Vec<u64> = counts().map(|(_, n)| n).collect();
        assert!(after[Call::Mincore.index()] >= before[Call::Mincore.index()] + 2);
    }
}
