//! The fleet's series: whether coordination is configured and up, each
//! drive's slot (held, waiting, how long), and coordination errors by
//! kind. Brought up to date at each scrape from the fleet's state.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::coordination::Fleet;
use crate::protocol::replies::SlotReply;
use crate::protocol::state::SlotState;

/// A drive and its fleet group ("" without coordination).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DevGroup {
    pub device: String,
    pub group: String,
}

/// A drive, its fleet group ("" without coordination) and its slot.
#[derive(Debug, Clone)]
pub struct DriveSlot {
    pub device: String,
    pub group: String,
    pub slot: Option<SlotReply>,
}

impl DevGroup {
    fn of(d: &DriveSlot) -> DevGroup {
        DevGroup {
            device: d.device.clone(),
            group: d.group.clone(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Kind {
    pub kind: String,
}

/// The error kinds, exported at 0 from the first scrape.
pub const ERROR_KINDS: [&str; 3] = ["connect", "session_lost", "health_gate"];

#[derive(Debug, Default)]
pub struct FleetMetrics {
    pub configured: Gauge,
    pub up: Gauge,
    pub slot_held: Family<DevGroup, Gauge>,
    pub slot_waiting: Family<DevGroup, Gauge>,
    pub wait_seconds: Family<DevGroup, Gauge<f64, AtomicU64>>,
    pub errors: Family<Kind, Counter>,
}

impl FleetMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "coordination_configured",
            "1 when [coordination] is configured (refreshes take a slot in etcd)",
            self.configured.clone(),
        );
        r.register(
            "coordination_up",
            "1 while the etcd session is up (0 when not configured)",
            self.up.clone(),
        );
        r.register(
            "coordination_slot_held",
            "1 while the drive holds one of its group's slots",
            self.slot_held.clone(),
        );
        r.register(
            "coordination_slot_waiting",
            "1 while the drive waits for a slot (queued, or etcd unreachable)",
            self.slot_waiting.clone(),
        );
        r.register_with_unit(
            "coordination_slot_wait",
            "How long the drive has waited for its slot so far (0 when not waiting)",
            Unit::Seconds,
            self.wait_seconds.clone(),
        );
        r.register(
            "coordination_errors",
            "Coordination errors: connect (etcd unreachable or refused), session_lost (a keep-alive or request failed), health_gate (the gate said no)",
            self.errors.clone(),
        );
    }

    /// Creates every series (at 0) for the drives.
    pub fn init(&self, configured: bool, drives: &[DriveSlot]) {
        self.configured.set(i64::from(configured));
        for k in ERROR_KINDS {
            self.errors
                .get_or_create(&Kind { kind: k.into() })
                .inc_by(0);
        }
        for d in drives {
            let dev = DevGroup::of(d);
            self.slot_held.get_or_create(&dev).set(0);
            self.slot_waiting.get_or_create(&dev).set(0);
            self.wait_seconds.get_or_create(&dev).set(0.0);
        }
    }

    /// Brings the series up to the fleet's state (at a scrape).
    pub fn update(&self, fleet: Option<&Fleet>, drives: &[DriveSlot]) {
        let Some(fleet) = fleet else {
            return;
        };
        self.up.set(i64::from(fleet.connected_now()));
        let counts = [
            &fleet.events.connect_errors,
            &fleet.events.sessions_lost,
            &fleet.events.health_failures,
        ];
        for (k, n) in ERROR_KINDS.iter().zip(counts) {
            let c = self.errors.get_or_create(&Kind { kind: (*k).into() });
            c.inner()
                .store(n.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        for d in drives {
            let dev = DevGroup::of(d);
            let slot = d.slot.clone();
            let held = slot.as_ref().is_some_and(|s| s.state == SlotState::Held);
            let waiting = slot.as_ref().is_some_and(|s| s.state != SlotState::Held);
            self.slot_held.get_or_create(&dev).set(i64::from(held));
            self.slot_waiting
                .get_or_create(&dev)
                .set(i64::from(waiting));
            let waited = slot.filter(|_| waiting).map_or(0.0, |s| s.waited_seconds);
            self.wait_seconds.get_or_create(&dev).set(waited);
        }
    }
}
