use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::units::Rate;

const DAY: u64 = 86_400;

fn problems(text: &str) -> Vec<String> {
    parse(text, "t.toml")
        .expect_err("should be rejected")
        .problems
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn minimal_config_gets_defaults() {
    let c = parse("[[paths]]\npath = \"/srv/index\"\n", "t.toml").expect("valid");
    assert_eq!(c.paths.len(), 1);
    assert_eq!(c.paths[0].settings, Settings::default());
    assert_eq!(c.state_dir, PathBuf::from("/var/lib/refreshd"));
}

#[test]
fn path_entries_override_defaults() {
    let c = parse(
        "[defaults]\nrate = \"10MiB/s\"\nstale_after = \"60d\"\n[[paths]]\npath = \"/a\"\n[[paths]]\npath = \"/b\"\nrate = \"1MiB/s\"\n",
        "t.toml",
    )
    .expect("valid");
    assert_eq!(c.paths[0].settings.rate, Rate(10 << 20));
    assert_eq!(c.paths[1].settings.rate, Rate(1 << 20));
    assert_eq!(
        c.paths[1].settings.stale_after,
        Duration::from_secs(60 * DAY)
    );
}

#[test]
fn every_problem_is_reported_with_its_position() {
    let p = problems(
        "state_dir = \"relative\"\nbogus = 1\n[defaults]\nrate = \"fast\"\nmin_ratio = 3.0\n[[paths]]\npath = \"/a\"\nwindow = \"25:00-26:00\"\n",
    );
    assert_eq!(p.len(), 5, "{p:#?}");
    assert!(p[0].starts_with("t.toml:1:13: `state_dir`"), "{}", p[0]);
    assert!(
        p[1].starts_with("t.toml:2:1: unknown key `bogus`"),
        "{}",
        p[1]
    );
    assert!(
        p[2].starts_with("t.toml:4:8: `rate`") && p[2].contains("50MiB/s"),
        "{}",
        p[2]
    );
    assert!(p[3].starts_with("t.toml:5:13: `min_ratio`"), "{}", p[3]);
    assert!(p[4].starts_with("t.toml:8:10: `window`"), "{}", p[4]);
}

#[test]
fn syntax_errors_have_positions() {
    let p = problems("[[paths]]\npath = \"/a\"\nrate = \n");
    assert!(p[0].starts_with("t.toml:3:"), "{p:?}");
}

#[test]
fn paths_are_required_absolute_and_disjoint() {
    assert!(problems("")[0].contains("no [[paths]]"));
    let p = problems(
        "[[paths]]\npath = \"/srv\"\n[[paths]]\npath = \"/srv/a\"\n[[paths]]\npath = \"/x/../y\"\n",
    );
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(p[0].contains("overlaps /srv"));
    assert!(p[1].contains("`..`"));
}

#[test]
fn shipped_example_parses_to_the_defaults() {
    let text = include_str!("../../config/refreshd.toml");
    let c = parse(text, "config/refreshd.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.paths.len(), 1);
    assert_eq!(
        c.defaults,
        Settings::default(),
        "the example documents the defaults"
    );
    let d = Config::default();
    assert_eq!(
        (
            &c.state_dir,
            &c.control_socket,
            &c.metrics_listen,
            c.max_active_drives
        ),
        (
            &d.state_dir,
            &d.control_socket,
            &d.metrics_listen,
            d.max_active_drives
        )
    );
    // Every key is in the example (commented or not), with its default
    // where it has one.
    let entries = Config::reference()
        .into_iter()
        .chain(Settings::reference())
        .chain(Coordination::reference());
    for e in entries {
        let has_default = !["unset", "required", "the host name"]
            .iter()
            .any(|w| e.default.starts_with(w));
        let line = format!("{} = {}", e.key, e.default);
        if has_default {
            assert!(text.contains(&line), "the example lacks `{line}`");
        } else {
            assert!(
                text.contains(&format!("{} =", e.key)),
                "{} undocumented",
                e.key
            );
        }
    }
    for section in ["[defaults]", "[[paths]]", "[coordination]", "group ="] {
        assert!(text.contains(section), "{section} undocumented");
    }
}

#[test]
fn windows_parse_and_wrap() {
    let w: Windows = "22:00-06:00, 12:00-13:00".parse().expect("valid");
    assert!(w.contains(23 * 60) && w.contains(5 * 60) && w.contains(12 * 60 + 30));
    assert!(!w.contains(6 * 60) && !w.contains(13 * 60) && !w.contains(20 * 60));
    assert!(Windows::always().contains(0) && Windows::always().contains(1439));
    assert!("10:00".parse::<Windows>().is_err());
    assert!("10:00-10:00".parse::<Windows>().is_err());
    assert_eq!(w.to_string(), "22:00-06:00,12:00-13:00");
}

#[test]
fn a_syntax_error_is_reported_first() {
    // A bad value on line 2, a broken table header on line 4.
    let p = problems("[defaults]\nrate = \"fast\"\n\n[[paths]\npath = \"/srv\"\n");
    assert!(p.len() >= 2, "{p:?}");
    assert!(p[0].starts_with("t.toml:4:"), "syntax first: {p:?}");
    assert!(p.iter().any(|x| x.starts_with("t.toml:2:")), "{p:?}");
}
