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

#[test]
fn idle_first_the_rest_rotated() {
    assert_eq!(round_order(4, 0), [0, 1, 2, 3]);
    assert_eq!(round_order(4, 1), [0, 2, 3, 1]);
    assert_eq!(round_order(4, 5), [0, 3, 1, 2]);
    assert_eq!(round_order(1, 3), [0]);
    assert!(round_order(0, 2).is_empty());
}

#[test]
fn every_case_takes_every_slot_over_as_many_turns() {
    for n in 2..7 {
        for slot in 1..n {
            let mut seen: Vec<usize> = (0..n - 1).map(|t| round_order(n, t)[slot]).collect();
            seen.sort_unstable();
            assert_eq!(seen, (1..n).collect::<Vec<_>>(), "n {n}, slot {slot}");
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
fn a_law_against_itself_reads_one_with_no_spread() {
    let a = vec![vec![run(1.3, 8.0), run(0.9, 6.0)], vec![run(1.1, 5.0)]];
    let p = Paired::of(&a, &a).unwrap();
    assert_eq!(p.cells, 2);
    assert_eq!(
        p.p99,
        Interval {
            ratio: 1.0,
            bounds: Some((1.0, 1.0))
        }
    );
    assert!(!p.p99.excludes_one());
    assert_eq!((p.p99_lower, p.p99_higher), (0, 0));
}

#[test]
fn the_idle_run_cancels_and_rounds_average_in_logs() {
    // Cell one: a's p99 half of b's in one round, double in the other:
    // no difference. Cell two: a's 1.21× b's in both.
    let a = vec![vec![run(0.5, 8.0), run(2.0, 8.0)], vec![run(1.21, 4.0)]];
    let b = vec![vec![run(1.0, 8.0), run(1.0, 8.0)], vec![run(1.0, 4.0)]];
    let p = Paired::of(&a, &b).unwrap();
    assert!((p.p99.ratio - 1.1).abs() < 1e-9, "{:?}", p.p99);
    assert_eq!(p.mib_per_s.ratio, 1.0);
    assert_eq!((p.p99_lower, p.p99_higher), (0, 1));
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
fn one_cell_has_no_interval_and_none_has_no_result() {
    let a = vec![vec![run(1.2, 8.0)]];
    let b = vec![vec![run(1.0, 8.0)]];
    let p = Paired::of(&a, &b).unwrap();
    assert_eq!(p.p99.bounds, None);
    assert!(!p.p99.excludes_one());
    assert_eq!(Paired::of(&[], &[]), None);
    assert_eq!(Paired::of(&[vec![]], &[vec![]]), None);
}
