//! A drive's fleet slot, from its worker's side. While the drive wants to
//! refresh (degraded or asked, in its window, not paused), it asks the
//! health gate and then queues for a slot; the refresh starts only once
//! the slot is held. When it stops wanting to (done, paused, out of the
//! window), the ticket is dropped and the slot given back. Without
//! `[coordination]` every call here says "go".

use std::time::{Duration, Instant};

use crate::coordination::{gate, SlotState, Ticket};

use super::shared::{DriveCell, Shared};
use crate::protocol::state::Waiting;

/// After the health gate said no, it is asked again this much later.
pub const GATE_RETRY: Duration = Duration::from_secs(10);

/// Whether the host's and the controller's permits have room now.
fn local_permit_free(shared: &Shared, cell: &DriveCell) -> bool {
    let cfg = shared.config();
    let per_controller = cfg.max_active_per_controller.unwrap_or(usize::MAX);
    shared.permits.free(cfg.max_active_drives)
        && shared
            .controller_permits(&cell.controller)
            .free(per_controller)
}

/// The worker's hold on its slot.
#[derive(Debug)]
pub struct SlotKeeper {
    ticket: Option<Ticket>,
    gate_retry_at: Instant,
}

impl Default for SlotKeeper {
    fn default() -> SlotKeeper {
        SlotKeeper {
            ticket: None,
            gate_retry_at: Instant::now(),
        }
    }
}

impl SlotKeeper {
    /// Why the drive may not refresh now (and its `waiting` word), or
    /// `None` when it may. `wanted`: it wants to refresh (a queued ticket
    /// is kept); `next`: a refresh is its very next step, so it queues (a
    /// drive does not hold a slot while it rescans or samples first).
    pub fn wait_reason(
        &mut self,
        shared: &Shared,
        cell: &DriveCell,
        wanted: bool,
        next: bool,
    ) -> Option<Waiting> {
        let fleet = shared.fleet.as_ref()?;
        if !wanted {
            self.release(cell);
            return None;
        }
        if self.ticket.is_none() && !next {
            return None;
        }
        if self.ticket.is_none() && !local_permit_free(shared, cell) {
            // Queue in the fleet only when this host could start now: a
            // slot held while the host's other drives refresh would keep
            // the group's other copies waiting for nothing.
            return Some(Waiting::Host);
        }
        if self.ticket.is_none() {
            if Instant::now() < self.gate_retry_at {
                return Some(Waiting::Health);
            }
            if let Err(why) = gate::check(&fleet.cfg) {
                tracing::warn!("health gate: {why}; the refresh waits");
                fleet.set_health(Some(why.to_string()));
                self.gate_retry_at = Instant::now() + GATE_RETRY;
                return Some(Waiting::Health);
            }
            fleet.set_health(None);
            let group = cell.group.as_deref().unwrap_or(&fleet.cfg.group);
            let t = fleet.queue(&cell.label, group, cell.cancel.clone());
            *cell.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(t.view());
            self.ticket = Some(t);
        }
        let t = self.ticket.as_ref()?;
        if t.holds() {
            return None;
        }
        Some(match t.state() {
            SlotState::Unavailable(_) => Waiting::Etcd,
            _ => Waiting::Slot,
        })
    }

    /// The ticket, while queued or held.
    pub fn ticket(&self) -> Option<&Ticket> {
        self.ticket.as_ref()
    }

    /// Leaves the queue (gives the slot back).
    pub fn release(&mut self, cell: &DriveCell) {
        if self.ticket.take().is_some() {
            *cell.slot.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// The health gate said no between files: give the slot back and ask
    /// the gate again later.
    pub fn gate_failed(&mut self, shared: &Shared, cell: &DriveCell, why: String) {
        if let Some(f) = &shared.fleet {
            f.set_health(Some(why));
        }
        self.release(cell);
        self.gate_retry_at = Instant::now() + GATE_RETRY;
    }
}
