//! End to end: the real `refreshd run` on testbed drives and loop
//! filesystems, driven through `refreshctl`, scraped over HTTP (and by a
//! real Prometheus), killed and restarted.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::daemon_harness::*;
use crate::helpers::*;
use refreshd::drive::disk_stats;
use serde_json::Value;
use testbed::Drive;

#[test]
fn privileged_daemon_finds_and_fixes_a_degraded_drive() {
    if !privileged("privileged_daemon_finds_and_fixes_a_degraded_drive") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = drive(tmp.path(), "840evo");
    let tree = d.path("index");
    let files = stale_files(&tree, 6, 16, 1);
    d.sync().unwrap();
    d.age(6.0);
    let fresh = d.path("fresh-reference");
    write_file(&fresh, &pattern(32 * MIB, 99));
    d.sync().unwrap();
    let before: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    let dev = d.loop_dev.trim_start_matches("/dev/").to_string();

    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, "");
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    let degraded = format!("refreshd_drive_degraded{{device=\"{dev}\"}}");
    let mut seen_degraded = false;
    let total = (6 * 16 * MIB) as f64;
    let refreshed = format!("refreshd_refreshed_bytes_total{{device=\"{dev}\"}}");
    let healthy = format!("refreshd_drive_state{{device=\"{dev}\",state=\"healthy\"}}");
    daemon.wait_for("degraded, refreshed, healthy", 90, |dm| {
        let m = dm.metrics();
        seen_degraded |= metric(&m, &degraded) == Some(1.0);
        seen_degraded
            && metric(&m, &refreshed).unwrap_or(0.0) >= total
            && metric(&m, &healthy) == Some(1.0)
    });
    let m = daemon.metrics();
    assert!(m.contains("# TYPE refreshd_refresh_files counter"), "{m}");
    assert!(
        metric(&m, &format!("refreshd_refresh_files_total{{device=\"{dev}\",outcome=\"refreshed\",reason=\"\"}}")) >= Some(6.0),
        "{m}"
    );
    assert!(!m.contains("index/seg"), "no file names in labels");
    let (code, text, _) = daemon.ctl(&["status"]);
    assert_eq!(code, 0);
    assert!(text.contains(&dev) && text.contains("healthy"), "{text}");
    drop(daemon);
    // The inventory knows they were refreshed, with their generation.
    let db = rusqlite::Connection::open(tmp.path().join("state/state.db")).unwrap();
    let n: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM files WHERE last_refresh IS NOT NULL AND generation IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 6);

    drop_caches();
    // Aged data reads at about a tenth of fresh on this model; refreshed
    // data reads like fresh. Other tests share the 2 cores (the testbed's
    // FUSE server needs CPU), so the best of five alternating reads is
    // compared, and half of fresh is the bar: far above aged.
    let (mut after, mut reference) = (0f64, 0f64);
    for _ in 0..5 {
        drop_caches();
        after = after.max(testbed::measure::bulk_read_parallel(&files[0], 8).unwrap());
        drop_caches();
        reference = reference.max(testbed::measure::bulk_read_parallel(&fresh, 8).unwrap());
    }
    assert!(
        after >= 0.5 * reference,
        "refreshed {after:.0} B/s vs fresh {reference:.0} B/s"
    );
    let now: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    assert_eq!(before, now, "contents, layout and times unchanged");
}

#[test]
fn privileged_daemon_leaves_a_fresh_drive_alone() {
    if !privileged("privileged_daemon_leaves_a_fresh_drive_alone") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = drive(tmp.path(), "840evo");
    let tree = d.path("index");
    // Old by mtime, fresh on the flash: not slow, must not be rewritten.
    stale_files(&tree, 4, 32, 5);
    d.sync().unwrap();
    let dev = d.loop_dev.trim_start_matches("/dev/").to_string();
    let w0 = disk_stats(&dev).unwrap().write_bytes;
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, "sample_interval = \"1s\"\n");
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    daemon.wait_for("five sample rounds", 60, |dm| {
        dm.log().matches("sampled").count() >= 5
    });
    let rounds = daemon.log().matches("sampled").count() as u64;
    let st = daemon.status();
    assert_eq!(st["state"], "healthy", "{st:#}");
    let m = daemon.metrics();
    assert_eq!(
        metric(
            &m,
            &format!("refreshd_refreshed_bytes_total{{device=\"{dev}\"}}")
        ),
        Some(0.0),
        "exported from the first scrape, and nothing rewritten: {m}"
    );
    drop(daemon);
    d.sync().unwrap();
    // Only the canary (8 MiB per round with a 32 MiB budget) and the
    // filesystem's own metadata (journal, allocation) were written; a
    // refresh would have written the 128 MiB of files.
    let written = disk_stats(&dev).unwrap().write_bytes - w0;
    let allowed = (rounds + 1) * (8 << 20) + (16 << 20);
    assert!(
        written <= allowed,
        "wrote {written} bytes in {rounds} rounds (allowed {allowed})"
    );
}

#[test]
fn privileged_refreshctl_now_wait_pause_and_resume() {
    if !privileged("privileged_refreshctl_now_wait_pause_and_resume") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = drive(tmp.path(), "none");
    let tree = d.path("index");
    let files = stale_files(&tree, 4, 32, 11);
    d.sync().unwrap();
    let before: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    let port = free_port();
    // A healthy drive (nothing happens by itself), a slow throttle.
    let cfg = config(
        tmp.path(),
        &tree,
        port,
        "rate = \"16MiB/s\"\nsample_interval = \"1h\"\n",
    );
    let daemon = Daemon::start(tmp.path(), &cfg, port);

    let (code, out, err) = daemon.ctl(&["now", "--force"]);
    assert_eq!(code, 0, "{out}{err}");
    daemon.wait_for("the refresh to be under way", 30, |dm| {
        dm.status()["refresh"]["bytes_done"].as_u64().unwrap_or(0) >= 24 << 20
    });
    let (code, _, err) = daemon.ctl(&["pause"]);
    assert_eq!(code, 0, "{err}");
    daemon.wait_for("the refresh to stop", 10, |dm| {
        dm.status()["refresh"].is_null()
    });
    let st = daemon.status();
    assert_eq!(st["paused"], true, "{st:#}");
    let done = |dm: &Daemon| {
        metric(&dm.metrics(), "refreshd_refreshed_bytes_total{device=\"").unwrap_or(0.0)
    };
    let _ = done;
    let m1 = daemon.metrics();
    std::thread::sleep(Duration::from_millis(1500));
    let m2 = daemon.metrics();
    let bytes = |m: &str| {
        m.lines()
            .find(|l| l.starts_with("refreshd_refreshed_bytes_total"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    assert_eq!(bytes(&m1), bytes(&m2), "paused: nothing more written");
    assert!(bytes(&m1) < (128 * MIB) as f64, "paused mid-way");
    let (code, text, _) = daemon.ctl(&["status"]);
    assert_eq!(code, 0);
    assert!(text.contains("paused"), "{text}");

    let (code, _, err) = daemon.ctl(&["resume"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = daemon.ctl(&["now", "--force", "--wait"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("idle"), "--wait returns when done: {out}");
    let m = daemon.metrics();
    assert!(bytes(&m) >= (128 * MIB) as f64, "{m}");
    assert!(daemon.log().contains("resuming from checkpoint") || bytes(&m) < (160 * MIB) as f64);
    drop(daemon);
    let now: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    assert_eq!(before, now);
}

/// Starts a forced refresh of one 96 MiB file at 24 MiB/s and kills the
/// daemon (SIGKILL) 40 MiB into it. Returns the drive (kept up), the file
/// and its fingerprint from before, and whether the file's (mtime, ctime)
/// are exactly what the journal record says the daemon's own writes left
/// (no write in flight at the kill: only then can recovery prove the move
/// was its own).
fn killed_mid_file(dir: &Path) -> (Drive, PathBuf, Fingerprint, bool) {
    let d = drive(dir, "none");
    let tree = d.path("index");
    let file = stale_files(&tree, 1, 96, 21).remove(0);
    d.sync().unwrap();
    let before = fingerprint(&file);
    let port = free_port();
    let cfg = config(dir, &tree, port, KILL_SETTINGS);
    let mut daemon = Daemon::start(dir, &cfg, port);
    let (code, _, err) = daemon.ctl(&["now", "--force"]);
    assert_eq!(code, 0, "{err}");
    daemon.wait_for("40 MiB done", 30, |dm| {
        dm.status()["refresh"]["bytes_done"].as_u64().unwrap_or(0) >= 40 << 20
    });
    daemon.child.kill().unwrap(); // SIGKILL: no chance to clean up
    daemon.child.wait().unwrap();
    // A write io_uring had punted to its workers may still land (and move
    // the times) as the dead process's ring is torn down: judge after.
    std::thread::sleep(Duration::from_millis(500));
    let exact = record_vouches(&dir.join("state"), &file);
    (d, file, before, exact)
}

const KILL_SETTINGS: &str = "rate = \"24MiB/s\"\nsample_interval = \"1h\"\n";

#[test]
fn privileged_daemon_resumes_from_its_checkpoint_after_kill_9() {
    if !privileged("privileged_daemon_resumes_from_its_checkpoint_after_kill_9") {
        return;
    }
    // A kill while a write is in flight leaves the mtime moved (recovery
    // cannot prove the move was its own): then the file looks freshly
    // written and is not resumed. Retry until the kill lands between
    // writes, the usual case.
    for attempt in 0..4 {
        let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
        let (d, file, before, exact) = killed_mid_file(tmp.path());
        let port = free_port();
        let cfg = config(tmp.path(), &d.path("index"), port, KILL_SETTINGS);
        let daemon = Daemon::start(tmp.path(), &cfg, port);
        if !exact {
            drop(daemon);
            let after = fingerprint(&file);
            assert_eq!(after.hash, before.hash, "contents intact");
            assert_ne!(after.mtime, before.mtime, "not provably ours: left moved");
            eprintln!("attempt {attempt}: a write was in flight at the kill");
            continue;
        }
        let (code, out, err) = daemon.ctl(&["now", "--force", "--wait"]);
        assert_eq!(code, 0, "{out}{err}");
        let log = daemon.log();
        assert!(log.contains("restored the atime and mtime"), "{log}");
        let resumed = log
            .lines()
            .find(|l| l.contains("resuming from checkpoint"))
            .unwrap_or_else(|| panic!("no resume in the log:\n{log}"));
        let skip: u64 = resumed
            .split("skip=")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .unwrap();
        assert!(skip >= 32 << 20, "resumed at {skip}");
        let m = daemon.metrics();
        let second = refreshed_bytes(&m) as u64;
        assert_eq!(second, (96 << 20) - skip, "only the rest was rewritten");
        drop(daemon);
        assert_eq!(fingerprint(&file), before, "contents and mtime intact");
        return;
    }
    panic!("every kill landed while a write was in flight");
}

/// The journal is what puts the time back: a daemon restarted on another
/// state directory finds no record, and the file keeps the mtime of the
/// killed daemon's last write (and, looking freshly written, is not even
/// planned again).
#[test]
fn privileged_without_its_journal_a_crash_leaves_a_moved_mtime() {
    if !privileged("privileged_without_its_journal_a_crash_leaves_a_moved_mtime") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (d, file, before, _) = killed_mid_file(tmp.path());
    let other = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let cfg = config(other.path(), &d.path("index"), port, KILL_SETTINGS);
    let daemon = Daemon::start(other.path(), &cfg, port);
    let (code, out, err) = daemon.ctl(&["now", "--force", "--wait"]);
    assert_eq!(code, 0, "{out}{err}");
    drop(daemon);
    let after = fingerprint(&file);
    assert_eq!(after.hash, before.hash, "contents are intact either way");
    assert_ne!(
        after.mtime, before.mtime,
        "without the journal the mtime stays moved"
    );
}

#[test]
fn privileged_daemon_survives_hostile_requests_and_broken_reloads() {
    if !privileged("privileged_daemon_survives_hostile_requests_and_broken_reloads") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let tree = fs.path("tree");
    let files = stale_files(&tree, 2, 1, 31);
    let before: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, "sample_interval = \"1h\"\n");
    let daemon = Daemon::start(tmp.path(), &cfg, port);

    // Garbage, a huge line, unknown verbs, paths outside, `..`, NUL.
    use std::os::unix::net::UnixStream;
    let mut s = UnixStream::connect(daemon.socket()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut r = std::io::BufReader::new(s.try_clone().unwrap());
    let outside = r#"{"v":1,"verb":"now","path":"/etc","force":true}"#.to_string();
    let dotdot = format!(
        r#"{{"v":1,"verb":"now","path":"{}/../../etc","force":true}}"#,
        tree.display()
    );
    let nul = format!(
        r#"{{"v":1,"verb":"now","path":"{}/\u0000x","force":true}}"#,
        tree.display()
    );
    for (line, says) in [
        ("\u{1}\u{2}garbage".to_string(), "not JSON"),
        (
            r#"{"v":1,"verb":"format_disk"}"#.to_string(),
            "unknown variant",
        ),
        (r#"{"v":9,"verb":"status"}"#.to_string(), "version 9"),
        (r#"[1,2,3]"#.to_string(), "not a JSON object"),
        (outside, "not under a configured path"),
        (dotdot, "'..'"),
        (nul, "NUL"),
        (
            r#"{"v":1,"verb":"pause","drive":"sdz"}"#.to_string(),
            "no such drive",
        ),
    ] {
        writeln!(s, "{line}").unwrap();
        let mut resp = String::new();
        std::io::BufRead::read_line(&mut r, &mut resp).unwrap();
        let v: Value = serde_json::from_str(&resp).unwrap();
        assert_eq!(v["ok"], false, "{line}: {resp}");
        assert!(
            v["error"].as_str().unwrap().contains(says),
            "{line}: {resp}"
        );
    }
    // The daemon answers and closes once the line is over its limit: the
    // rest of this write may meet a closed socket (EPIPE), by design.
    let sent = s
        .write_all(&vec![b'x'; 200_000])
        .and_then(|()| s.write_all(b"\n"));
    if let Err(e) = sent {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    let mut resp = String::new();
    std::io::BufRead::read_line(&mut r, &mut resp).unwrap();
    assert!(resp.contains("too long"), "{resp}");
    // Still serving.
    assert_eq!(daemon.ctl(&["status"]).0, 0);

    // One instance per state dir.
    let out = refreshd()
        .args(["run", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another refreshd is running"), "{err}");
    assert_eq!(daemon.ctl(&["status"]).0, 0, "the first one is unharmed");

    // A broken config on SIGHUP: rejected with its line, old one kept.
    let good = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        good.replace("sample_bytes = \"32MiB\"", "sample_bytes = \"lots\""),
    )
    .unwrap();
    let out = refreshd()
        .args(["check-config", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = good
        .lines()
        .position(|l| l.starts_with("sample_bytes"))
        .unwrap()
        + 1;
    assert!(err.contains(&format!("refreshd.toml:{line}:")), "{err}");
    signal(&daemon, nix::sys::signal::Signal::SIGHUP);
    daemon.wait_for("the rejection in the log", 10, |dm| {
        dm.log().contains("still running on the previous one")
    });
    assert!(
        daemon.log().contains(&format!("refreshd.toml:{line}:")),
        "{}",
        daemon.log()
    );
    assert_eq!(daemon.ctl(&["status"]).0, 0, "still running");
    // A good reload is taken.
    std::fs::write(&cfg, &good).unwrap();
    signal(&daemon, nix::sys::signal::Signal::SIGHUP);
    daemon.wait_for("the reload", 10, |dm| {
        dm.log().contains("configuration reloaded")
    });

    // SIGTERM: exits within 5 s, socket removed.
    let mut daemon = daemon;
    let t = Instant::now();
    signal(&daemon, nix::sys::signal::Signal::SIGTERM);
    let status = daemon.child.wait().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    assert!(status.success(), "{status:?}\n{}", daemon.log());
    assert!(!daemon.socket().exists());
    let (code, _, err) = daemon.ctl(&["status"]);
    assert_eq!(code, 1);
    assert!(err.contains("not running"), "{err}");
    // Nothing was touched by any of it.
    let now: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    assert_eq!(before, now);
}

#[test]
fn privileged_daemon_tells_systemd_when_ready() {
    if !privileged("privileged_daemon_tells_systemd_when_ready") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let tree = fs.path("tree");
    stale_files(&tree, 1, 1, 51);
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    // Stand in for systemd: a datagram socket in NOTIFY_SOCKET.
    let sock_path = tmp.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, "sample_interval = \"1h\"\n");
    let mut child = refreshd()
        .args(["run", "--config"])
        .arg(&cfg)
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "1000000")
        .env_remove("WATCHDOG_PID")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    let t = Instant::now();
    while !(seen.contains("READY=1") && seen.contains("WATCHDOG=1"))
        && t.elapsed() < Duration::from_secs(20)
    {
        if let Ok(n) = sock.recv(&mut buf) {
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            seen.push('\n');
        }
    }
    // READY only once the control socket and /metrics answer.
    let ready_at_once = UnixStreamProbe::ok(&tmp.path().join("run/control.sock"));
    let metrics = http_get(port, "/metrics");
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen.contains("READY=1"), "{seen}");
    assert!(seen.contains("WATCHDOG=1"), "{seen}");
    assert!(
        seen.contains("STATUS=")
            && seen.contains(Path::new(&fs.dev).file_name().unwrap().to_str().unwrap()),
        "{seen}"
    );
    assert!(ready_at_once);
    assert!(metrics.contains("refreshd_build_info"));
}

struct UnixStreamProbe;
impl UnixStreamProbe {
    fn ok(p: &Path) -> bool {
        std::os::unix::net::UnixStream::connect(p).is_ok()
    }
}

#[test]
fn privileged_prometheus_scrapes_the_daemon() {
    if !privileged("privileged_prometheus_scrapes_the_daemon") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let tree = fs.path("tree");
    stale_files(&tree, 2, 4, 41);
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, "sample_interval = \"1s\"\n");
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    let dev = Path::new(&fs.dev)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    daemon.wait_for("a sample", 30, |dm| {
        dm.metrics().contains("refreshd_drive_state{")
    });

    let prom_port = free_port();
    let prom_cfg = tmp.path().join("prometheus.yml");
    std::fs::write(
        &prom_cfg,
        format!("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: refreshd\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"),
    )
    .unwrap();
    let prom = Command::new("prometheus")
        .arg(format!("--config.file={}", prom_cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            tmp.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let mut prom = match prom {
        Ok(p) => p,
        Err(e) => panic!("the prometheus binary (Debian package `prometheus`) is needed: {e}"),
    };
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _k = Kill(&mut prom);
    let query = format!("/api/v1/query?query=refreshd_drive_state%7Bdevice%3D%22{dev}%22%7D");
    let t = Instant::now();
    loop {
        let body = std::panic::catch_unwind(|| http_get(prom_port, &query)).unwrap_or_default();
        if body.contains("\"status\":\"success\"")
            && body.contains(&format!("\"device\":\"{dev}\""))
        {
            assert!(body.contains("\"state\":\"healthy\""), "{body}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "prometheus never saw the drive: {body}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let up = http_get(
        prom_port,
        "/api/v1/query?query=up%7Bjob%3D%22refreshd%22%7D",
    );
    assert!(up.contains("\"value\":[") && up.contains(",\"1\"]"), "{up}");
}

#[test]
fn privileged_control_requests_are_authorised_by_peer_credentials() {
    if !privileged("privileged_control_requests_are_authorised_by_peer_credentials") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let tree = fs.path("tree");
    stale_files(&tree, 1, 1, 61);
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    // Let others reach the socket's directory; the socket's mode decides.
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let port = free_port();
    let as_nobody = |d: &Daemon, args: &[&str]| {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(crate::helpers::refreshctl())
            .arg("--socket")
            .arg(d.socket())
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    // Default: socket 0600, root only.
    let cfg = config(tmp.path(), &tree, port, "sample_interval = \"1h\"\n");
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    let mode = std::fs::metadata(daemon.socket()).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    let (code, _, err) = as_nobody(&daemon, &["status"]);
    assert_eq!(code, 1);
    assert!(err.contains("permission denied"), "{err}");
    drop(daemon);

    // control_group: its members may read, not act.
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("control_group = \"nogroup\"\n{text}")).unwrap();
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    let (code, out, err) = as_nobody(&daemon, &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("DEVICE"), "{out}");
    for verb in [&["now", "--force"][..], &["pause"][..], &["resume"][..]] {
        let (code, _, err) = as_nobody(&daemon, verb);
        assert_eq!(code, 1, "{verb:?}");
        assert!(
            err.contains("permission denied") && err.contains("needs root"),
            "{verb:?}: {err}"
        );
    }
    assert_eq!(daemon.status()["paused"], false, "nothing changed");
    let m = daemon.metrics();
    assert!(
        m.contains("refreshd_control_requests_total{verb=\"now\",result=\"denied\"} 1"),
        "{m}"
    );
}
