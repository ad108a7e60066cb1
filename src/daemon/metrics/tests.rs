use super::*;
use crate::engine::report::Range;

#[test]
fn a_revoked_lease_is_counted_with_its_bytes_and_reason() {
    let m = Metrics::new();
    let mut r = FileReport::new(
        "/srv/a".into(),
        Outcome::failed(crate::engine::report::FailKind::LeaseRevoked, "revoked"),
    );
    r.lease_exposed = vec![Range {
        offset: 0,
        len: 1 << 20,
    }];
    m.record_report("sda", &r);
    m.record_report("sda", &FileReport::new("/srv/b".into(), Outcome::Refreshed));
    let text = m.encode();
    assert!(
        text.contains("refreshd_lease_exposed_bytes_total{device=\"sda\"} 1048576"),
        "{text}"
    );
    assert!(text.contains("reason=\"lease_revoked\""), "{text}");
    assert!(!text.contains("/srv/"), "no file names in labels");
}

#[test]
fn every_failure_has_a_stable_reason_label_from_the_first_scrape() {
    use crate::engine::report::FailKind;
    let m = Metrics::new();
    m.init_drive("sdx");
    let text = m.encode();
    for k in FailKind::ALL {
        let series = format!(
            "refreshd_refresh_files_total{{device=\"sdx\",outcome=\"failed\",reason=\"{}\"}} 0",
            k.as_str()
        );
        assert!(text.contains(&series), "{series} missing: {text}");
    }
    assert!(
        !text.contains("outcome=\"failed\",reason=\"\""),
        "no empty reason"
    );
    let r = FileReport::new(
        "/srv/a".into(),
        Outcome::failed(FailKind::NoSpace, "ENOSPC"),
    );
    m.record_report("sdx", &r);
    assert!(m.encode().contains(
        "refreshd_refresh_files_total{device=\"sdx\",outcome=\"failed\",reason=\"no_space\"} 1"
    ));
}

/// A drive's first scrape has every series a sample and a refresh will
/// have: they add values, never series (an alert or dashboard query
/// must not depend on whether the first sample came before the scrape).
#[test]
fn a_sample_and_a_refresh_add_values_never_series() {
    use crate::sampler::{DriveSample, Measurement, Percentiles};
    let series = |text: &str| -> std::collections::BTreeSet<String> {
        text.lines()
            .filter(|l| !l.starts_with('#') && l.contains("device=\"sdx\""))
            .filter_map(|l| l.rsplit_once(' ').map(|(k, _)| k.to_string()))
            .collect()
    };
    let m = Metrics::new();
    m.init_drive("sdx");
    let first = series(&m.encode());
    let measured = Measurement {
        throughput: Percentiles::of(&[100e6, 120e6]),
        aggregate_bps: Some(110e6),
        latency_ms: Percentiles::of(&[0.2, 0.3, 0.4]),
        bytes_read: 1 << 20,
        errors: 0,
    };
    let sample = DriveSample {
        fresh: Some(measured.clone()),
        fresh_missing: None,
        buckets: vec![],
        stale: measured,
        stale_files: 1,
        stale_bytes: 1 << 20,
        bytes_read: 2 << 20,
        canary_bytes: 1 << 20,
        seconds: 0.1,
    };
    m.sampled("sdx", &sample, 1_800_000_000);
    m.record_report("sdx", &FileReport::new("/srv/a".into(), Outcome::Refreshed));
    let later = series(&m.encode());
    let new: Vec<&String> = later.difference(&first).collect();
    assert!(
        new.is_empty(),
        "series that only a sample or refresh made: {new:?}"
    );
    assert!(first
        .iter()
        .any(|s| s.starts_with("refreshd_sample_read_latency_seconds")));
}
