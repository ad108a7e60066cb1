//! Fleet coordination against a real etcd (127.0.0.1, free ports, temp
//! data): at most `max_concurrent` drives of a group refresh at once, a
//! dead holder's slot frees itself within `lease_ttl`, an etcd outage
//! stops the holder and nobody else starts, bad input is refused or
//! shown, the health gate holds refreshes back. Every file's bytes and
//! times are checked afterwards.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::daemon_harness::*;
use crate::fleet_harness::*;
use crate::helpers::*;

/// Slow enough that refreshes overlap unless something stops them.
const SLOW: &str = "rate = \"8MiB/s\"\nsample_interval = \"1h\"\nyield = \"off\"\n";

/// A daemon on its own loop filesystem, with `files` stale files of `mib`.
struct Member {
    _fs: LoopFs,
    tmp: tempfile::TempDir,
    cfg: PathBuf,
    port: u16,
    files: Vec<PathBuf>,
    before: Vec<Fingerprint>,
}

fn member(name: &str, etcd: &str, max: usize, files: usize, mib: usize, extra: &str) -> Member {
    let fs = LoopFs::new("ext4", 256);
    let tree = fs.path("tree");
    let seed = name.bytes().map(u64::from).sum::<u64>() * 100;
    let files = stale_files(&tree, files, mib, seed);
    fs.sync();
    let before = files.iter().map(|p| fingerprint(p)).collect();
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let section = coordination(etcd, "shard-7", name, max, extra);
    let cfg = fleet_config(tmp.path(), &tree, port, SLOW, &section);
    Member {
        _fs: fs,
        tmp,
        cfg,
        port,
        files,
        before,
    }
}

impl Member {
    fn fs_tree(&self) -> PathBuf {
        self._fs.path("tree")
    }

    fn start(&self) -> Daemon {
        Daemon::start(self.tmp.path(), &self.cfg, self.port)
    }

    fn unchanged(&self) {
        let now: Vec<Fingerprint> = self.files.iter().map(|p| fingerprint(p)).collect();
        assert_eq!(self.before, now, "contents, layout and times unchanged");
    }

    fn bytes(&self) -> u64 {
        (self.files.len() as u64) * std::fs::metadata(&self.files[0]).unwrap().len()
    }
}

/// The most refreshes that ran at once across the daemons (their logs).
fn most_at_once(daemons: &[Daemon]) -> usize {
    let all: Vec<(f64, f64)> = daemons
        .iter()
        .flat_map(|d| refresh_intervals(&d.log(), None))
        .collect();
    most_overlapping(&all)
}

fn refreshed(d: &Daemon) -> u64 {
    refreshed_bytes(&d.metrics()) as u64
}

fn force(d: &Daemon) {
    let (code, _, err) = d.ctl(&["now", "--force"]);
    assert_eq!(code, 0, "{err}");
}

/// Waits until `d` has refreshed all of `m`, stops it, checks every file.
fn finish(d: Daemon, m: &Member, what: &str, secs: u64) {
    wait_all(
        what,
        secs,
        std::slice::from_ref(&d),
        std::slice::from_ref(m),
    );
    drop(d);
    m.unchanged();
}

fn all_done(daemons: &[Daemon], members: &[Member]) -> bool {
    daemons
        .iter()
        .zip(members)
        .all(|(d, m)| refreshed(d) >= m.bytes() && d.status()["refresh"].is_null())
}

fn wait_all(what: &str, secs: u64, daemons: &[Daemon], members: &[Member]) {
    let t = Instant::now();
    while !all_done(daemons, members) {
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "timed out waiting for {what}\n{}",
            daemons
                .iter()
                .map(|d| format!("--- {}\n{}", d.ctl(&["status"]).1, d.log()))
                .collect::<String>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs three daemons in one group with `max` slots, every one asked to
/// refresh 3 × 16 MiB at 8 MiB/s; returns the most seen refreshing at
/// once (metrics, sampled) and the most overlapping in their logs.
fn three_in_a_group(max: usize) -> (usize, usize) {
    let etcd = Etcd::start();
    let members: Vec<Member> = ["a", "b", "c"]
        .iter()
        .map(|n| member(n, &etcd.endpoint(), max, 3, 16, ""))
        .collect();
    let daemons: Vec<Daemon> = members.iter().map(Member::start).collect();
    let watcher = Watcher::start(members.iter().map(|m| m.port).collect());
    for d in &daemons {
        force(d);
    }
    wait_all("every drive refreshed", 120, &daemons, &members);
    let seen = watcher.max();
    drop(watcher);
    let rounds: usize = daemons
        .iter()
        .map(|d| refresh_intervals(&d.log(), None).len())
        .sum();
    assert!(rounds >= 3, "{rounds} rounds");
    for d in &daemons {
        let log = d.log();
        assert!(log.contains("fleet slot taken"), "{log}");
        assert!(log.contains("fleet slot released"), "{log}");
    }
    assert!(etcd.queue("shard-7").is_empty(), "every slot given back");
    let at_once = most_at_once(&daemons);
    drop(daemons);
    for m in &members {
        m.unchanged();
    }
    (seen, at_once)
}

#[test]
fn privileged_fleet_two_slots_two_at_a_time_never_three() {
    if !have_etcd("privileged_fleet_two_slots_two_at_a_time_never_three") {
        return;
    }
    let (seen, overlap) = three_in_a_group(2);
    assert_eq!(overlap, 2, "never three at once, and two did run together");
    assert!(seen <= 2, "the metrics saw {seen} at once");
}

#[test]
fn privileged_fleet_one_slot_one_at_a_time() {
    if !have_etcd("privileged_fleet_one_slot_one_at_a_time") {
        return;
    }
    let (seen, overlap) = three_in_a_group(1);
    assert_eq!(overlap, 1, "one at a time");
    assert_eq!(seen, 1);
}

fn in_progress(d: &Daemon) -> bool {
    refreshing(d.port)
}

fn bytes_done(d: &Daemon) -> u64 {
    d.status()["refresh"]["bytes_done"].as_u64().unwrap_or(0)
}

/// The skip of "resuming from checkpoint" in a log, if any.
fn resumed_at(log: &str) -> Option<u64> {
    log.lines()
        .find(|l| l.contains("resuming from checkpoint"))?
        .split("skip=")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[test]
fn privileged_fleet_a_killed_holder_frees_its_slot_within_the_lease_ttl() {
    if !have_etcd("privileged_fleet_a_killed_holder_frees_its_slot_within_the_lease_ttl") {
        return;
    }
    let etcd = Etcd::start();
    let a = member("a", &etcd.endpoint(), 1, 2, 48, "");
    let b = member("b", &etcd.endpoint(), 1, 1, 32, "");
    let mut da = a.start();
    let db = b.start();
    force(&da);
    da.wait_for("a refreshing", 30, |d| {
        in_progress(d) && bytes_done(d) >= 8 << 20
    });
    force(&db);
    db.wait_for("b waiting for the slot", 30, |d| {
        d.status()["slot"]["state"] == "waiting"
    });
    let (_, text, _) = db.ctl(&["status"]);
    assert!(
        text.contains("waiting for a fleet slot") && text.contains("slots held by: a/"),
        "{text}"
    );
    assert!(bytes_done(&da) < 40 << 20, "still in the first file");
    da.child.kill().unwrap();
    let killed = Instant::now();
    da.child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let exact = record_vouches(&a.tmp.path().join("state"), &a.files[0]);
    db.wait_for("b takes the freed slot", 15, in_progress);
    let took = killed.elapsed();
    eprintln!("b took the slot {took:?} after a was killed (lease_ttl 5 s)");
    // lease_ttl (5 s) + one poll (1 s) + a second for the scrape.
    assert!(
        took <= Duration::from_secs(7),
        "b started {took:?} after the kill"
    );
    assert!(
        took >= Duration::from_secs(2),
        "not before a's lease could expire: {took:?}"
    );
    // a, restarted: queues again behind b, then resumes from its checkpoint.
    let da = a.start();
    force(&da);
    da.wait_for("a queued behind b", 30, |d| {
        d.status()["slot"]["state"] == "waiting" || !in_progress(&db)
    });
    let members = [a, b];
    let daemons = [da, db];
    wait_all("both refreshed", 90, &daemons[1..], &members[1..]);
    daemons[0].wait_for("a refreshed", 90, |d| {
        d.status()["refresh"].is_null() && d.status()["last_refresh"].is_i64()
    });
    let log = daemons[0].log();
    assert_eq!(most_at_once(&daemons), 1, "one at a time");
    if exact {
        let skip = resumed_at(&log).unwrap_or_else(|| panic!("no resume:\n{log}"));
        assert!(skip >= 8 << 20, "resumed at {skip}");
        // Nothing before the checkpoint was written again.
        assert_eq!(refreshed(&daemons[0]), (96 << 20) - skip);
    } else {
        eprintln!("a write was in flight at the kill: the file's mtime moved (not provably ours)");
    }
    drop(daemons);
    members[1].unchanged();
    let a = &members[0];
    for (i, (f, b)) in a.files.iter().zip(&a.before).enumerate() {
        let now = fingerprint(f);
        assert_eq!(now.hash, b.hash, "file {i}: contents intact");
        if exact || i > 0 {
            assert_eq!(&now, b, "file {i}: contents and times intact");
        }
    }
}

#[test]
fn privileged_fleet_an_etcd_outage_stops_the_holder_and_nobody_starts() {
    if !have_etcd("privileged_fleet_an_etcd_outage_stops_the_holder_and_nobody_starts") {
        return;
    }
    outage(false);
}

/// A partition rather than a crash: etcd stops answering (SIGSTOP) with
/// its connections open, so only timeouts tell.
#[test]
fn privileged_fleet_a_silent_etcd_stops_the_holder_and_nobody_starts() {
    if !have_etcd("privileged_fleet_a_silent_etcd_stops_the_holder_and_nobody_starts") {
        return;
    }
    outage(true);
}

/// etcd goes away mid-refresh (killed, or frozen when `silent`) and comes
/// back: the holder stops within the lease TTL, nobody refreshes without
/// etcd, and afterwards both finish with no byte rewritten twice.
fn outage(silent: bool) {
    let mut etcd = Etcd::start();
    let members = [
        member("a", &etcd.endpoint(), 1, 1, 64, ""),
        member("b", &etcd.endpoint(), 1, 1, 64, ""),
    ];
    let daemons: Vec<Daemon> = members.iter().map(Member::start).collect();
    for d in &daemons {
        force(d);
    }
    let t = Instant::now();
    let holder = loop {
        if let Some(i) = daemons
            .iter()
            .position(|d| in_progress(d) && bytes_done(d) >= 8 << 20)
        {
            break i;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "nobody started");
        std::thread::sleep(Duration::from_millis(100));
    };
    if silent {
        etcd.freeze();
    } else {
        etcd.down();
    }
    let down = Instant::now();
    daemons[holder].wait_for("the holder to stop", 10, |d| !in_progress(d));
    let stopped = down.elapsed();
    eprintln!("the holder stopped {stopped:?} after etcd went down");
    assert!(
        stopped <= Duration::from_secs(5),
        "stopped {stopped:?} after etcd went"
    );
    // Nobody refreshes without etcd: two lease_ttl's worth.
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        for d in &daemons {
            assert!(!in_progress(d), "a refresh without etcd\n{}", d.log());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let st = daemons[holder].status();
    assert_eq!(st["slot"]["state"], "unavailable", "{st:#}");
    let (_, text, _) = daemons[holder].ctl(&["status"]);
    assert!(
        text.contains("NOT connected") && text.contains("etcd"),
        "{text}"
    );
    let m = daemons[holder].metrics();
    assert_eq!(metric(&m, "refreshd_coordination_up"), Some(0.0), "{m}");
    assert!(
        metric(
            &m,
            "refreshd_coordination_errors_total{kind=\"session_lost\"}"
        ) >= Some(1.0)
    );
    if silent {
        etcd.thaw();
    } else {
        etcd.up();
    }
    wait_all("both refreshed after etcd is back", 90, &daemons, &members);
    let log = daemons[holder].log();
    let skip = resumed_at(&log).unwrap_or_else(|| panic!("no resume:\n{log}"));
    assert!(skip >= 8 << 20, "resumed at {skip}");
    for (d, m) in daemons.iter().zip(&members) {
        // No byte before a checkpoint written twice.
        assert_eq!(refreshed(d), m.bytes(), "{}", d.log());
    }
    assert_eq!(most_at_once(&daemons), 1, "one at a time");
    drop(daemons);
    for m in &members {
        m.unchanged();
    }
}

/// A closed port on 127.0.0.1 (nothing listens there).
fn closed_endpoint() -> String {
    format!("http://127.0.0.1:{}", free_port())
}

fn check_config(cfg: &Path) -> (i32, String) {
    let out = refreshd()
        .args(["check-config", "--config"])
        .arg(cfg)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn privileged_fleet_bad_input_is_refused_or_shown_never_a_refresh_without_a_slot() {
    if !have_etcd("privileged_fleet_bad_input_is_refused_or_shown_never_a_refresh_without_a_slot") {
        return;
    }
    let etcd = Etcd::start();
    etcd.enable_auth("right");
    let m = member("a", &etcd.endpoint(), 1, 2, 8, "");
    let pw = m.tmp.path().join("etcd.pw");
    let with = |endpoint: &str, extra: &str| {
        let section = coordination(endpoint, "shard-7", "a", 1, extra);
        fleet_config(m.tmp.path(), &m.fs_tree(), m.port, SLOW, &section)
    };
    // Wrong password: check-config says so, at the endpoints' position.
    std::fs::write(&pw, "wrong\n").unwrap();
    let auth = format!(
        "user = \"refreshd\"\npassword_file = \"{}\"\n",
        pw.display()
    );
    let (code, out) = check_config(&with(&etcd.endpoint(), &auth));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("refreshd.toml:") && out.contains("authentication failed"),
        "{out}"
    );
    std::fs::write(&pw, "right\n").unwrap();
    let (code, out) = check_config(&with(&etcd.endpoint(), &auth));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("fleet: group shard-7"), "{out}");
    // Unreachable etcd: check-config says so.
    let nowhere = closed_endpoint();
    let (code, out) = check_config(&with(&nowhere, ""));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("etcd ({nowhere})")), "{out}");
    // An empty group and no slots: refused with positions.
    let bad = m.tmp.path().join("bad.toml");
    let text = std::fs::read_to_string(with(&etcd.endpoint(), ""))
        .unwrap()
        .replace("group = \"shard-7\"", "group = \"\"")
        .replace("max_concurrent = 1", "max_concurrent = 0");
    std::fs::write(&bad, text).unwrap();
    let (code, out) = check_config(&bad);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("`group`") && out.contains("`max_concurrent` must be at least 1"),
        "{out}"
    );
    assert!(
        out.lines()
            .all(|l| l.starts_with(&bad.display().to_string())),
        "{out}"
    );
    // The daemon with etcd unreachable runs, samples, says why, and does
    // not refresh, even when asked to.
    let sampling = "rate = \"8MiB/s\"\nsample_interval = \"2s\"\nsample_bytes = \"8MiB\"\n";
    let section = coordination(&nowhere, "shard-7", "a", 1, "");
    fleet_config(m.tmp.path(), &m.fs_tree(), m.port, sampling, &section);
    let d = m.start();
    force(&d);
    d.wait_for("a sample and the reason shown", 30, |d| {
        let st = d.status();
        st["last_sample"].is_object() && st["waiting"] == "etcd"
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(!in_progress(&d));
    assert_eq!(refreshed(&d), 0);
    let (_, text, _) = d.ctl(&["status"]);
    assert!(
        text.contains("NOT connected") && text.contains("etcd unreachable"),
        "{text}"
    );
    let metrics = d.metrics();
    assert_eq!(
        metric(&metrics, "refreshd_coordination_configured"),
        Some(1.0)
    );
    assert!(
        metric(
            &metrics,
            "refreshd_coordination_errors_total{kind=\"connect\"}"
        ) >= Some(1.0)
    );
    let dev = d.status()["device"].as_str().unwrap().to_string();
    assert_eq!(
        metric(
            &metrics,
            &format!("refreshd_coordination_slot_waiting{{device=\"{dev}\",group=\"shard-7\"}}")
        ),
        Some(1.0),
        "{metrics}"
    );
    drop(d);
    m.unchanged();
}

#[test]
fn privileged_fleet_the_health_gate_holds_refreshes_back_and_between_files() {
    if !have_etcd("privileged_fleet_the_health_gate_holds_refreshes_back_and_between_files") {
        return;
    }
    let etcd = Etcd::start();
    let flag_dir = tempfile::tempdir().unwrap();
    let flag = flag_dir.path().join("green");
    let gate = format!(
        "health_command = [\"/bin/sh\", \"-c\", \"test -e {}\"]\n",
        flag.display()
    );
    let m = member("a", &etcd.endpoint(), 1, 3, 16, &gate);
    let d = m.start();
    force(&d);
    d.wait_for("the gate's no shown", 30, |d| {
        d.status()["waiting"] == "health"
    });
    let (_, text, _) = d.ctl(&["status"]);
    assert!(text.contains("health gate says no"), "{text}");
    assert!(
        etcd.queue("shard-7").is_empty(),
        "no slot taken while the gate says no"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(refreshed(&d), 0);
    // Green: the refresh goes (the gate is asked again within 10 s).
    std::fs::write(&flag, b"").unwrap();
    d.wait_for("the refresh to start", 30, in_progress);
    // Not green any more mid-file: the file finishes, the next one waits,
    // and the slot is given back.
    std::fs::remove_file(&flag).unwrap();
    d.wait_for("the round to stop between files", 30, |d| !in_progress(d));
    let done = refreshed(&d);
    assert!(
        done > 0 && done % (16 << 20) == 0,
        "whole files only: {done}"
    );
    assert!(done < 48 << 20, "stopped before the end: {done}");
    d.wait_for("the slot given back", 10, |_| {
        etcd.queue("shard-7").is_empty()
    });
    assert!(d.log().contains("health gate"), "{}", d.log());
    let m_text = d.metrics();
    assert!(
        metric(
            &m_text,
            "refreshd_coordination_errors_total{kind=\"health_gate\"}"
        ) >= Some(2.0)
    );
    std::fs::write(&flag, b"").unwrap();
    finish(d, &m, "the rest refreshed", 60);
}

/// The first scenario on emulated aging SSDs: three daemons whose
/// drives all read 6-month-old data slowly find it by themselves; with one
/// slot they refresh one at a time, and every drive ends fast again.
#[test]
fn privileged_fleet_three_degraded_drives_refresh_one_at_a_time_and_end_fast() {
    if !have_etcd("privileged_fleet_three_degraded_drives_refresh_one_at_a_time_and_end_fast") {
        return;
    }
    let etcd = Etcd::start();
    struct Aged {
        tmp: tempfile::TempDir,
        drive: testbed::Drive,
        files: Vec<PathBuf>,
        fresh: PathBuf,
        before: Vec<Fingerprint>,
        port: u16,
    }
    let aged: Vec<Aged> = ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
            let drive = drive(tmp.path(), "840evo");
            let tree = drive.path("index");
            let files = stale_files(&tree, 4, 8, 700 + 10 * i as u64);
            let fresh = drive.path("fresh-reference");
            write_file(&fresh, &pattern(16 * MIB, 799));
            drive.sync().unwrap();
            drive.age(6.0);
            let before = files.iter().map(|p| fingerprint(p)).collect();
            let port = free_port();
            let section = coordination(&etcd.endpoint(), "shard-9", name, 1, "");
            fleet_config(tmp.path(), &tree, port, "", &section);
            Aged {
                tmp,
                drive,
                files,
                fresh,
                before,
                port,
            }
        })
        .collect();
    let daemons: Vec<Daemon> = aged
        .iter()
        .map(|a| Daemon::start(a.tmp.path(), &a.tmp.path().join("refreshd.toml"), a.port))
        .collect();
    let t = Instant::now();
    let healthy = |d: &Daemon| {
        let m = d.metrics();
        let dev = d.status()["device"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        refreshed_bytes(&m) >= (32 * MIB) as f64
            && metric(
                &m,
                &format!("refreshd_drive_state{{device=\"{dev}\",state=\"healthy\"}}"),
            ) == Some(1.0)
    };
    while !daemons.iter().all(healthy) {
        assert!(
            t.elapsed() < Duration::from_secs(180),
            "not all refreshed and healthy:\n{}",
            daemons
                .iter()
                .map(|d| d.ctl(&["status"]).1)
                .collect::<String>()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(most_at_once(&daemons), 1, "one at a time");
    for d in &daemons {
        assert!(d.log().contains("fleet slot taken"), "{}", d.log());
    }
    drop(daemons);
    for a in &aged {
        let (mut after, mut reference) = (0f64, 0f64);
        for _ in 0..3 {
            drop_caches();
            after = after.max(testbed::measure::bulk_read_parallel(&a.files[0], 8).unwrap());
            drop_caches();
            reference = reference.max(testbed::measure::bulk_read_parallel(&a.fresh, 8).unwrap());
        }
        assert!(
            after >= 0.8 * reference,
            "refreshed {after:.0} B/s vs fresh {reference:.0} B/s"
        );
        let now: Vec<Fingerprint> = a.files.iter().map(|p| fingerprint(p)).collect();
        assert_eq!(a.before, now, "contents, layout and times unchanged");
        let _ = &a.drive;
    }
}

/// etcd's auth tokens expire (JWT tokens after their `ttl`, 2 s here;
/// simple tokens after 5 idle minutes): the client renews its token, and a
/// refresh longer than that goes on under its slot without losing the
/// session.
#[test]
fn privileged_fleet_an_expiring_auth_token_does_not_lose_the_slot() {
    if !have_etcd("privileged_fleet_an_expiring_auth_token_does_not_lose_the_slot") {
        return;
    }
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = (keys.path().join("jwt.key"), keys.path().join("jwt.pub"));
    run(Command::new("openssl")
        .args(["genrsa", "-out"])
        .arg(&private)
        .arg("2048"));
    run(Command::new("openssl")
        .args(["rsa", "-pubout", "-in"])
        .arg(&private)
        .arg("-out")
        .arg(&public));
    let jwt = format!(
        "--auth-token=jwt,pub-key={},priv-key={},sign-method=RS256,ttl=2s",
        public.display(),
        private.display()
    );
    let etcd = Etcd::start_with(&[&jwt]);
    etcd.enable_auth("right");
    let m = member("a", &etcd.endpoint(), 1, 1, 48, "");
    let pw = m.tmp.path().join("etcd.pw");
    std::fs::write(&pw, "right\n").unwrap();
    let auth = format!(
        "user = \"refreshd\"\npassword_file = \"{}\"\n",
        pw.display()
    );
    let section = coordination(&etcd.endpoint(), "shard-7", "a", 1, &auth);
    fleet_config(m.tmp.path(), &m.fs_tree(), m.port, SLOW, &section);
    let d = m.start();
    force(&d);
    wait_all(
        "the refresh",
        60,
        std::slice::from_ref(&d),
        std::slice::from_ref(&m),
    );
    let log = d.log();
    assert!(!log.contains("session lost"), "{log}");
    assert!(!log.contains("interrupted;"), "{log}");
    assert_eq!(refreshed(&d), 48 << 20);
    drop(d);
    m.unchanged();
}

/// Members of a group agree on `max_concurrent` (the first records it in
/// etcd; one that says otherwise does not refresh, and says why); a tree
/// may name its own group; two groups on one drive are refused.
#[test]
fn privileged_fleet_groups_agree_and_trees_name_their_group() {
    if !have_etcd("privileged_fleet_groups_agree_and_trees_name_their_group") {
        return;
    }
    let etcd = Etcd::start();
    let a = member("a", &etcd.endpoint(), 1, 1, 8, "");
    let da = a.start();
    force(&da);
    wait_all(
        "a refreshed",
        60,
        std::slice::from_ref(&da),
        std::slice::from_ref(&a),
    );
    let out = etcd.ctl(&[
        "get",
        "--print-value-only",
        "/refreshd/shard-7/max_concurrent",
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
    // b says 2: it would let two refresh where a allows one.
    let b = member("b", &etcd.endpoint(), 2, 1, 8, "");
    let db = b.start();
    force(&db);
    db.wait_for("b refusing the group", 30, |d| {
        d.status()["waiting"] == "etcd"
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(refreshed(&db), 0);
    let (_, text, _) = db.ctl(&["status"]);
    assert!(
        text.contains("group shard-7 has max_concurrent = 1 in etcd"),
        "{text}"
    );
    assert!(etcd.queue("shard-7").is_empty(), "b never queued");
    drop((da, db));
    b.unchanged();
    // c: a tree in another group on a second drive, and a third tree on
    // the first drive naming yet another group (refused).
    let fs2 = LoopFs::new("ext4", 128);
    let other = fs2.path("tree");
    stale_files(&other, 1, 8, 990);
    let clash = a.fs_tree().with_file_name("clash");
    std::fs::create_dir(&clash).unwrap();
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let cfg = config_trees(tmp.path(), &[&a.fs_tree(), &other, &clash], port, SLOW);
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replacen(
            &format!("path = \"{}\"\n", other.display()),
            &format!("path = \"{}\"\ngroup = \"shard-8\"\n", other.display()),
            1,
        )
        .replacen(
            &format!("path = \"{}\"\n", clash.display()),
            &format!("path = \"{}\"\ngroup = \"shard-9\"\n", clash.display()),
            1,
        );
    let section = coordination(&etcd.endpoint(), "shard-7", "c", 1, "");
    std::fs::write(&cfg, format!("max_active_drives = 2\n{text}{section}")).unwrap();
    let (code, out) = check_config(&cfg);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("names group shard-9: a drive refreshes under one group"),
        "{out}"
    );
    let dc = Daemon::start(tmp.path(), &cfg, port);
    let (_, drives, _) = dc.ctl(&["drives"]);
    assert!(
        drives.contains("fleet group: shard-7") && drives.contains("fleet group: shard-8"),
        "{drives}"
    );
    assert!(
        drives.contains("a drive refreshes under one group"),
        "{drives}"
    );
    force(&dc);
    dc.wait_for("shard-8 recorded", 30, |_| {
        !etcd
            .ctl(&[
                "get",
                "--print-value-only",
                "/refreshd/shard-8/max_concurrent",
            ])
            .stdout
            .is_empty()
    });
    let (_, text, _) = dc.ctl(&["status"]);
    assert!(
        text.contains("group shard-7") && text.contains("group shard-8"),
        "{text}"
    );
}

/// A drive queues for its group's slot only when its host could start it
/// now: while the host's one permit is busy with another drive, it does
/// not hold a slot the other copies of its data could use.
#[test]
fn privileged_fleet_a_drive_waiting_for_its_host_does_not_hold_a_slot() {
    if !have_etcd("privileged_fleet_a_drive_waiting_for_its_host_does_not_hold_a_slot") {
        return;
    }
    let etcd = Etcd::start();
    let fs = [LoopFs::new("ext4", 128), LoopFs::new("ext4", 128)];
    let trees: Vec<PathBuf> = fs.iter().map(|f| f.path("tree")).collect();
    let files: Vec<PathBuf> = trees
        .iter()
        .enumerate()
        .flat_map(|(i, t)| stale_files(t, 1, 32, 950 + i as u64))
        .collect();
    fs.iter().for_each(LoopFs::sync);
    let before: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let cfg = config_trees(tmp.path(), &[&trees[0], &trees[1]], port, SLOW);
    let text = std::fs::read_to_string(&cfg).unwrap().replacen(
        &format!("path = \"{}\"\n", trees[1].display()),
        &format!("path = \"{}\"\ngroup = \"shard-8\"\n", trees[1].display()),
        1,
    );
    let section = coordination(&etcd.endpoint(), "shard-7", "h", 1, "");
    std::fs::write(&cfg, format!("{text}{section}")).unwrap();
    let d = Daemon::start(tmp.path(), &cfg, port);
    force(&d);
    let all = |d: &Daemon| -> serde_json::Value {
        let (_, out, _) = d.ctl(&["--json", "status"]);
        serde_json::from_str(&out).unwrap()
    };
    d.wait_for(
        "one drive refreshing, the other waiting for the host",
        30,
        |d| {
            let st = all(d);
            let drives = st["drives"].as_array().unwrap();
            drives.iter().any(|x| !x["refresh"].is_null())
                && drives.iter().any(|x| x["waiting"] == "host")
        },
    );
    let st = all(&d);
    let waiting = st["drives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["waiting"] == "host")
        .unwrap()
        .clone();
    assert!(
        waiting["slot"].is_null(),
        "no slot while the host is busy: {waiting:#}"
    );
    let busy_group = if etcd.queue("shard-7").is_empty() {
        "shard-8"
    } else {
        "shard-7"
    };
    let idle_group = if busy_group == "shard-7" {
        "shard-8"
    } else {
        "shard-7"
    };
    assert_eq!(etcd.queue(busy_group).len(), 1);
    assert!(
        etcd.queue(idle_group).is_empty(),
        "the waiting drive is not in its group's queue"
    );
    let t = Instant::now();
    while refreshed_total(&d.metrics()) < (64 << 20) as f64 {
        assert!(t.elapsed() < Duration::from_secs(60), "{}", d.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(d);
    let now: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    assert_eq!(before, now, "contents, layout and times unchanged");
}

/// Pausing the holder gives its slot back at once (the next drive starts);
/// resumed, it queues again and finishes from its checkpoint. A drive
/// outside its window does not queue at all.
#[test]
fn privileged_fleet_pause_gives_the_slot_back_and_a_closed_window_never_queues() {
    if !have_etcd("privileged_fleet_pause_gives_the_slot_back_and_a_closed_window_never_queues") {
        return;
    }
    let etcd = Etcd::start();
    let members = [
        member("a", &etcd.endpoint(), 1, 1, 48, ""),
        member("b", &etcd.endpoint(), 1, 1, 16, ""),
    ];
    let daemons: Vec<Daemon> = members.iter().map(Member::start).collect();
    force(&daemons[0]);
    daemons[0].wait_for("a refreshing", 30, |d| {
        in_progress(d) && bytes_done(d) >= 8 << 20
    });
    force(&daemons[1]);
    daemons[1].wait_for("b waiting", 30, |d| {
        d.status()["slot"]["state"] == "waiting"
    });
    let (code, _, err) = daemons[0].ctl(&["pause"]);
    assert_eq!(code, 0, "{err}");
    let paused = Instant::now();
    daemons[1].wait_for("b takes the slot a gave back", 10, in_progress);
    let took = paused.elapsed();
    eprintln!("b started {took:?} after a paused");
    assert!(
        took < Duration::from_secs(4),
        "{took:?}: the slot waited for a lease to expire?"
    );
    assert_eq!(daemons[0].status()["waiting"], "paused");
    assert!(
        daemons[0].status()["slot"].is_null(),
        "a paused drive holds no slot"
    );
    let (code, _, err) = daemons[0].ctl(&["resume"]);
    assert_eq!(code, 0, "{err}");
    force(&daemons[0]);
    wait_all("both refreshed", 90, &daemons, &members);
    let log = daemons[0].log();
    assert!(resumed_at(&log).is_some_and(|s| s >= 8 << 20), "{log}");
    assert_eq!(refreshed(&daemons[0]), 48 << 20, "no byte rewritten twice");
    assert_eq!(most_at_once(&daemons), 1, "one at a time");
    drop(daemons);
    for m in &members {
        m.unchanged();
    }
    // A window that is closed now: asked, the drive waits for it and
    // never takes a place in the queue.
    let c = member("c", &etcd.endpoint(), 1, 1, 8, "");
    let now = refreshd::inventory::now_secs();
    let closed = closed_window(now);
    let text = std::fs::read_to_string(&c.cfg).unwrap().replacen(
        "[defaults]\n",
        &format!("[defaults]\nwindow = \"{closed}\"\n"),
        1,
    );
    std::fs::write(&c.cfg, text).unwrap();
    let dc = c.start();
    force(&dc);
    dc.wait_for("c waiting for its window", 30, |d| {
        d.status()["waiting"] == "window"
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        etcd.queue("shard-7").is_empty(),
        "no slot taken outside the window"
    );
    assert_eq!(refreshed(&dc), 0);
    drop(dc);
    c.unchanged();
}

/// A one-hour local-time window that starts 6 hours from `now`.
fn closed_window(now: i64) -> String {
    // SAFETY: localtime_r with valid pointers.
    let minute = unsafe {
        let t: libc::time_t = now;
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        tm.tm_hour * 60 + tm.tm_min
    };
    let start = (minute + 360) % 1440;
    let end = (start + 60) % 1440;
    format!(
        "{:02}:{:02}-{:02}:{:02}",
        start / 60,
        start % 60,
        end / 60,
        end % 60
    )
}

/// TLS to etcd with client certificates: check-config and the daemon
/// connect with the right CA and certificate; with another CA, or with no
/// client certificate, check-config says why and the daemon refreshes
/// nothing.
#[test]
fn privileged_fleet_over_tls_with_client_certificates() {
    if !have_etcd("privileged_fleet_over_tls_with_client_certificates") {
        return;
    }
    let etcd = Etcd::start_tls();
    let certs = etcd.tls.clone().unwrap();
    let tls = |ca: &str, client: bool| {
        let mut s = format!("ca_file = \"{}\"\n", certs.join(ca).display());
        if client {
            s += &format!(
                "cert_file = \"{}\"\nkey_file = \"{}\"\n",
                certs.join("client.pem").display(),
                certs.join("client.key").display()
            );
        }
        s
    };
    let m = member("a", &etcd.endpoint(), 1, 1, 16, &tls("ca.pem", true));
    let (code, out) = check_config(&m.cfg);
    assert_eq!(code, 0, "{out}");
    for (ca, client, why, says) in [
        ("other-ca.pem", true, "another CA", "UnknownIssuer"),
        (
            "ca.pem",
            false,
            "no client certificate",
            "set cert_file and key_file",
        ),
    ] {
        let section = coordination(&etcd.endpoint(), "shard-7", "a", 1, &tls(ca, client));
        let cfg = fleet_config(m.tmp.path(), &m.fs_tree(), m.port, SLOW, &section);
        let (code, out) = check_config(&cfg);
        assert_eq!(code, 1, "{why}: {out}");
        assert!(
            out.contains(&format!("etcd ({})", etcd.endpoint())),
            "{why}: {out}"
        );
        assert!(out.contains(says), "{why}: {out}");
    }
    // The daemon with the right ones refreshes under its slot.
    let section = coordination(&etcd.endpoint(), "shard-7", "a", 1, &tls("ca.pem", true));
    fleet_config(m.tmp.path(), &m.fs_tree(), m.port, SLOW, &section);
    let d = m.start();
    force(&d);
    wait_all(
        "the refresh over TLS",
        60,
        std::slice::from_ref(&d),
        std::slice::from_ref(&m),
    );
    assert!(d.log().contains("fleet slot taken"), "{}", d.log());
    drop(d);
    m.unchanged();
}

/// A member of the etcd cluster is down: the client uses the others.
#[test]
fn privileged_fleet_one_endpoint_down_of_two() {
    if !have_etcd("privileged_fleet_one_endpoint_down_of_two") {
        return;
    }
    let etcd = Etcd::start();
    let endpoints = format!("{}\", \"{}", closed_endpoint(), etcd.endpoint());
    let m = member("a", &endpoints, 1, 1, 16, "");
    let (code, out) = check_config(&m.cfg);
    assert_eq!(code, 0, "{out}");
    let d = m.start();
    force(&d);
    finish(d, &m, "the refresh", 60);
}

/// A three-member etcd cluster loses a member mid-refresh (whichever: the
/// one the holder talks to, or another): the refreshes finish, one at a
/// time, every byte refreshed once.
#[test]
fn privileged_fleet_a_cluster_member_dies_mid_refresh() {
    if !have_etcd("privileged_fleet_a_cluster_member_dies_mid_refresh") {
        return;
    }
    let mut cluster = Etcd::cluster(3);
    let endpoints = cluster
        .iter()
        .map(Etcd::endpoint)
        .collect::<Vec<_>>()
        .join("\", \"");
    let members = [
        member("a", &endpoints, 1, 1, 48, ""),
        member("b", &endpoints, 1, 1, 48, ""),
    ];
    let daemons: Vec<Daemon> = members.iter().map(Member::start).collect();
    for d in &daemons {
        force(d);
    }
    let t = Instant::now();
    while !daemons
        .iter()
        .any(|d| in_progress(d) && bytes_done(d) >= 8 << 20)
    {
        assert!(t.elapsed() < Duration::from_secs(30), "nobody started");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A daemon's first session is with the first endpoint: both lose it,
    // and go on with another member (quorum: two of three stand).
    cluster[0].down();
    wait_all("both refreshed", 120, &daemons, &members);
    assert!(
        daemons
            .iter()
            .all(|d| d.log().contains("etcd session lost")),
        "the dead member was the one they talked to"
    );
    for (d, m) in daemons.iter().zip(&members) {
        assert_eq!(refreshed(d), m.bytes(), "{}", d.log());
    }
    assert_eq!(most_at_once(&daemons), 1, "one at a time");
    drop(daemons);
    for m in &members {
        m.unchanged();
    }
}

/// A daemon that stops cleanly (SIGTERM) revokes its lease: the next drive
/// starts at once, not a lease_ttl later; the file it was on is
/// checkpointed and resumed at its next start.
#[test]
fn privileged_fleet_a_clean_stop_frees_the_slot_at_once() {
    if !have_etcd("privileged_fleet_a_clean_stop_frees_the_slot_at_once") {
        return;
    }
    let etcd = Etcd::start();
    let members = [
        member("a", &etcd.endpoint(), 1, 1, 48, ""),
        member("b", &etcd.endpoint(), 1, 1, 16, ""),
    ];
    let mut da = members[0].start();
    let db = members[1].start();
    force(&da);
    da.wait_for("a refreshing", 30, |d| {
        in_progress(d) && bytes_done(d) >= 8 << 20
    });
    force(&db);
    db.wait_for("b waiting", 30, |d| {
        d.status()["slot"]["state"] == "waiting"
    });
    signal(&da, nix::sys::signal::Signal::SIGTERM);
    let stopped = Instant::now();
    da.child.wait().unwrap();
    db.wait_for("b starts", 10, in_progress);
    let took = stopped.elapsed();
    eprintln!("b started {took:?} after a was told to stop (lease_ttl 5 s)");
    assert!(
        took < Duration::from_secs(4),
        "{took:?}: a's lease was not revoked"
    );
    assert!(
        da.log().contains("left the fleet: lease revoked"),
        "{}",
        da.log()
    );
    assert!(!members[0]
        .tmp
        .path()
        .join("state/coordination.lease")
        .exists());
    wait_all("b refreshed", 60, std::slice::from_ref(&db), &members[1..]);
    drop(db);
    let da = members[0].start();
    force(&da);
    da.wait_for("a finished", 60, |d| {
        let st = d.status();
        st["refresh"].is_null() && st["last_refresh"].is_i64() && st["stale_bytes"] == 0
    });
    let log = da.log();
    let skip = resumed_at(&log).unwrap_or_else(|| panic!("no resume:\n{log}"));
    assert_eq!(refreshed(&da), (48 << 20) - skip, "only the rest rewritten");
    drop(da);
    for m in &members {
        m.unchanged();
    }
}
