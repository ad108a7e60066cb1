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
