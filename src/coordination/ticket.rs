//! A drive's place in a fleet group's queue: its state, shared between
//! the drive's ticket, the etcd session and `status`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::protocol::replies::SlotReply;
use crate::protocol::state::SlotState as Slot;

/// Where a drive's request for a slot stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotState {
    /// Being put in etcd's queue.
    Queueing,
    /// Not in etcd's queue: no session (connecting, between two
    /// sessions), or the group is refused; why.
    Unavailable(String),
    /// In the queue; `ahead`: keys before it beyond the free slots.
    Waiting { ahead: usize },
    /// Held, provably, until then.
    Held { until: Instant },
}

#[derive(Debug)]
pub(super) struct TicketInner {
    pub(super) state: SlotState,
    /// When it was first held (for the log and status).
    pub(super) held_since: Option<i64>,
}

/// A drive's place in the queue, shared with the session.
#[derive(Debug)]
pub struct TicketShared {
    /// The ticket's id in the fleet's state (where its key is kept).
    pub(super) id: u64,
    pub device: String,
    pub group: String,
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    /// The drive's cancel flag: set when a held slot is lost.
    pub(super) cancel: Arc<AtomicBool>,
    pub(super) queued_at: Instant,
    pub(super) inner: Mutex<TicketInner>,
}

impl TicketShared {
    /// The drive's slot, for its status.
    pub fn reply(&self) -> SlotReply {
        let t = self.lock();
        let (state, ahead, why) = match &t.state {
            SlotState::Held { until } if *until > Instant::now() => (Slot::Held, None, None),
            SlotState::Held { .. } => (
                Slot::Unavailable,
                None,
                Some("the lease was not renewed in time".to_string()),
            ),
            SlotState::Waiting { ahead } => (Slot::Waiting, Some(*ahead as u64), None),
            SlotState::Queueing => (Slot::Waiting, None, None),
            SlotState::Unavailable(why) => (Slot::Unavailable, None, Some(why.clone())),
        };
        SlotReply {
            group: self.group.clone(),
            state,
            ahead,
            waited_seconds: self.queued_at.elapsed().as_secs_f64(),
            held_since: t.held_since,
            reason: why,
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, TicketInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    /// Moves to `state`; a held slot that is no longer held stops the
    /// drive's engine (in-flight I/O finishes, the file is checkpointed).
    pub(super) fn set(&self, state: SlotState) {
        let mut t = self.lock();
        let was_held = matches!(t.state, SlotState::Held { .. });
        let is_held = matches!(state, SlotState::Held { .. });
        if was_held && !is_held {
            self.cancel.store(true, Ordering::Relaxed);
            tracing::warn!(device = %self.device, ?state, "fleet slot lost: stopping the refresh");
        }
        if is_held && !was_held {
            t.held_since = Some(crate::inventory::now_secs());
            tracing::info!(device = %self.device, waited = ?self.queued_at.elapsed(), "fleet slot taken");
        }
        t.state = state;
    }
}
