//! Fleet coordination: a drive refreshes only while it holds one of its
//! group's `max_concurrent` slots in etcd.
//!
//! The model (the etcd semaphore recipe): each daemon keeps one lease
//! alive; a drive that wants to refresh puts a key under
//! `<prefix>/<group>/queue/` attached to that lease. The first
//! `max_concurrent` keys by creation revision hold the slots; the others
//! wait in that order (first come, first served). A key goes when its
//! drive stops wanting the slot ([`Ticket`] dropped), or when its lease
//! expires (the host died or lost etcd): within `lease_ttl`.
//!
//! A slot is held only while it can be proven: [`Ticket::holds`] is true
//! until two thirds of `lease_ttl` after the last keep-alive etcd
//! answered, and any failed request ends the session at once. Losing it
//! sets the drive's cancel flag, so the engine stops after its in-flight
//! I/O and the file is checkpointed, before another host can take the
//! slot.
//!
//! This part (state, tickets, status) is always built; the etcd session
//! that drives it is in `session.rs`, behind the `fleet` feature.

mod fleet;
pub mod gate;
#[cfg(feature = "fleet")]
mod session;
mod ticket;

pub use fleet::{Fleet, FleetCounters, QueueEntry, Ticket};
#[cfg(feature = "fleet")]
pub use session::{probe, start};
pub use ticket::{SlotState, TicketShared};
