//! The host's lifecycle under the real systemd: a stop mid-refresh then
//! resume, the watchdog, the one-shot template with its journal, an
//! upgrade of the package.

use super::*;

/// Waits until the drive's refresh has done `bytes`.
fn under_way(c: &Container, bytes: u64) {
    c.wait_for("the refresh under way", 60, |c| {
        drive(c)["refresh"]["bytes_done"].as_u64().unwrap_or(0) > bytes
    });
}

/// At 8 MiB/s a 96 MiB file takes 12 s: stop after 24 MiB, start, and
/// the next round resumes it from its checkpoint.
pub(super) fn stop_mid_refresh_then_resume(c: &Container, t: &mut Tree, port: u16) {
    t.add_big("later", 11);
    set_config(c, port, "8MiB/s");
    c.ok("systemctl reload refreshd");
    c.ok("refreshctl now --force --path /srv/index/later");
    under_way(c, 24 * MIB as u64);
    c.ok("systemctl stop refreshd");
    assert!(
        journal(c, "refreshd").contains("interrupted; checkpointed"),
        "stopped mid-file"
    );
    c.ok("systemctl start refreshd");
    c.ok("refreshctl now --force --wait --path /srv/index/later");
    let log = journal(c, "refreshd");
    let resumed = log
        .lines()
        .find(|l| l.contains("resuming from checkpoint") && l.contains("later/seg0"))
        .unwrap_or_else(|| panic!("no resume:\n{log}"));
    assert!(!resumed.contains("skip=0"), "{resumed}");
    t.unchanged("after stop and resume");
    // Written in place under the unit's filter: fanotify was used, not
    // refused (counted) nor given up (said once in the log).
    let m = c.ok(&format!("curl -fsS http://127.0.0.1:{port}/metrics"));
    let series = "refreshd_syscall_refused_total{call=\"fanotify_init\"} ";
    let refused = m
        .lines()
        .find_map(|l| l.strip_prefix(series))
        .unwrap_or_else(|| panic!("{series}is exported:\n{m}"));
    let log = journal(c, "refreshd");
    assert_eq!(refused, "0", "fanotify refused under the unit:\n{log}");
    assert!(
        !log.contains("not using fanotify") && !log.contains("fanotify_init is refused"),
        "fanotify given up under the unit:\n{log}"
    );
    set_config(c, port, "400MiB/s");
    c.ok("systemctl reload refreshd");
}

/// SIGSTOP: the watchdog (WatchdogSec= shortened by a drop-in) kills the
/// frozen daemon and systemd starts a new one.
pub(super) fn watchdog_restarts_a_frozen_daemon(c: &Container) {
    let dropin = c.path("/etc/systemd/system/refreshd.service.d/watchdog.conf");
    std::fs::create_dir_all(dropin.parent().unwrap()).unwrap();
    std::fs::write(&dropin, "[Service]\nWatchdogSec=3s\nTimeoutStopSec=3s\n").unwrap();
    c.ok("systemctl daemon-reload && systemctl restart refreshd");
    let pid = main_pid(c);
    c.ok(&format!("kill -STOP {pid}"));
    c.wait_for("a new daemon after the watchdog fired", 60, |c| {
        let p = main_pid(c);
        p != pid && p != "0" && c.sh("systemctl is-active refreshd").1.trim() == "active"
    });
    let restarts: u32 = c
        .ok("systemctl show -p NRestarts --value refreshd")
        .trim()
        .parse()
        .unwrap();
    assert!(restarts >= 1);
    assert!(journal(c, "refreshd").contains("Watchdog timeout"));
    std::fs::remove_file(&dropin).unwrap();
    c.ok("systemctl daemon-reload && systemctl restart refreshd");
    status(c);
}

/// The one-shot template (a timer's job) with its recovery journal in the
/// state directory: killed mid-file at a moment its record vouches for
/// the file, the next run puts the mtime back.
pub(super) fn template_refreshes_with_its_journal(c: &Container, t: &mut Tree) {
    c.ok("systemctl stop refreshd");
    let big = t.add_big("oneshot", 13);
    let mtime = std::fs::metadata(&big).unwrap().mtime();
    let unit = "refreshd-refresh@srv-index-oneshot.service";
    let state = c.path("/var/lib/refreshd");
    for attempt in 0.. {
        assert!(attempt < 5, "no kill left a vouching record in 5 attempts");
        // --rate 50MiB/s in the template: about 2 s for the file.
        c.ok(&format!(
            "systemctl reset-failed {unit} 2>/dev/null; systemctl start --no-block {unit}"
        ));
        c.wait_for("the template writing the file", 30, |_| {
            std::fs::metadata(&big).unwrap().mtime() != mtime
        });
        let pid: u32 = c
            .ok(&format!("systemctl show -p MainPID --value {unit}"))
            .trim()
            .parse()
            .unwrap();
        // The container's PID, as the host numbers it.
        let host_pid = host_pid_of(c, pid);
        crate::daemon_harness::kill_when_recoverable(host_pid, &state, &big);
        c.wait_for("the killed run gone", 30, |c| {
            c.sh(&format!("systemctl is-active {unit}")).1.trim() != "active"
        });
        std::thread::sleep(std::time::Duration::from_millis(500));
        if record_vouches(&state, &big) {
            break;
        }
        set_mtime(&big, mtime, 0);
    }
    assert_ne!(
        std::fs::metadata(&big).unwrap().mtime(),
        mtime,
        "killed mid-file"
    );
    c.ok(&format!(
        "systemctl reset-failed {unit}; systemctl start {unit}"
    ));
    let log = journal(c, unit);
    assert!(!log.contains("no recovery journal"), "{log}");
    assert!(log.contains("put back the atime and mtime"), "{log}");
    t.unchanged("after the template");
    c.ok("systemctl start refreshd");
}

/// The host's PID of a process the container numbers `pid` (NSpid).
fn host_pid_of(c: &Container, pid: u32) -> u32 {
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let nspid: Vec<&str> = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .map(|l| l.split_whitespace().collect())
            .unwrap_or_default();
        let host: u32 = nspid.first().and_then(|p| p.parse().ok()).unwrap_or(0);
        if nspid.len() == 2 && nspid[1] == pid.to_string() && is_in(c, host) {
            return host;
        }
    }
    panic!("no host process for the container's pid {pid}");
}

/// Whether host PID `pid` is in the container's PID namespace.
fn is_in(c: &Container, pid: u32) -> bool {
    let ns = |p: u32| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok();
    ns(pid).is_some() && ns(pid) == ns(c.leader as u32)
}

/// `dpkg -i` of a newer version while a refresh runs: the service is
/// restarted by the maintainer scripts, the file in flight checkpointed
/// and resumed.
pub(super) fn upgrade_restarts_and_keeps_checkpoints(
    c: &Container,
    deb: &Path,
    t: &mut Tree,
    port: u16,
) {
    newer_package(deb, &c.path("/root/refreshd-newer.deb"));
    t.add_big("upgrade", 17);
    set_config(c, port, "8MiB/s");
    c.ok("systemctl reload refreshd");
    let pid = main_pid(c);
    c.ok("refreshctl now --force --path /srv/index/upgrade");
    under_way(c, 16 * MIB as u64);
    c.ok("dpkg -i /root/refreshd-newer.deb");
    assert_eq!(
        c.ok("systemctl is-active refreshd").trim(),
        "active",
        "running after the upgrade"
    );
    assert_ne!(main_pid(c), pid, "restarted by the upgrade");
    let version = c.ok("dpkg-query -W -f '${Version}' refreshd");
    assert!(version.ends_with("+upgrade"), "{version}");
    let conn = rusqlite::Connection::open_with_flags(
        c.path("/var/lib/refreshd/state.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let done: i64 = conn
        .query_row("SELECT COALESCE(MAX(done), 0) FROM checkpoints", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(done > 0, "the checkpoint survived the upgrade");
    c.ok("refreshctl now --force --wait --path /srv/index/upgrade");
    let log = journal(c, "refreshd");
    assert!(
        log.lines()
            .any(|l| l.contains("resuming from checkpoint") && l.contains("upgrade/seg0")),
        "{log}"
    );
    t.unchanged("after the upgrade");
    set_config(c, port, "400MiB/s");
    c.ok("systemctl reload refreshd");
}

/// The built package repacked as a newer version (same files), at `out`.
fn newer_package(deb: &Path, out: &Path) {
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let tree = work.path().join("pkg");
    run(Command::new("dpkg-deb").arg("-R").arg(deb).arg(&tree));
    let control = tree.join("DEBIAN/control");
    let text = std::fs::read_to_string(&control).unwrap();
    let text: String = text
        .lines()
        .map(|l| match l.strip_prefix("Version: ") {
            Some(v) => format!("Version: {v}+upgrade\n"),
            None => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&control, text).unwrap();
    run(Command::new("dpkg-deb")
        .args(["-b", "-Zgzip"])
        .arg(&tree)
        .arg(out));
}
