//! The shipped sandbox, audited: every system call refreshd makes under
//! the unit is one its filter allows (the kernel's audit log says which
//! were not).

use super::*;

/// The calls the unit's `SystemCallFilter=` lines allow, expanded by this
/// systemd (`systemd-analyze syscall-filter`), as the lines combine: the
/// first is an allow list, `~` removes, a later plain line adds.
fn allowed_calls(c: &Container) -> Vec<String> {
    let unit = std::fs::read_to_string(c.path("/lib/systemd/system/refreshd.service")).unwrap();
    let expand = |items: &str| -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        let mut todo: Vec<String> = items.split_whitespace().map(String::from).collect();
        let mut seen = std::collections::BTreeSet::new();
        while let Some(i) = todo.pop() {
            if !seen.insert(i.clone()) {
                continue;
            }
            if i.starts_with('@') {
                let listed = c.ok(&format!("systemd-analyze syscall-filter --no-pager {i}"));
                todo.extend(
                    listed
                        .lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty() && !l.starts_with('#') && *l != i)
                        .map(String::from),
                );
            } else {
                out.insert(i);
            }
        }
        out
    };
    let mut allowed = std::collections::BTreeSet::new();
    for line in unit
        .lines()
        .filter_map(|l| l.strip_prefix("SystemCallFilter="))
    {
        match line.strip_prefix('~') {
            Some(deny) => {
                for x in expand(deny) {
                    allowed.remove(&x);
                }
            }
            None => allowed.extend(expand(line)),
        }
    }
    assert!(allowed.contains("io_uring_enter") && allowed.contains("read"));
    allowed.into_iter().collect()
}

/// Writes a marker line into the kernel log.
fn kmsg_marker(text: &str) {
    std::fs::write("/dev/kmsg", format!("{text}\n")).unwrap();
}

/// The kernel log's seccomp audit lines of refreshd after `marker`.
fn audit_lines(marker: &str) -> Vec<String> {
    let log = run(&mut Command::new("dmesg"));
    let log = String::from_utf8_lossy(&log.stdout);
    let after = log.rsplit_once(marker).map_or("", |(_, rest)| rest);
    after
        .lines()
        .filter(|l| l.contains("type=1326") && l.contains("refreshd"))
        .map(String::from)
        .collect()
}

/// The daemon's whole round (start, judge, a forced refresh in place and
/// by relocation, metrics, every control verb, stop) with the filter in
/// log mode: no call outside the shipped filter, none refused.
pub(super) fn every_call_is_allowed(c: &Container, t: &Tree, port: u16) {
    let dropin = c.path("/etc/systemd/system/refreshd.service.d/audit.conf");
    std::fs::create_dir_all(dropin.parent().unwrap()).unwrap();
    std::fs::write(
        &dropin,
        format!(
            "[Service]\nSystemCallFilter=\nSystemCallLog=~{}\n",
            allowed_calls(c).join(" ")
        ),
    )
    .unwrap();
    c.ok("systemctl daemon-reload");
    let marker = format!("refreshd-test-audit-{}", std::process::id());
    kmsg_marker(&marker);
    c.ok("systemctl start refreshd");
    judged(c);
    forced_refresh_refreshes_every_stale_file(c, t);
    metrics_inside(c, port);
    for verb in ["status", "drives", "plan", "survey", "pause", "resume"] {
        c.ok(&format!("refreshctl {verb}"));
    }
    c.ok("systemctl reload refreshd && systemctl stop refreshd");
    let refused = audit_lines(&marker);
    assert!(
        refused.is_empty(),
        "calls the shipped filter would refuse:\n{}",
        refused.join("\n")
    );
    std::fs::remove_file(&dropin).unwrap();
    c.ok("systemctl daemon-reload");
}
