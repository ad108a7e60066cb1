//! The recovery journal: what refreshd must put back if it dies while it
//! rewrites a file in place (kill -9, OOM, power loss), and only that.
//!
//! In-place writes move a file's mtime (and ctime); the engine puts the
//! mtime back when the file is done. If the process dies first, the file
//! keeps the time of refreshd's last write, and backup or sync tools that
//! trust mtime would see a change that never happened. So, per file being
//! rewritten, one record in `state_dir/journal/`:
//!
//! 1. Written and `fdatasync`ed under the write lease, *before the first
//!    write*: identity (filesystem UUID, ino, btime, inode generation: it
//!    survives a reboot that renumbers devices), the atime and mtime to
//!    put back, and the (mtime, ctime) the file has now. Times are
//!    (seconds, nanoseconds): any date `statx` can return.
//! 2. Updated whenever no write of ours is in flight and the file's
//!    (mtime, ctime) moved: it is then exactly what refreshd's own writes
//!    left, because under the lease nobody else can change the file.
//! 3. Marked when the lease is seen breaking: from then on another process
//!    may write, and the record can no longer vouch for the times.
//! 4. Removed when the engine has put the times back itself (or decided it
//!    must not: a lease revoked with writes in flight).
//!
//! Recovery ([`recover`]) takes a write lease on the file (so nobody can
//! change it between the check and the fix) and restores the recorded
//! mtime (the atime as `meta::times_to_put_back` says, and the recorded
//! one where the record says the run's reads could move it) only if the
//! identity matches, the lease was never seen breaking, and the current
//! (mtime, ctime) are *exactly* the recorded
//! ones. Why that proves nobody else changed the file: every change by
//! another process (a write, truncate, chmod, xattr, rename) sets ctime to
//! the current time, and could only happen after refreshd's lease was gone,
//! i.e. after its last recorded write. Because refreshd read the ctime
//! (fstat) after that write, the kernel (multigrain timestamps, Linux
//! 6.13+) gives the next change a strictly later ctime. On older kernels a
//! change within the same timer tick (≤ 4 ms) as refreshd's last write
//! could keep the same ctime: that residual is documented in docs/safety.md.
//! Any mismatch leaves the mtime as it is: never an old mtime over a new
//! write, at the price of sometimes not restoring one refreshd moved (a
//! crash while a write was in flight). Relocation never changes mtime or
//! ctime and writes no record.
//!
//! A record is one line of JSON and one line with its xxh3 checksum; a
//! torn or corrupt record is reported and dropped, never acted on. Each
//! process keeps its records in a locked directory of its own
//! ([`owners`]): recovery only ever acts on the records of a process that
//! is gone, never on those of a daemon or one-shot still running beside it.

mod owners;
mod record;
mod recover;
#[cfg(test)]
mod tests;
mod v1;

pub use record::{
    decide, observe, read_record, Entry, Journal, Observed, Record, RecordError, Verdict, VERSION,
};
pub use recover::{recover, Recovered, RecoveryOutcome};

/// Test-only switches, each turning one guard of recovery off so a test
/// can show what it protects: restore every record whatever happened to
/// the file since (the exact-match rule), recover every owner's records
/// (the owners' locks), put the recorded atime back whatever the
/// descriptor (`meta::times_to_put_back`).
#[cfg(test)]
pub(crate) mod test_switch {
    use std::cell::Cell;

    thread_local! {
        static RESTORE_ALWAYS: Cell<bool> = const { Cell::new(false) };
        static IGNORE_OWNERS: Cell<bool> = const { Cell::new(false) };
        static PUT_BACK_ATIME: Cell<bool> = const { Cell::new(false) };
    }

    pub fn restore_always() -> bool {
        RESTORE_ALWAYS.with(Cell::get)
    }

    pub fn set_restore_always(on: bool) {
        RESTORE_ALWAYS.with(|c| c.set(on));
    }

    /// Recover every other owner's records, running or not.
    pub fn ignore_owners() -> bool {
        IGNORE_OWNERS.with(Cell::get)
    }

    pub fn set_ignore_owners(on: bool) {
        IGNORE_OWNERS.with(|c| c.set(on));
    }

    /// Put the recorded atime back whatever the descriptor (the guard
    /// off: the engine's `UnsafeSwitches::put_back_atime`).
    pub fn put_back_atime() -> bool {
        PUT_BACK_ATIME.with(Cell::get)
    }

    pub fn set_put_back_atime(on: bool) {
        PUT_BACK_ATIME.with(|c| c.set(on));
    }
}
