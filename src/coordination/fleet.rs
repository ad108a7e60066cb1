//! The fleet's state on this host: the slots, the tickets of the drives
//! that want one, and what `status` shows. The etcd session fills it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::ticket::{SlotState, TicketInner, TicketShared};
use crate::config::coordination::Coordination;
use crate::protocol::replies::{CoordinationReply, GroupReply, SlotHolder};

/// A holder of one of the group's slots, as read from etcd.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueueEntry {
    pub name: String,
    pub device: String,
    pub since: i64,
}

#[derive(Debug, Default)]
pub(super) struct FleetState {
    pub(super) connected: bool,
    pub(super) error: Option<String>,
    /// Each group's queue as last read: holders first.
    pub(super) queues: BTreeMap<String, Vec<QueueEntry>>,
    /// Groups whose slots this daemon may not take, with why.
    pub(super) refused: BTreeMap<String, String>,
    pub(super) tickets: BTreeMap<u64, Arc<TicketShared>>,
    /// Each live ticket's key in etcd, once put (by ticket id). A key put
    /// is here, in `released`, or gone from etcd (its lease lost, deleted
    /// by hand), and moves between the two only under this one lock: a ticket dropped while its put returned could lose
    /// it when the key lived behind the ticket's own lock (taken empty by
    /// the drop, recorded by the session before the drop removed the
    /// ticket), and the key held a slot for nobody while the lease lived.
    pub(super) keys: BTreeMap<u64, String>,
    /// Keys of dropped tickets, to delete.
    pub(super) released: Vec<String>,
    /// Why the health gate last failed (cleared when it passes).
    pub(super) health: Option<String>,
}

/// The daemon's membership in its group.
#[derive(Debug)]
pub struct Fleet {
    pub cfg: Coordination,
    pub(super) state: Mutex<FleetState>,
    /// Wakes the session (a ticket queued or dropped).
    pub(super) wake: tokio::sync::Notify,
    pub(super) next_id: AtomicU64,
    /// Slot waits and losses, for the metrics.
    pub events: FleetCounters,
    /// The daemon stops: revoke the lease (free every slot now).
    pub(super) leaving: AtomicBool,
    /// The session has revoked it.
    pub(super) left: tokio::sync::Notify,
}

/// Counters the metrics read.
#[derive(Debug, Default)]
pub struct FleetCounters {
    pub connect_errors: AtomicU64,
    pub sessions_lost: AtomicU64,
    pub health_failures: AtomicU64,
}

impl Fleet {
    /// A fleet with no session yet (the session, or a test, drives it).
    pub fn new(cfg: Coordination) -> Arc<Fleet> {
        Arc::new(Fleet {
            cfg,
            state: Mutex::new(FleetState {
                error: Some("connecting to etcd".into()),
                ..FleetState::default()
            }),
            wake: tokio::sync::Notify::new(),
            next_id: AtomicU64::new(1),
            events: FleetCounters::default(),
            leaving: AtomicBool::new(false),
            left: tokio::sync::Notify::new(),
        })
    }

    /// At shutdown: the session revokes its lease, so that the slots this
    /// daemon held are free at once rather than after `lease_ttl`. Waits
    /// for that at most `within`.
    pub async fn leave(&self, within: Duration) {
        self.leaving.store(true, Ordering::Relaxed);
        self.wake.notify_one();
        if tokio::time::timeout(within, self.left.notified())
            .await
            .is_err()
        {
            tracing::warn!("could not revoke the etcd lease in time: its slots free themselves within lease_ttl");
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, FleetState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `device` for a slot of `group`; dropping the ticket leaves
    /// the queue (and gives the slot back). `cancel` is the drive's engine
    /// flag.
    pub fn queue(self: &Arc<Self>, device: &str, group: &str, cancel: Arc<AtomicBool>) -> Ticket {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut st = self.lock();
        let state = match (&st.error, st.refused.get(group)) {
            (Some(e), _) | (None, Some(e)) => SlotState::Unavailable(e.clone()),
            (None, None) => SlotState::Queueing,
        };
        let shared = Arc::new(TicketShared {
            id,
            device: device.to_string(),
            group: group.to_string(),
            cancel,
            queued_at: Instant::now(),
            inner: Mutex::new(TicketInner {
                state,
                held_since: None,
            }),
        });
        st.tickets.insert(id, shared.clone());
        drop(st);
        self.wake.notify_one();
        Ticket {
            id,
            shared,
            fleet: self.clone(),
        }
    }

    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    /// The session is up.
    pub(super) fn connected(&self) {
        let mut st = self.lock();
        if !st.connected {
            tracing::info!(group = %self.cfg.group, "connected to etcd");
        }
        st.connected = true;
        st.error = None;
    }

    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    /// No session: every ticket waits for the next one (a held slot is
    /// lost, its engine stopped), and the status says why.
    pub(super) fn disconnected(&self, why: &str) {
        let tickets: Vec<Arc<TicketShared>> = {
            let mut st = self.lock();
            st.connected = false;
            st.error = Some(why.to_string());
            st.queues.clear();
            st.refused.clear();
            // Put under the lost session's lease: they go with it.
            st.keys.clear();
            st.tickets.values().cloned().collect()
        };
        for t in tickets {
            t.set(SlotState::Unavailable(why.to_string()));
        }
    }

    /// The health gate's last verdict (for the status).
    pub fn set_health(&self, failure: Option<String>) {
        if failure.is_some() {
            self.events.health_failures.fetch_add(1, Ordering::Relaxed);
        }
        self.lock().health = failure;
    }

    /// Whether the session is up.
    pub fn connected_now(&self) -> bool {
        self.lock().connected
    }

    /// The groups to read: `[coordination]`'s and those of the tickets.
    pub(super) fn groups(&self) -> Vec<String> {
        let st = self.lock();
        let mut g: Vec<String> = std::iter::once(self.cfg.group.clone())
            .chain(st.tickets.values().map(|t| t.group.clone()))
            .collect();
        g.sort();
        g.dedup();
        g
    }

    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    /// This daemon may not take `group`'s slots: its tickets wait, and
    /// the status says why.
    pub(super) fn refuse(&self, group: &str, why: &str) {
        let tickets: Vec<Arc<TicketShared>> = {
            let mut st = self.lock();
            st.refused.insert(group.to_string(), why.to_string());
            st.tickets
                .values()
                .filter(|t| t.group == group)
                .cloned()
                .collect()
        };
        for t in tickets {
            t.set(SlotState::Unavailable(why.to_string()));
        }
    }

    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    pub(super) fn refused(&self, group: &str) -> bool {
        self.lock().refused.contains_key(group)
    }

    /// What `refreshctl status` shows of the groups.
    pub fn reply(&self) -> CoordinationReply {
        let groups = self.groups();
        let st = self.lock();
        let max = self.cfg.max_concurrent;
        let groups = groups
            .into_iter()
            .map(|g| {
                let queue = st.queues.get(&g).map(Vec::as_slice).unwrap_or_default();
                GroupReply {
                    holders: queue
                        .iter()
                        .take(max)
                        .map(|e| SlotHolder {
                            name: e.name.clone(),
                            device: e.device.clone(),
                            since: e.since,
                        })
                        .collect(),
                    waiting: queue.len().saturating_sub(max) as u64,
                    error: st.refused.get(&g).cloned(),
                    group: g,
                }
            })
            .collect();
        CoordinationReply {
            name: self.cfg.name.clone(),
            max_concurrent: max as u64,
            connected: st.connected,
            error: st.error.clone(),
            health: st.health.clone(),
            groups,
        }
    }
}

/// A drive's request for a slot: while it lives, the drive is in the
/// group's queue; dropped, its key is deleted (the slot given back).
#[derive(Debug)]
pub struct Ticket {
    pub(super) id: u64,
    pub(super) shared: Arc<TicketShared>,
    pub(super) fleet: Arc<Fleet>,
}

impl Ticket {
    /// Whether the slot is held, provably, now.
    pub fn holds(&self) -> bool {
        matches!(self.shared.lock().state, SlotState::Held { until } if until > Instant::now())
    }

    pub fn state(&self) -> SlotState {
        self.shared.lock().state.clone()
    }

    /// What the status shows of it (shared with the control server).
    pub fn view(&self) -> Arc<TicketShared> {
        self.shared.clone()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let held = matches!(self.shared.lock().state, SlotState::Held { .. });
        {
            let mut st = self.fleet.lock();
            st.tickets.remove(&self.id);
            if let Some(k) = st.keys.remove(&self.id) {
                st.released.push(k);
            }
        }
        if held {
            tracing::info!(device = %self.shared.device, "fleet slot released");
        }
        self.fleet.wake.notify_one();
    }
}

/// Records that `t`'s key is in etcd now. A ticket dropped while its key
/// was being put left nothing to delete: the key goes to `released`, or it
/// would hold a place (or a slot) for nobody as long as the lease lives.
#[cfg_attr(not(feature = "fleet"), allow(dead_code))]
pub(super) fn record_put(fleet: &Fleet, t: &TicketShared, key: String) {
    let mut st = fleet.lock();
    if st.tickets.contains_key(&t.id) {
        st.keys.insert(t.id, key);
    } else {
        st.released.push(key);
    }
}

/// Before `key` is put for a new ticket: whether it is also the key of a
/// dropped one, still to delete. Keys are named by lease and device, so
/// a drive that gave its slot back and queued again between two syncs
/// has the same key twice: put over the old one, it would keep the old
/// one's place in the queue, and the old one's delete at the next sync
/// would take the new ticket's key (and its slot) away. Taken off the
/// list here, it is deleted before the put: the new ticket queues at the
/// end, and nothing deletes it later.
#[cfg_attr(not(feature = "fleet"), allow(dead_code))]
pub(super) fn take_released(fleet: &Fleet, key: &str) -> bool {
    let mut st = fleet.lock();
    let before = st.released.len();
    st.released.retain(|k| k != key);
    st.released.len() != before
}

#[cfg_attr(not(feature = "fleet"), allow(dead_code))]
/// Ranks the local tickets of `group` against its queue (sorted by
/// creation revision): the first `max` keys hold the slots until `until`.
pub(super) fn rank(
    fleet: &Fleet,
    group: &str,
    keys: &[String],
    entries: Vec<QueueEntry>,
    until: Instant,
) {
    let queued: Vec<(Arc<TicketShared>, String)> = {
        let mut st = fleet.lock();
        st.queues.insert(group.to_string(), entries);
        let st = &*st;
        st.tickets
            .values()
            .filter(|t| t.group == group)
            .filter_map(|t| Some((t.clone(), st.keys.get(&t.id)?.clone())))
            .collect()
    };
    let max = fleet.cfg.max_concurrent;
    for (t, key) in queued {
        match keys.iter().position(|k| *k == key) {
            Some(i) if i < max => t.set(SlotState::Held { until }),
            Some(i) => t.set(SlotState::Waiting { ahead: i + 1 - max }),
            None => {
                // Gone from etcd (lease expired, deleted by hand): queue
                // again, at the end.
                let mut st = fleet.lock();
                if st.keys.get(&t.id) == Some(&key) {
                    st.keys.remove(&t.id);
                }
                drop(st);
                t.set(SlotState::Unavailable(
                    "our key left etcd's queue; queueing again".into(),
                ));
            }
        }
    }
}

#[cfg(test)]
impl Fleet {
    /// A ticket held until `until`, without etcd (for tests of its users).
    pub(crate) fn held_ticket(
        self: &Arc<Self>,
        device: &str,
        cancel: Arc<AtomicBool>,
        until: Instant,
    ) -> Ticket {
        let group = self.cfg.group.clone();
        let t = self.queue(device, &group, cancel);
        let key = format!("test/{device}");
        self.lock().keys.insert(t.id, key.clone());
        let entry = QueueEntry {
            name: self.cfg.name.clone(),
            device: device.into(),
            since: 0,
        };
        rank(self, &group, &[key], vec![entry], until);
        t
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
