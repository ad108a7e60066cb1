//! The loop's memory between steps: what a finished round and a sample
//! leave for the next decision (the decision itself is `step`'s, tested
//! there).

use std::time::{Duration, Instant};

use super::super::round::RoundResult;
use super::Loop;
use crate::config::Settings;
use crate::policy::HealthState;

fn settings() -> Settings {
    Settings {
        sample_interval: Duration::from_secs(6 * 3600),
        ..Settings::default()
    }
}

/// A round that went through its plan and rewrote nothing.
fn empty_round(budget_cut: bool) -> RoundResult {
    RoundResult {
        finished: true,
        budget_cut,
        ..RoundResult::default()
    }
}

/// A round that rewrote nothing waits for a sample, and the sample comes
/// within a sixth of the interval, not hours later; the sample lets the
/// next round go.
#[test]
fn an_empty_round_waits_for_a_sample_that_comes_soon() {
    let (s, now) = (settings(), Instant::now());
    let mut l = Loop::new(now);
    l.sampled(HealthState::Degraded, &s, now);
    assert_eq!(l.next_sample, now + s.sample_interval);
    l.finished(empty_round(false), false, false, &s, now);
    assert!(l.nothing_left, "no round again before a sample");
    assert_eq!(l.next_sample, now + s.sample_interval / 6);
    assert!(l.verify.is_none(), "nothing to verify");
    l.sampled(HealthState::Degraded, &s, now);
    assert!(!l.nothing_left, "a sample is new evidence");
}

/// Not after a round the daily budget stopped (the rest waits for the
/// next UTC day, and says so), nor after a round of one path (the rest
/// of the drive is not known to be done).
#[test]
fn a_budget_cut_or_one_path_round_leaves_the_drive_its_work() {
    let (s, now) = (settings(), Instant::now());
    let mut l = Loop::new(now);
    l.finished(empty_round(true), false, false, &s, now);
    assert!(!l.nothing_left);
    assert!(l.budget_until.is_some());
    let mut l = Loop::new(now);
    l.finished(empty_round(false), true, true, &s, now);
    assert!(!l.nothing_left);
    assert!(l.req.refreshed, "the request it ran for is answered");
}
