//! The executor's watch on a file written in place.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::engine::safety::attrwatch::{AttrWatch, Seen};
use crate::engine::safety::journal::Record;
use crate::engine::safety::lease::LeaseClock;
use crate::engine::safety::watch::{NoWriteInFlight, StopReason, Watch};

/// The executor's watch on a real file: cancel, the lease, free space,
/// and the times its own writes leave (for the recovery record).
pub(super) struct FileWatch<'a, 'fd> {
    pub(super) fd: BorrowedFd<'a>,
    pub(super) clock: &'a mut LeaseClock<'fd>,
    /// The crash-recovery record, when there is a journal.
    pub(super) record: Option<&'a mut Record>,
    /// Other processes' attribute changes, and refreshd's own times.
    pub(super) attrs: &'a mut AttrWatch<'fd>,
    pub(super) cancel: &'a AtomicBool,
    /// Watermark, when free space must be checked.
    pub(super) watermark: Option<u64>,
}

impl Watch for FileWatch<'_, '_> {
    fn should_stop(&mut self) -> Option<StopReason> {
        if self.cancel.load(Ordering::Relaxed) {
            return Some(StopReason::Cancelled);
        }
        if !self.clock.check() {
            if let Some(r) = self.record.as_deref_mut() {
                if let Err(e) = r.lease_broken() {
                    tracing::warn!("recording the lease break: {e}");
                }
            }
            return Some(StopReason::LeaseBroken);
        }
        None
    }

    /// No write of ours in flight: the file's times are ours unless
    /// another process changed its attributes; the record keeps ours, or
    /// says (synced) that it can no longer vouch for them.
    fn quiescent(&mut self, _proof: NoWriteInFlight) {
        let seen = self.attrs.look(self.fd);
        let Some(r) = self.record.as_deref_mut() else {
            return;
        };
        let done = match seen {
            Ok(Seen::Own(m, c)) => r.observe(m, c),
            Ok(Seen::Another) => r.changed_by_another(),
            Err(e) => Err(e),
        };
        if let Err(e) = done {
            tracing::warn!("updating the recovery record: {e}");
        }
    }

    fn space_for(&mut self, len: u64) -> Result<(), StopReason> {
        let Some(watermark) = self.watermark else {
            return Ok(());
        };
        let free = free_bytes(self.fd).unwrap_or(0);
        if free < watermark.saturating_add(len) {
            return Err(StopReason::LowSpace { free, watermark });
        }
        Ok(())
    }

    fn writing(&mut self) {
        self.attrs.writing(self.fd);
        #[cfg(test)]
        crate::engine::test_hooks::at(self.fd, crate::engine::test_hooks::Point::Writing);
    }

    fn lease_deadline(&self) -> Option<Instant> {
        self.clock.deadline()
    }
}

pub(super) fn free_bytes(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let s = rustix::fs::fstatvfs(fd)?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

pub(super) fn fs_bytes(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let s = rustix::fs::fstatvfs(fd)?;
    Ok(s.f_blocks.saturating_mul(s.f_frsize))
}
