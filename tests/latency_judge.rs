//! The latency benchmark's round order and paired statistics
//! (benches/latency/judge.rs): the benchmark runs without libtest's
//! harness, so its pure parts are tested here.

// What only the benchmark calls is dead code in this binary.
#[allow(dead_code)]
#[path = "../benches/latency/judge.rs"]
mod judge;

use judge::{round_order, t975, Interval, Paired, RoundRatios};

fn run(p99: f64, mib_per_s: f64) -> RoundRatios {
    RoundRatios {
        mean: 1.0,
        p99,
        mib_per_s,
    }
}

/// How many turns make a whole Williams design of `m` cases.
fn period(m: usize) -> usize {
    if m % 2 == 0 {
        m
    } else {
        2 * m
    }
}

#[test]
fn idle_first_then_the_williams_rows() {
    // m = 4: the first row 0, 1, 3, 2 (cases 1, 2, 4, 3), then + 1 each
    // turn; m = 3 (odd): three rows, then the same reversed.
    assert_eq!(round_order(5, 0), [0, 1, 2, 4, 3]);
    assert_eq!(round_order(5, 1), [0, 2, 3, 1, 4]);
    assert_eq!(round_order(5, 4), [0, 1, 2, 4, 3]);
    assert_eq!(round_order(4, 0), [0, 1, 2, 3]);
    assert_eq!(round_order(4, 3), [0, 3, 2, 1]);
    assert_eq!(round_order(2, 7), [0, 1]);
    assert_eq!(round_order(1, 3), [0]);
    assert!(round_order(0, 2).is_empty());
}

#[test]
fn over_a_period_each_case_takes_each_slot_and_follows_each_other_equally() {
    use std::collections::HashMap;
    for n in 2..11 {
        let m = n - 1;
        let turns = period(m);
        let mut in_slot: HashMap<(usize, usize), usize> = HashMap::new();
        let mut after: HashMap<(usize, usize), usize> = HashMap::new();
        for t in 0..turns {
            let row = round_order(n, t);
            let mut sorted = row.clone();
            sorted.sort_unstable();
            assert_eq!(
                sorted,
                (0..n).collect::<Vec<_>>(),
                "n {n}, turn {t}: {row:?}"
            );
            assert_eq!(row[0], 0, "idle first");
            for (slot, &case) in row.iter().enumerate() {
                *in_slot.entry((slot, case)).or_default() += 1;
            }
            for w in row[1..].windows(2) {
                *after.entry((w[0], w[1])).or_default() += 1;
            }
        }
        let cases = || 1..n;
        for (slot, case) in cases().flat_map(|s| cases().map(move |c| (s, c))) {
            let seen = in_slot.get(&(slot, case)).copied().unwrap_or(0);
            assert_eq!(seen, turns / m, "n {n}: case {case} in slot {slot}");
        }
        let each = if m == 1 { 0 } else { turns / m };
        for (a, b) in cases().flat_map(|a| cases().map(move |b| (a, b))) {
            if a != b {
                let seen = after.get(&(a, b)).copied().unwrap_or(0);
                assert_eq!(seen, each, "n {n}: {b} right after {a}");
            }
        }
    }
}

#[test]
fn t_goes_from_the_table_to_the_normal_smoothly() {
    assert_eq!(t975(1), 12.706);
    assert_eq!(t975(30), 2.042);
    assert!((t975(31) - 2.0395).abs() < 0.0005, "{}", t975(31));
    assert!((t975(60) - 2.0003).abs() < 0.0005, "{}", t975(60));
    assert!((t975(100_000) - 1.960).abs() < 0.001);
}

#[test]
fn the_interval_is_students_over_the_cells() {
    // Three cells, logs 0, ln 4, ln 2: mean ln 2, standard deviation
    // ln 2, two degrees of freedom (t 4.303): 2^(1 ∓ 4.303/√3).
    let b: Vec<Vec<RoundRatios>> = (0..3).map(|_| vec![run(1.0, 8.0)]).collect();
    let a = vec![
        vec![run(1.0, 8.0)],
        vec![run(4.0, 8.0)],
        vec![run(2.0, 8.0)],
    ];
    let p = Paired::of(&a, &b).unwrap();
    let half = 4.303 / 3f64.sqrt();
    let (lo, hi) = p.p99.bounds.unwrap();
    assert!((p.p99.ratio - 2.0).abs() < 1e-9, "{:?}", p.p99);
    assert!((lo - 2f64.powf(1.0 - half)).abs() < 1e-9, "{lo}");
    assert!((hi - 2f64.powf(1.0 + half)).abs() < 1e-9, "{hi}");
    assert_eq!(p.p99.cells, 3);
}

#[test]
fn a_law_against_itself_reads_one_with_no_spread() {
    let a = vec![vec![run(1.3, 8.0), run(0.9, 6.0)], vec![run(1.1, 5.0)]];
    let p = Paired::of(&a, &a).unwrap();
    assert_eq!(
        p.p99,
        Interval {
            ratio: 1.0,
            cells: 2,
            bounds: Some((1.0, 1.0))
        }
    );
    assert!(!p.p99.excludes_one());
    assert_eq!((p.p99_lower, p.p99_higher), (0, 0));
}

#[test]
fn the_idle_run_cancels_and_rounds_average_in_logs() {
    // Cell one: a's p99 half of b's in one round, double in the other:
    // no difference. Cell two: a's 1.21× b's in both, its rate double,
    // its mean 0.9×.
    let a = vec![
        vec![run(0.5, 8.0), run(2.0, 8.0)],
        vec![RoundRatios {
            mean: 0.9,
            p99: 1.21,
            mib_per_s: 8.0,
        }],
    ];
    let b = vec![vec![run(1.0, 8.0), run(1.0, 8.0)], vec![run(1.0, 4.0)]];
    let p = Paired::of(&a, &b).unwrap();
    assert!((p.p99.ratio - 1.1).abs() < 1e-9, "{:?}", p.p99);
    assert!((p.mean.ratio - 0.9f64.sqrt()).abs() < 1e-9, "{:?}", p.mean);
    let rate = p.mib_per_s.unwrap();
    assert!((rate.ratio - 2f64.sqrt()).abs() < 1e-9, "{rate:?}");
    assert_eq!((p.p99_lower, p.p99_higher), (0, 1));
    // b against a: the other way round.
    let back = Paired::of(&b, &a).unwrap();
    assert!((back.p99.ratio - 1.0 / 1.1).abs() < 1e-9);
    assert_eq!((back.p99_lower, back.p99_higher), (1, 0));
}

#[test]
fn a_steady_difference_is_told_from_a_noisy_one() {
    let b: Vec<Vec<RoundRatios>> = (0..12).map(|_| vec![run(1.0, 8.0)]).collect();
    // Every cell 10 % lower, give or take 2 %: the interval excludes 1.
    let steady: Vec<_> = (0..12)
        .map(|i| vec![run(if i % 2 == 0 { 0.88 } else { 0.92 }, 8.0)])
        .collect();
    let p = Paired::of(&steady, &b).unwrap();
    assert!(p.p99.excludes_one(), "{:?}", p.p99);
    assert_eq!(p.p99_lower, 12);
    // The same mean difference, half the cells far down and half up:
    // no verdict.
    let noisy: Vec<_> = (0..12)
        .map(|i| vec![run(if i % 2 == 0 { 0.6 } else { 1.35 }, 8.0)])
        .collect();
    let p = Paired::of(&noisy, &b).unwrap();
    assert!(!p.p99.excludes_one(), "{:?}", p.p99);
}

#[test]
fn a_run_that_refreshed_nothing_leaves_its_cell_out_of_the_rate_only() {
    let a = vec![
        vec![run(1.2, 0.0)],
        vec![run(1.1, 8.0)],
        vec![run(1.0, 6.0)],
    ];
    let b = vec![
        vec![run(1.0, 4.0)],
        vec![run(1.0, 4.0)],
        vec![run(1.0, 4.0)],
    ];
    let p = Paired::of(&a, &b).unwrap();
    assert_eq!(p.p99.cells, 3);
    let rate = p.mib_per_s.unwrap();
    assert_eq!(rate.cells, 2);
    assert!(
        rate.ratio.is_finite()
            && rate
                .bounds
                .is_some_and(|(l, h)| l.is_finite() && h.is_finite())
    );
    let none = Paired::of(&[vec![run(1.2, 0.0)]], &[vec![run(1.0, 4.0)]]).unwrap();
    assert_eq!(none.mib_per_s, None);
}

#[test]
fn one_cell_has_no_interval_and_none_has_no_result() {
    let a = vec![vec![run(1.2, 8.0)]];
    let b = vec![vec![run(1.0, 8.0)]];
    let p = Paired::of(&a, &b).unwrap();
    assert_eq!(p.p99.bounds, None);
    assert!(!p.p99.excludes_one());
    assert_eq!(Paired::of(&[], &[]), None);
    assert_eq!(Paired::of(&[vec![]], &[vec![]]), None);
}

#[test]
#[should_panic(expected = "different rounds")]
fn two_laws_over_different_rounds_are_a_bug() {
    let _ = Paired::of(
        &[vec![run(1.0, 8.0)]],
        &[vec![run(1.0, 8.0), run(1.0, 8.0)]],
    );
}
