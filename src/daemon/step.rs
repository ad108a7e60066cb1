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
    /// refresh waits (what `status` shows).
    Wait {
        at_most: Duration,
        why: Option<Waiting>,
    },
}

/// How often a drive waiting for a fleet slot looks again.
pub const SLOT_POLL: Duration = Duration::from_secs(1);

/// Why a wanted refresh cannot start now, first reason first (`None`: it
/// can, or it waits out the pause after a failure, which has no word).
pub fn waiting(v: &View) -> Option<Waiting> {
    if v.paused {
        Some(Waiting::Paused)
    } else if !v.in_window {
        Some(Waiting::Window)
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
    if v.wants_refresh || forced {
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
mod tests {
    use super::*;

    fn view() -> View {
        let now = Instant::now();
        View {
            now,
            stopping: false,
            next_scan: now + Duration::from_secs(3600),
            next_sample: now + Duration::from_secs(600),
            verify_pending: false,
            request: None,
            wants_refresh: false,
            suspect: false,
            paused: false,
            in_window: true,
            refresh_not_before: now,
            budget_spent: false,
            slot_wait: None,
        }
    }

    #[test]
    fn stop_wins_then_scan_then_verification() {
        let v = View {
            stopping: true,
            ..view()
        };
        assert_eq!(next_step(&v), Step::Stop);
        let v = View {
            next_scan: view().now,
            verify_pending: true,
            ..view()
        };
        assert_eq!(next_step(&v), Step::Scan);
        let v = View {
            verify_pending: true,
            wants_refresh: true,
            ..view()
        };
        assert_eq!(next_step(&v), Step::Sample { verify: true });
    }

    #[test]
    fn idle_sleeps_until_the_next_deadline_capped() {
        assert_eq!(
            next_step(&view()),
            Step::Wait {
                at_most: MAX_WAIT,
                why: None
            }
        );
        let v = view();
        let v = View {
            next_sample: v.now + Duration::from_secs(5),
            ..v
        };
        assert_eq!(
            next_step(&v),
            Step::Wait {
                at_most: Duration::from_secs(5),
                why: None
            }
        );
    }

    #[test]
    fn a_request_is_sampled_once_then_answered_or_refreshed() {
        let req = |force, samples| {
            Some(Request {
                force,
                rescanned: true,
                samples,
                refreshed: false,
            })
        };
        let v = View {
            request: req(false, 0),
            ..view()
        };
        assert_eq!(next_step(&v), Step::Sample { verify: false });
        let v = View {
            request: req(false, 1),
            ..view()
        };
        assert_eq!(next_step(&v), Step::Answer, "healthy: nothing to refresh");
        let v = View {
            request: req(true, 1),
            ..view()
        };
        assert_eq!(next_step(&v), Step::Refresh { forced: true });
    }

    #[test]
    fn degraded_refreshes_inside_the_window_only_and_not_while_paused() {
        let degraded = View {
            wants_refresh: true,
            ..view()
        };
        assert_eq!(next_step(&degraded), Step::Refresh { forced: false });
        let outside = View {
            in_window: false,
            ..degraded
        };
        assert!(matches!(
            next_step(&outside),
            Step::Wait {
                why: Some(Waiting::Window),
                ..
            }
        ));
        let waiting = View {
            request: Some(Request {
                rescanned: true,
                samples: 1,
                ..Request::default()
            }),
            ..outside
        };
        assert!(matches!(
            next_step(&waiting),
            Step::Wait {
                why: Some(Waiting::Window),
                ..
            }
        ));
        let paused = View {
            paused: true,
            request: Some(Request {
                force: true,
                rescanned: true,
                samples: 1,
                refreshed: false,
            }),
            ..degraded
        };
        assert!(matches!(
            next_step(&paused),
            Step::Wait {
                why: Some(Waiting::Paused),
                ..
            }
        ));
    }

    #[test]
    fn a_request_rescans_samples_confirms_refreshes_verifies_then_answers() {
        let mut r = Request::default();
        let at = |r: Request, suspect, wants, verify| View {
            request: Some(r),
            suspect,
            wants_refresh: wants,
            verify_pending: verify,
            ..view()
        };
        assert_eq!(
            next_step(&at(r, false, false, false)),
            Step::Scan,
            "rescan first"
        );
        r.rescanned = true;
        assert_eq!(
            next_step(&at(r, false, false, false)),
            Step::Sample { verify: false }
        );
        r.samples = 1;
        // One slow round: confirmed at once, not at the next interval.
        assert_eq!(
            next_step(&at(r, true, false, false)),
            Step::Sample { verify: false }
        );
        r.samples = 2;
        assert_eq!(
            next_step(&at(r, true, false, false)),
            Step::Sample { verify: false }
        );
        r.samples = CONFIRM;
        assert_eq!(
            next_step(&at(r, true, false, false)),
            Step::Answer,
            "still only suspect"
        );
        assert_eq!(
            next_step(&at(r, false, true, false)),
            Step::Refresh { forced: false }
        );
        r.refreshed = true;
        assert_eq!(
            next_step(&at(r, false, true, true)),
            Step::Sample { verify: true },
            "the verification before the answer"
        );
        assert_eq!(next_step(&at(r, false, true, false)), Step::Answer);
    }

    #[test]
    fn a_spent_budget_holds_even_a_forced_request_and_says_why() {
        let v = view();
        let spent = View {
            wants_refresh: true,
            budget_spent: true,
            refresh_not_before: v.now + Duration::from_secs(3600),
            request: Some(Request {
                force: true,
                rescanned: true,
                samples: 1,
                refreshed: false,
            }),
            ..v
        };
        assert!(matches!(
            next_step(&spent),
            Step::Wait {
                why: Some(Waiting::Budget),
                ..
            }
        ));
        let next_day = View {
            now: v.now + Duration::from_secs(3601),
            next_scan: v.now + Duration::from_secs(7200),
            next_sample: v.now + Duration::from_secs(7200),
            ..spent
        };
        assert_eq!(next_step(&next_day), Step::Refresh { forced: true });
    }

    #[test]
    fn a_refresh_that_failed_to_start_is_not_retried_at_once() {
        let v = view();
        let held = View {
            wants_refresh: true,
            refresh_not_before: v.now + Duration::from_secs(10),
            ..v
        };
        assert_eq!(
            next_step(&held),
            Step::Wait {
                at_most: Duration::from_secs(10),
                why: None
            }
        );
    }

    #[test]
    fn without_a_fleet_slot_nothing_is_refreshed_even_when_forced() {
        let v = view();
        let forced = View {
            request: Some(Request {
                force: true,
                rescanned: true,
                samples: 1,
                refreshed: false,
            }),
            slot_wait: Some(Waiting::Slot),
            ..v
        };
        assert_eq!(
            next_step(&forced),
            Step::Wait {
                at_most: SLOT_POLL,
                why: Some(Waiting::Slot)
            },
            "a request waits for the slot, and says so"
        );
        let degraded = View {
            wants_refresh: true,
            slot_wait: Some(Waiting::Etcd),
            ..v
        };
        assert_eq!(
            next_step(&degraded),
            Step::Wait {
                at_most: SLOT_POLL,
                why: Some(Waiting::Etcd)
            },
            "without a request too: status says why"
        );
        let held = View {
            slot_wait: None,
            ..degraded
        };
        assert_eq!(next_step(&held), Step::Refresh { forced: false });
    }
}
