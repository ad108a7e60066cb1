//! What operators install: the systemd unit passes `systemd-analyze
//! verify`, the alert rules pass `promtool check rules`, the dashboard is
//! valid JSON using only exported metric names. The tools come from the
//! Debian packages `systemd` and `prometheus` (`.ci/run` installs them);
//! without them the tests skip, or fail under
//! REFRESHD_REQUIRE_PRIVILEGED_TESTS=1.

mod deb;

use std::path::{Path, PathBuf};
use std::process::Command;

fn tool(test: &str, name: &str) -> bool {
    if Command::new(name).arg("--version").output().is_ok() {
        return true;
    }
    if std::env::var("REFRESHD_REQUIRE_PRIVILEGED_TESTS").as_deref() == Ok("1") {
        panic!("{test}: `{name}` is not installed");
    }
    crate::helpers::skipped(test, &format!("`{name}` is not installed"));
    false
}

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn systemd_unit_passes_systemd_analyze_verify() {
    if !tool(
        "systemd_unit_passes_systemd_analyze_verify",
        "systemd-analyze",
    ) {
        return;
    }
    // The unit names /usr/bin/refreshd; verify checks that it exists,
    // so point a copy at the binary under test.
    let dir = tempfile::tempdir().unwrap();
    for unit in ["refreshd.service", "refreshd-refresh@.service"] {
        let text = std::fs::read_to_string(Path::new(ROOT).join("systemd").join(unit)).unwrap();
        let text = text.replace("/usr/bin/refreshd", env!("CARGO_BIN_EXE_refreshd"));
        assert!(
            text.contains(env!("CARGO_BIN_EXE_refreshd")),
            "{unit} runs refreshd"
        );
        std::fs::write(dir.path().join(unit), text).unwrap();
    }
    let instance = dir.path().join("refreshd-refresh@srv-index.service");
    std::fs::copy(dir.path().join("refreshd-refresh@.service"), &instance).unwrap();
    for unit in [dir.path().join("refreshd.service"), instance] {
        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&unit)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // Lines about other units on this machine are not ours.
        let ours: Vec<&str> = err.lines().filter(|l| l.contains("refreshd")).collect();
        assert!(
            out.status.success() && ours.is_empty(),
            "{}: {err}",
            unit.display()
        );
    }
    let unit = std::fs::read_to_string(Path::new(ROOT).join("systemd/refreshd.service")).unwrap();
    for must in [
        "Type=notify",
        "WatchdogSec=",
        "StateDirectory=refreshd",
        "RuntimeDirectory=refreshd",
        "IOSchedulingClass=idle",
        "CapabilityBoundingSet=",
        "ExecReload=",
    ] {
        assert!(unit.contains(must), "refreshd.service lacks {must}");
    }
}

/// `systemd-analyze security` rates the shipped unit at most 3.0 (lower
/// is better), and with the timed-reads drop-in too: the drop-in takes
/// effect (CAP_BPF and perf_event_open are what it adds, and are rated)
/// and adds nothing else. The system call filter cannot be exercised live
/// here (no systemd as PID 1; `tests/home.rs` boots one); it fails calls
/// with EPERM, so a missed one is an error in the log, not a dead daemon.
#[test]
fn systemd_unit_exposure_is_at_most_3() {
    if !tool("systemd_unit_exposure_is_at_most_3", "systemd-analyze") {
        return;
    }
    let unit = std::fs::read_to_string(Path::new(ROOT).join("systemd/refreshd.service")).unwrap();
    let dropin = std::fs::read_to_string(Path::new(ROOT).join("systemd/timed-reads.conf")).unwrap();
    let (shipped, text) = exposure(&unit);
    assert!(shipped <= 3.0, "exposure {shipped} > 3.0:\n{text}");
    assert!(!text.contains("✗ CapabilityBoundingSet=~CAP_BPF"), "{text}");
    // A drop-in's [Service] lines are merged as a repeated section is.
    let (timed, text) = exposure(&format!("{unit}\n{dropin}"));
    assert!(
        timed <= 3.0,
        "exposure with the drop-in {timed} > 3.0:\n{text}"
    );
    for added in [
        "✗ CapabilityBoundingSet=~CAP_BPF",
        "(e.g. perf_event_open is allowed)",
    ] {
        assert!(text.contains(added), "the drop-in adds {added}:\n{text}");
    }
    let settings: Vec<&str> = dropin
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    assert_eq!(
        settings,
        [
            "[Service]",
            "CapabilityBoundingSet=CAP_BPF CAP_PERFMON",
            "SystemCallFilter=bpf perf_event_open",
        ],
        "the drop-in adds what timing reads needs, nothing else"
    );
}

/// `systemd-analyze security --offline` of a unit's `text`: its overall
/// exposure and the report.
fn exposure(text: &str) -> (f64, String) {
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("refreshd.service");
    std::fs::write(
        &unit,
        text.replace("/usr/bin/refreshd", env!("CARGO_BIN_EXE_refreshd")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(&unit)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let level: f64 = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for refreshd.service:")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in: {text}"));
    (level, text)
}

#[test]
fn alert_rules_pass_promtool() {
    if !tool("alert_rules_pass_promtool", "promtool") {
        return;
    }
    let rules = Path::new(ROOT).join("config/prometheus/refreshd-alerts.yml");
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&rules).unwrap();
    for alert in [
        "RefreshdDriveDegraded",
        "RefreshdRefreshFailing",
        "RefreshdReadErrors",
        "RefreshdDown",
        "RefreshdCannotSample",
        "RefreshdDriveDegradingSoon",
        "RefreshdSyscallRefused",
    ] {
        assert!(text.contains(alert), "missing alert {alert}");
    }
    assert!(text.contains("for: 1d"), "degraded for a day");
}

/// The metric names the dashboard's and the alert rules' expressions use
/// (checked against a live daemon's scrape in `daemon_now`).
pub fn metric_names_used() -> Vec<String> {
    let dash =
        std::fs::read_to_string(Path::new(ROOT).join("config/grafana/refreshd-dashboard.json"))
            .unwrap();
    let v: serde_json::Value = serde_json::from_str(&dash).unwrap();
    let mut exprs: Vec<String> = vec![];
    for p in v["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    let rules =
        std::fs::read_to_string(Path::new(ROOT).join("config/prometheus/refreshd-alerts.yml"))
            .unwrap();
    exprs.extend(
        rules
            .lines()
            .filter_map(|l| l.trim().strip_prefix("expr:"))
            .map(str::to_string),
    );
    let mut names: Vec<String> = exprs
        .iter()
        .flat_map(|e| {
            e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("refreshd_"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn grafana_dashboard_is_valid_and_queries_refreshd() {
    let names = metric_names_used();
    assert!(names.len() >= 8, "{names:?}");
    assert!(names.iter().any(|n| n == "refreshd_yield_seconds_total"));
}

/// A privileged test run without root says it skipped, in the output of
/// a plain `cargo test` (not only under --nocapture): the test binary is
/// run as `nobody` on one privileged test.
#[test]
fn privileged_a_test_skipped_without_root_says_so() {
    if !crate::helpers::privileged("privileged_a_test_skipped_without_root_says_so") {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args([
            "--exact",
            "pacing::privileged_refresh_yields_to_a_reader_and_changes_nothing",
        ])
        .env_remove("REFRESHD_REQUIRE_PRIVILEGED_TESTS")
        .current_dir("/")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("1 passed"), "{stdout}");
    assert!(
        stderr.contains(
            "SKIPPED privileged_refresh_yields_to_a_reader_and_changes_nothing: needs root"
        ),
        "the skip is not visible: {stderr}"
    );
}

/// The man pages and completions in `dist/` are what the commands
/// generate now. After a change to the command line:
/// `REFRESHD_BLESS=1 cargo test dist_assets` rewrites them.
#[test]
fn dist_assets_match_the_commands() {
    let dir = tempfile::tempdir().unwrap();
    for cmd in [refreshd::cli::command(), refreshctl::cli::command()] {
        crate::helpers::assets::write(cmd, dir.path()).unwrap();
    }
    crate::helpers::assets::write_config_reference(dir.path()).unwrap();
    let dist = Path::new(ROOT).join("dist");
    let bless = std::env::var("REFRESHD_BLESS").as_deref() == Ok("1");
    let mut stale = vec![];
    let mut made: Vec<(PathBuf, PathBuf)> = vec![(
        dir.path().join("configuration.md"),
        Path::new(ROOT).join("docs/configuration.md"),
    )];
    for sub in ["man", "completions"] {
        for e in std::fs::read_dir(dir.path().join(sub)).unwrap() {
            let e = e.unwrap();
            made.push((e.path(), dist.join(sub).join(e.file_name())));
        }
    }
    for (made, at) in made {
        let want = std::fs::read(&made).unwrap();
        if std::fs::read(&at).ok().as_deref() != Some(&want[..]) {
            if bless {
                std::fs::create_dir_all(at.parent().unwrap()).unwrap();
                std::fs::write(&at, &want).unwrap();
            } else {
                stale.push(at.display().to_string());
            }
        }
    }
    assert!(
        stale.is_empty(),
        "out of date (run REFRESHD_BLESS=1 cargo test dist_assets): {stale:?}"
    );
    for page in [
        "refreshd.toml.5",
        "refreshd.1",
        "refreshd-refresh.1",
        "refreshd-run.1",
        "refreshctl-status.1",
    ] {
        assert!(dist.join("man").join(page).exists(), "{page}");
    }
    manual_is_complete(&dist);
}

/// Every page has the sections an operator looks for, names only pages
/// that exist, and no completion offers a hidden verb.
fn manual_is_complete(dist: &Path) {
    let man = dist.join("man");
    let pages: Vec<PathBuf> = std::fs::read_dir(&man)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let re_ref = |text: &str| -> Vec<String> {
        // "name(N)" with name like refreshd\-run (roff escapes).
        let t = text.replace("\\-", "-");
        t.split(|c: char| !(c.is_ascii_alphanumeric() || "-_.()".contains(c)))
            .filter_map(|w| {
                let (name, rest) = w.split_once('(')?;
                let n = rest.strip_suffix(')')?;
                (n.len() == 1
                    && n.chars().all(|c| c.is_ascii_digit())
                    && name.starts_with("refresh"))
                .then(|| format!("{name}.{n}"))
            })
            .collect()
    };
    for p in &pages {
        let text = std::fs::read_to_string(p).unwrap();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".1") {
            for section in [".SH \"EXIT STATUS\"", ".SH \"SEE ALSO\""] {
                assert!(text.contains(section), "{name} has no {section}");
            }
        }
        for r in re_ref(&text) {
            assert!(
                man.join(&r).exists(),
                "{name} names {r}, which is not in dist/man"
            );
        }
    }
    for e in std::fs::read_dir(dist.join("completions")).unwrap() {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            !text.contains("__assets"),
            "{} offers a hidden verb",
            p.display()
        );
    }
}
