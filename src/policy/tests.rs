use proptest::prelude::*;

use super::*;

const TH: Thresholds = Thresholds {
    min_throughput: Rate(100_000_000),
    min_ratio: 0.5,
};

fn j(score: f64) -> Judgement {
    Judgement {
        stale_bps: Some(1.0),
        fresh_bps: Some(1.0),
        ratio: Some(1.0),
        score: Some(score),
        reasons: vec![],
        reference: None,
        unjudged: None,
        slow: None,
    }
}

#[test]
fn judge_names_each_floor_it_is_below() {
    let slow = judge(Some(40e6), Some(400e6), TH);
    assert!(slow.below());
    assert_eq!(slow.reasons.len(), 2, "{:?}", slow.reasons);
    assert!((slow.score.expect("score") - 0.2).abs() < 1e-9);
    assert!((slow.ratio.expect("ratio") - 0.1).abs() < 1e-9);

    // Fast in absolute terms, but a quarter of fresh.
    let rel = judge(Some(150e6), Some(600e6), TH);
    assert!(rel.below());
    assert!(rel.reasons[0].contains("ratio 0.25"), "{:?}", rel.reasons);

    let ok = judge(Some(380e6), Some(400e6), TH);
    assert!(!ok.below() && ok.reasons.is_empty());

    // Without a reference only the absolute floor applies.
    assert!(!judge(Some(150e6), None, TH).below());
    assert!(judge(Some(50e6), None, TH).below());
    // Nothing stale: no score.
    assert_eq!(judge(None, Some(400e6), TH).score, None);
}

#[test]
fn degraded_needs_two_of_three_rounds() {
    let mut h = Health::default();
    assert_eq!(h.observe(&j(1.5)), HealthState::Healthy);
    assert_eq!(h.observe(&j(0.4)), HealthState::Suspect);
    assert!(!h.wants_refresh());
    assert_eq!(h.observe(&j(0.5)), HealthState::Degraded);
    assert!(h.wants_refresh());
    // One good round does not clear it; a good median does.
    assert_eq!(h.observe(&j(1.5)), HealthState::Degraded);
    assert_eq!(h.observe(&j(1.5)), HealthState::Healthy);
}

#[test]
fn a_refresh_that_does_not_help_is_reported_not_repeated() {
    let mut h = Health::default();
    for s in [0.3, 0.3] {
        h.observe(&j(s));
    }
    assert!(h.wants_refresh());
    assert_eq!(h.verified(&j(0.35), false), HealthState::NotRecovering);
    assert!(!h.wants_refresh());
    // Still slow: still not recovering, still not refreshed again.
    assert_eq!(h.observe(&j(0.3)), HealthState::NotRecovering);
    assert_eq!(h.observe(&j(0.3)), HealthState::NotRecovering);
    assert!(!h.wants_refresh());
    // It came back by itself.
    assert_eq!(h.observe(&j(1.3)), HealthState::Healthy);

    let mut ok = Health::default();
    ok.observe(&j(0.2));
    ok.observe(&j(0.2));
    assert_eq!(ok.verified(&j(1.1), false), HealthState::Healthy);
}

#[test]
fn a_budget_cut_refresh_that_helped_stays_degraded_for_the_rest() {
    let mut h = Health::default();
    h.observe(&j(0.3));
    h.observe(&j(0.3));
    assert_eq!(h.verified(&j(1.4), true), HealthState::Degraded);
    assert!(h.wants_refresh(), "the rest waits for the budget");
    // The data that waits is still slow: ordinary rounds keep it degraded.
    for _ in 0..5 {
        assert_eq!(h.observe(&j(0.3)), HealthState::Degraded);
    }
    assert_eq!(h.verified(&j(1.4), false), HealthState::Healthy);
    let mut bad = Health::default();
    bad.observe(&j(0.3));
    bad.observe(&j(0.3));
    assert_eq!(bad.verified(&j(0.4), true), HealthState::NotRecovering);
}

#[test]
fn not_recovering_only_from_a_verification_of_rewritten_data() {
    // Ordinary rounds, however slow, never say not_recovering: only a
    // verification of files actually rewritten does.
    let mut h = Health::default();
    for s in [0.3, 0.3, 0.3, 0.2, 0.1] {
        assert_ne!(h.observe(&j(s)), HealthState::NotRecovering);
    }
    assert_eq!(h.state, HealthState::Degraded);
    // A verification with nothing measurable keeps the drive degraded.
    assert_eq!(
        h.verified(&judge(None, None, TH), false),
        HealthState::Degraded
    );
    assert!(h.wants_refresh(), "still to be refreshed");
    // Nothing stale any more (e.g. all refreshed, or a rescan), then slow
    // again: an ordinary round, not a verification.
    h.observe(&judge(None, None, TH));
    assert_ne!(h.observe(&j(0.3)), HealthState::NotRecovering);
}

#[test]
fn hovering_at_the_threshold_does_not_flap() {
    let mut h = Health::default();
    let mut changes = 0;
    let mut last = h.state;
    for i in 0..200 {
        let s = if i % 2 == 0 { 0.95 } else { 1.08 };
        let st = h.observe(&j(s));
        if (st == HealthState::Degraded) != (last == HealthState::Degraded) {
            changes += 1;
        }
        last = st;
    }
    assert!(changes <= 1, "flapped {changes} times");
}

proptest! {
    // A healthy drive measured with ±35 % noise around 1.6× the floor is
    // never called degraded; a slow one (0.3× ± 35 %) always is, after at
    // most two rounds, and stays so.
    #[test]
    fn noise_does_not_flip_the_verdict(noise in proptest::collection::vec(-0.35f64..0.35, 3..60)) {
        let mut good = Health::default();
        for n in &noise {
            let st = good.observe(&j(1.6 * (1.0 + n)));
            prop_assert_ne!(st, HealthState::Degraded);
        }
        let mut bad = Health::default();
        for (i, n) in noise.iter().enumerate() {
            let st = bad.observe(&j(0.3 * (1.0 + n)));
            if i >= 1 {
                prop_assert_eq!(st, HealthState::Degraded);
            }
        }
    }
}

fn rec(ino: u64, mtime_days_ago: i64, last_refresh_days_ago: Option<i64>, size: u64) -> FileRecord {
    let now = 1_000 * 86_400;
    FileRecord {
        fs: crate::io::fsid::FsId::Dev(1),
        dev: 1,
        ino,
        path: format!("/srv/f{ino}").into(),
        size,
        alloc: size,
        mtime: crate::clock::Timestamp::new(now - mtime_days_ago * 86_400, 0),
        btime: None,
        generation: None,
        last_refresh: last_refresh_days_ago.map(|d| now - d * 86_400),
    }
}

fn rules(budget: Option<u64>) -> PlanRules {
    PlanRules {
        now: 1_000 * 86_400,
        stale_after: Duration::from_secs(30 * 86_400),
        min_interval: Duration::from_secs(30 * 86_400),
        budget_left: budget,
    }
}

#[test]
fn plan_lists_stale_files_oldest_first() {
    let files = [
        rec(1, 40, None, 10),
        rec(2, 200, None, 10),
        rec(3, 5, None, 10),       // fresh
        rec(4, 400, Some(10), 10), // refreshed 10 days ago: its data is fresh
        rec(5, 100, None, 10),
    ];
    let p = plan(&files, rules(None));
    let inos: Vec<u64> = p.files.iter().map(|f| f.ino).collect();
    assert_eq!(inos, [2, 5, 1]);
    assert_eq!(p.bytes, 30);
    assert!((p.files[0].age_days - 200.0).abs() < 1e-6);
}

#[test]
fn plan_skips_recent_refreshes_and_respects_the_budget() {
    // Stale by a short stale_after but refreshed 10 days ago (< min_interval).
    let mut r = rules(Some(25));
    r.stale_after = Duration::from_secs(5 * 86_400);
    let files = [
        rec(1, 400, Some(10), 10),
        rec(2, 300, None, 10),
        rec(3, 200, None, 10),
        rec(4, 100, None, 20),
        rec(5, 50, None, 5),
    ];
    let p = plan(&files, r);
    let inos: Vec<u64> = p.files.iter().map(|f| f.ino).collect();
    assert_eq!(inos, [2, 3, 5]);
    assert_eq!((p.skipped_recent, p.deferred_budget, p.bytes), (1, 1, 25));
}

mod references_support {
    use crate::sampler::{BucketSample, DriveSample, Measurement};

    pub fn measured(bps: f64) -> Measurement {
        Measurement {
            throughput: crate::sampler::Percentiles::of(&[bps, bps, bps, bps]),
            ..Measurement::default()
        }
    }

    pub fn sample(stale: f64, canary: Option<f64>, fresh_bucket: Option<f64>) -> DriveSample {
        let mut buckets = vec![];
        if let Some(f) = fresh_bucket {
            buckets.push(BucketSample {
                label: "0-1".into(),
                min_months: 0.0,
                files: 1,
                bytes: 1,
                stale: false,
                measured: measured(f),
                mean_months: Some(0.5),
            });
        }
        DriveSample {
            fresh: canary.map(measured),
            fresh_missing: canary.is_none().then(|| "no room for a canary".into()),
            buckets,
            stale: measured(stale),
            stale_files: 1,
            stale_bytes: 1,
            bytes_read: 0,
            canary_bytes: 0,
            seconds: 0.0,
        }
    }
}

mod references {
    use super::references_support::*;
    use super::*;
    use crate::policy::{judge_sample, Fallbacks, Reference};

    const RATIO: Thresholds = Thresholds {
        min_throughput: Rate(1 << 20),
        min_ratio: 0.5,
    };

    #[test]
    fn references_in_order_canary_baseline_freshest_expected() {
        let fb = Fallbacks {
            baseline_bps: Some(200e6),
            expected_bps: Some(500e6),
        };
        let j = judge_sample(&sample(34e6, Some(230e6), Some(100e6)), RATIO, fb);
        assert_eq!(j.reference, Some(Reference::Canary));
        assert!(j.below(), "34 vs 230 MB/s is below 0.5");
        let j = judge_sample(&sample(34e6, None, Some(100e6)), RATIO, fb);
        assert_eq!(
            (j.reference, j.fresh_bps),
            (Some(Reference::Baseline), Some(200e6))
        );
        let no_baseline = Fallbacks {
            baseline_bps: None,
            ..fb
        };
        let j = judge_sample(&sample(34e6, None, Some(100e6)), RATIO, no_baseline);
        assert_eq!(j.reference, Some(Reference::FreshestData));
        let j = judge_sample(&sample(34e6, None, None), RATIO, no_baseline);
        assert_eq!(
            (j.reference, j.fresh_bps),
            (Some(Reference::Expected), Some(500e6))
        );
    }

    #[test]
    fn without_any_reference_the_drive_is_unjudged_never_healthy() {
        let j = judge_sample(&sample(34e6, None, None), RATIO, Fallbacks::default());
        let why = j.unjudged.clone().unwrap_or_default();
        assert!(why.contains("no room for a canary"), "{why}");
        let mut h = Health::default();
        for _ in 0..5 {
            assert_eq!(h.observe(&j), HealthState::Unjudged);
        }
        assert!(!h.wants_refresh());
        // Without the ratio floor no reference is needed.
        let floor_only = Thresholds {
            min_ratio: 0.0,
            ..RATIO
        };
        let j = judge_sample(&sample(34e6, None, None), floor_only, Fallbacks::default());
        assert_eq!(j.unjudged, None);
    }
}

mod slow_drives {
    use super::references_support::*;
    use super::*;
    use crate::policy::{judge_sample, Fallbacks};

    #[test]
    fn every_byte_slow_is_slow_never_refreshed() {
        // A link at 20 MB/s: the canary reads like the old data.
        let j = judge_sample(&sample(19e6, Some(20e6), None), TH, Fallbacks::default());
        let why = j.slow.clone().unwrap_or_default();
        assert!(why.contains("as slowly as old data"), "{why}");
        let mut h = Health::default();
        for _ in 0..20 {
            assert_eq!(h.observe(&j), HealthState::Slow);
            assert!(!h.wants_refresh());
        }
    }

    #[test]
    fn far_below_the_baseline_is_slow_even_above_the_floor() {
        let fb = Fallbacks {
            baseline_bps: Some(500e6),
            expected_bps: None,
        };
        let floor_low = Thresholds {
            min_throughput: Rate(1 << 20),
            min_ratio: 0.5,
        };
        let j = judge_sample(&sample(140e6, Some(150e6), None), floor_low, fb);
        assert!(j.slow.is_some(), "150 MB/s fresh vs a 500 MB/s baseline");
    }

    #[test]
    fn old_data_slower_than_fresh_is_age_not_slowness() {
        let j = judge_sample(&sample(34e6, Some(230e6), None), TH, Fallbacks::default());
        assert_eq!(j.slow, None);
        assert!(j.below(), "degraded material");
    }
}

/// Regression: a 1 TB sparse file made a round announce 1 TB; a plan
/// counts what a refresh rewrites, the allocated data.
#[test]
fn a_plan_counts_allocated_bytes_not_apparent_size() {
    let sparse = FileRecord {
        alloc: 8192,
        ..rec(1, 200, None, 1 << 40)
    };
    let p = plan(&[sparse, rec(2, 200, None, 4096)], rules(Some(16384)));
    assert_eq!(p.bytes, 8192 + 4096);
    assert_eq!(
        (p.files.len(), p.deferred_budget),
        (2, 0),
        "the budget is not spent on holes"
    );
}
