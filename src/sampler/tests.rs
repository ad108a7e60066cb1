use super::*;

#[test]
fn percentiles_interpolate_between_ranks() {
    let p = Percentiles::of(&[1.0, 2.0, 3.0, 4.0, 5.0]).expect("values");
    assert_eq!(
        (p.p25, p.p50, p.p75, p.mean, p.count),
        (2.0, 3.0, 4.0, 3.0, 5)
    );
    assert!((p.p95 - 4.8).abs() < 1e-9);
    let one = Percentiles::of(&[7.0]).expect("one value");
    assert_eq!((one.p25, one.p95), (7.0, 7.0));
    assert!(Percentiles::of(&[]).is_none());
    // Order does not matter.
    assert_eq!(Percentiles::of(&[5.0, 1.0, 4.0, 2.0, 3.0]), Some(p));
}

#[test]
fn the_canary_shrinks_to_what_the_filesystem_can_spare() {
    let mib = 1 << 20;
    assert_eq!(
        canary_fits(32 * mib, 10_000 * mib, 64 * mib),
        Some(32 * mib)
    );
    // 80 MiB free, 64 MiB reserve: a 16 MiB canary, not none.
    assert_eq!(canary_fits(32 * mib, 80 * mib, 64 * mib), Some(16 * mib));
    assert_eq!(
        canary_fits(32 * mib, 66 * mib, 64 * mib),
        None,
        "less than a region"
    );
    // The refresh watermark (1 GiB by default) is not the canary's need.
    assert!(canary_fits(32 * mib, 600 * mib, CANARY_RESERVE.min(1 << 30)).is_some());
}

#[test]
fn buckets_cover_every_age() {
    assert_eq!(bucket_of(0.0), 0);
    assert_eq!(bucket_of(0.99), 0);
    assert_eq!(bucket_of(1.0), 1);
    assert_eq!(bucket_of(6.5), 6);
    assert_eq!(bucket_of(8.0), 7);
    assert_eq!(bucket_of(100.0), BUCKET_EDGES.len() - 1);
    assert_eq!(bucket_label(0), "0-1");
    assert_eq!(bucket_label(BUCKET_EDGES.len() - 1), "24+");
}
