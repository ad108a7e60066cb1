//! What a drive's worker does next, as a pure function of what it knows:
//! the loop gathers a [`View`], [`next_step`] decides, the loop acts. No
//! clock, lock or I/O here, so every rule is unit-tested without root.

use std::time::{Duration, Instant};

use crate::protocol::state::Waiting;

/// The longest sleep between two looks (a poke wakes it earlier).
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// A `refreshctl now` that waits, and how far it got: the drive's trees
/// are rescanned first (files added since the last scan count), then it is
/// sampled, a suspect verdict confirmed at once (up to [`CONFIRM`]
/// samples), refreshed if degraded or forced, the refresh verified, and
/// only then is the request answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Request {
    pub force: bool,
    pub rescanned: bool,
    /// Samples taken for it.
    pub samples: u8,
    /// A refresh round ran for it.
    pub refreshed: bool,
}

/// Samples a request takes at most to confirm a suspect drive.
pub const CONFIRM: u8 = 3;

/// Everything the decision depends on.
#[derive(Debug, Clone, Copy)]
pub struct View {
    pub now: Instant,
    pub stopping: bool,
    pub next_scan: Instant,
    pub next_sample: Instant,
    /// Files just refreshed wait to be measured.
    pub verify_pending: bool,
    pub request: Option<Request>,
    /// The health says: refresh (degraded).
    pub wants_refresh: bool,
    /// The last round found nothing to rewrite, and no sample came since:
    /// the degraded verdict is not acted on again before new evidence (a
    /// round that rewrites nothing would run again at once, and take the
    /// fleet's slot from the group's other drives, every second).
    pub nothing_left: bool,
    /// One slow round: to be confirmed.
    pub suspect: bool,
    pub paused: bool,
    pub in_window: bool,
    /// No refresh before this (after one failed to start, or until the
    /// daily budget resets).
    pub refresh_not_before: Instant,
    /// The daily budget is spent (degraded (budget)).
    pub budget_spent: bool,
    /// Why the fleet does not let it refresh yet (no slot, etcd
    /// unreachable, the health gate said no); `None`: it may.
    pub slot_wait: Option<Waiting>,
}

impl View {
    /// The drive's own reason to refresh: degraded, with something left
    /// to rewrite as far as it knows.
    pub fn degraded_with_work(&self) -> bool {
        self.wants_refresh && !self.nothing_left
    }
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Stop,
    Scan,
    /// Sample the drive; `verify`: measure the files just refreshed.
    Sample {
        verify: bool,
    },
    Refresh {
        forced: bool,
    },
    /// The request needs no refresh: it is done.
    Answer,
    /// Sleep this long at most (a poke wakes earlier); `why` a wanted
    /// refresh waits (what `status` shows, which also says `nothing_left`
    /// for a drive that wants none before its next sample).
    Wait {
        at_most: Duration,
        why: Option<Waiting>,
    },
}

/// How often a drive waiting for a fleet slot looks again.
pub const SLOT_POLL: Duration = Duration::from_secs(1);

/// Why a wanted refresh cannot start now, first reason first (`None`: it
/// can, or it waits out the pause after a failure, which has no word);
/// for a degraded drive whose last round found nothing it could rewrite,
/// that (no refresh is wanted before the next sample), unless a request
/// is on its way (it samples first, and the sample clears it).
pub fn waiting(v: &View) -> Option<Waiting> {
    if v.paused {
        Some(Waiting::Paused)
    } else if !v.in_window {
        Some(Waiting::Window)
    } else if v.nothing_left && v.request.is_none() {
        Some(Waiting::NothingLeft)
    } else if v.now < v.refresh_not_before {
        v.budget_spent.then_some(Waiting::Budget)
    } else {
        v.slot_wait
    }
}

pub fn next_step(v: &View) -> Step {
    if v.stopping {
        return Step::Stop;
    }
    if v.now >= v.next_scan || v.request.is_some_and(|r| !r.rescanned) {
        return Step::Scan;
    }
    if v.verify_pending {
        return Step::Sample { verify: true };
    }
    if v.request.is_some_and(|r| r.refreshed) {
        return Step::Answer;
    }
    let to_sample = v
        .request
        .is_some_and(|r| r.samples == 0 || (v.suspect && r.samples < CONFIRM && !r.force));
    if v.now >= v.next_sample || to_sample {
        return Step::Sample { verify: false };
    }
    let forced = v.request.is_some_and(|r| r.force);
    let deadline = v.next_scan.min(v.next_sample);
    let until = |t: Instant| t.saturating_duration_since(v.now).min(MAX_WAIT);
    if v.degraded_with_work() || forced {
        let why = waiting(v);
        let held_here = v.paused || !v.in_window || v.now < v.refresh_not_before;
        if !held_here {
            if v.slot_wait.is_none() {
                return Step::Refresh { forced };
            }
            // The slot is looked at again within a second.
            return Step::Wait {
                at_most: until(deadline).min(SLOT_POLL),
                why,
            };
        }
        let at_most = until(deadline.min(v.refresh_not_before.max(v.now)));
        let at_most = if at_most.is_zero() {
            until(deadline)
        } else {
            at_most
        };
        return Step::Wait { at_most, why };
    }
    if v.request.is_some() {
        return Step::Answer;
    }
    Step::Wait {
        at_most: until(deadline),
        why: None,
    }
}

#[cfg(test)]
mod tests;
