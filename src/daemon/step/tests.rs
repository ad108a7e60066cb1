use super::*;

/// A `refreshctl now --force`, rescanned and sampled: next, a refresh.
fn forced_sampled() -> Option<Request> {
    Some(Request {
        force: true,
        rescanned: true,
        samples: 1,
        refreshed: false,
    })
}

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
        nothing_left: false,
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
        request: forced_sampled(),
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
        request: forced_sampled(),
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
        request: forced_sampled(),
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

/// A degraded drive whose last round rewrote nothing (everything stale
/// was just refreshed, or skipped, and the verification could not judge)
/// waits for its next sample instead of running empty rounds back to
/// back; a forced request still refreshes.
#[test]
fn a_round_that_rewrote_nothing_waits_for_new_evidence() {
    let v = view();
    let degraded = View {
        wants_refresh: true,
        ..v
    };
    assert_eq!(next_step(&degraded), Step::Refresh { forced: false });
    let done = View {
        nothing_left: true,
        ..degraded
    };
    assert_eq!(
        next_step(&done),
        Step::Wait {
            at_most: MAX_WAIT,
            why: None
        }
    );
    let sampled = View {
        next_sample: v.now,
        ..done
    };
    assert_eq!(next_step(&sampled), Step::Sample { verify: false });
    let forced = View {
        request: forced_sampled(),
        ..done
    };
    assert_eq!(next_step(&forced), Step::Refresh { forced: true });
    // Status says why nothing happens; not before the round (the drive
    // has work), nor while a request is on its way (its sample comes
    // first), forced or not.
    assert_eq!(waiting(&done), Some(Waiting::NothingLeft));
    assert_eq!(waiting(&degraded), None);
    assert_eq!(waiting(&forced), None);
    let asked = View {
        request: Some(Request::default()),
        ..done
    };
    assert_eq!(waiting(&asked), None);
    // Pause and window first; before the budget and the fleet's slot
    // (no refresh is wanted, so neither holds it back).
    let paused = View {
        paused: true,
        ..done
    };
    assert_eq!(waiting(&paused), Some(Waiting::Paused));
    let outside = View {
        in_window: false,
        ..done
    };
    assert_eq!(waiting(&outside), Some(Waiting::Window));
    let spent = View {
        budget_spent: true,
        refresh_not_before: v.now + Duration::from_secs(3600),
        slot_wait: Some(Waiting::Slot),
        ..done
    };
    assert_eq!(waiting(&spent), Some(Waiting::NothingLeft));
}
