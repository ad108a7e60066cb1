//! The states a drive is in, as words on the wire and sentences for
//! people: why a wanted refresh waits, and where a drive stands in its
//! fleet group. Unknown words (from a newer daemon) read as `Other`.

use serde::{Deserialize, Serialize};

/// Why a wanted refresh waits (`status`'s `waiting`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Waiting {
    /// `refreshctl pause`.
    Paused,
    /// The daily budget is spent.
    Budget,
    /// Outside the maintenance window.
    Window,
    /// The host's other drives hold its refresh permits
    /// (`max_active_drives`, `max_active_per_controller`).
    Host,
    /// The fleet's health gate said no.
    Health,
    /// Queued for a slot in the fleet group.
    Slot,
    /// etcd cannot be reached (or refused the group).
    Etcd,
    /// Degraded, and the last round found nothing it could rewrite
    /// (everything stale refreshed, skipped or failed): no round again
    /// before the next sample.
    NothingLeft,
    /// A reason this refreshctl does not know.
    #[serde(other)]
    Other,
}

impl Waiting {
    /// The word on the wire and in tables.
    pub fn word(self) -> &'static str {
        match self {
            Waiting::Paused => "paused",
            Waiting::Budget => "budget",
            Waiting::Window => "window",
            Waiting::Host => "host",
            Waiting::Health => "health",
            Waiting::Slot => "slot",
            Waiting::Etcd => "etcd",
            Waiting::NothingLeft => "nothing_left",
            Waiting::Other => "other",
        }
    }

    /// What it means, for people.
    pub fn sentence(self) -> &'static str {
        match self {
            Waiting::Paused => "paused: the refresh waits for `refreshctl resume`",
            Waiting::Budget => "daily budget spent: the refresh continues the next UTC day",
            Waiting::Window => "outside the maintenance window: the refresh waits for it",
            Waiting::Host => {
                "waiting for the host's other drives (max_active_drives, max_active_per_controller)"
            }
            Waiting::Health => "the health gate says no: the refresh waits (see status)",
            Waiting::Slot => "waiting for a slot in the fleet group",
            Waiting::Etcd => "etcd cannot be reached: not refreshing until it can (see status)",
            Waiting::NothingLeft => {
                "the last round rewrote nothing (its stale files recently refreshed, \
                 skipped, in use or failed: see the log); no new round before the next \
                 sample, due within sample_interval/6"
            }
            Waiting::Other => "waiting (this refreshctl is older than the daemon)",
        }
    }
}

/// A drive's place in its fleet group (`status`'s `slot.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotState {
    /// It holds one of the group's slots.
    Held,
    /// Queued behind others.
    Waiting,
    /// etcd cannot be reached, or the lease was not renewed in time.
    Unavailable,
    #[serde(other)]
    Other,
}

impl SlotState {
    pub fn word(self) -> &'static str {
        match self {
            SlotState::Held => "held",
            SlotState::Waiting => "waiting",
            SlotState::Unavailable => "unavailable",
            SlotState::Other => "other",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_the_wire_and_unknown_ones_still_read() {
        for w in [
            Waiting::Paused,
            Waiting::Budget,
            Waiting::Window,
            Waiting::Host,
            Waiting::Health,
            Waiting::Slot,
            Waiting::Etcd,
            Waiting::NothingLeft,
        ] {
            let json = serde_json::to_value(w).unwrap();
            assert_eq!(json, w.word());
            assert_eq!(serde_json::from_value::<Waiting>(json).unwrap(), w);
        }
        let later: Waiting = serde_json::from_str("\"solar_flare\"").unwrap();
        assert_eq!(later, Waiting::Other);
        for s in [SlotState::Held, SlotState::Waiting, SlotState::Unavailable] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.word());
        }
    }
}
