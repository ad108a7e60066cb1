//! End to end: the real `refreshd run` on testbed drives and loop
//! filesystems, driven through `refreshctl`, scraped over HTTP (and by a
//! real Prometheus), killed and restarted.

mod control;
mod crash;

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

/// A degraded drive whose stale files may not be rewritten (here all
/// immutable) gets rounds that rewrite nothing; status says so beside the
/// state, `degraded (nothing_left)`, instead of a bare `degraded` with no
/// progress, and nothing is written.
#[test]
fn privileged_a_degraded_drive_with_nothing_it_may_rewrite_says_so() {
    if !privileged("privileged_a_degraded_drive_with_nothing_it_may_rewrite_says_so") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = drive(tmp.path(), "840evo");
    let tree = d.path("index");
    let files = stale_files(&tree, 2, 16, 5);
    d.sync().unwrap();
    d.age(6.0);
    let _immutable: Vec<Chattr> = files.iter().map(|p| Chattr::set(p, "i")).collect();
    let before: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, "");
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    // Its rounds and samples alternate: the table is read until a read
    // lands between them.
    let mut text = String::new();
    daemon.wait_for("degraded (nothing_left) in the table", 90, |dm| {
        text = dm.ctl(&["status"]).1;
        text.contains("degraded (nothing_left)")
    });
    assert!(text.contains("the last round rewrote nothing"), "{text}");
    // And the round's counts, which say why.
    assert!(
        text.contains("last round (") && text.contains("2 skipped"),
        "{text}"
    );
    let dev = d.loop_dev.trim_start_matches("/dev/").to_string();
    let refreshed = format!("refreshd_refreshed_bytes_total{{device=\"{dev}\"}}");
    assert_eq!(metric(&daemon.metrics(), &refreshed).unwrap_or(0.0), 0.0);
    drop(daemon);
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
    // Five rounds, and the drive judged healthy: a round sampled while
    // other tests load the machine may read the stale files slower than
    // the canary for a moment (suspect, then verified); what must never
    // happen is a rewrite, checked below in bytes.
    daemon.wait_for("five sample rounds and a healthy drive", 60, |dm| {
        dm.log().matches("sampled").count() >= 5 && dm.status()["state"] == "healthy"
    });
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
    // Rounds counted once the daemon is gone: every canary it wrote is in
    // the log but the one a kill may have cut short (the +1 below).
    let log = std::fs::read_to_string(tmp.path().join("daemon.log")).unwrap();
    assert!(!log.contains("refresh starts"), "{log}");
    let rounds = log.matches("sampled").count() as u64;
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
    // A healthy drive (nothing happens by itself), a slow throttle.
    let sc = scene(
        "none",
        4,
        32,
        11,
        "rate = \"16MiB/s\"\nsample_interval = \"1h\"\n",
    );
    // Dropped before the scene (the drive, then its directory).
    let daemon = sc.daemon;
    let (files, before) = (sc.files.clone(), sc.before.clone());

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
