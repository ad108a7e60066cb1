//! The daemon's front doors: hostile requests and broken reloads change
//! nothing, requests are authorised by the peer's credentials.

use super::*;

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
        captured(
            Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(crate::helpers::refreshctl())
                .arg("--socket")
                .arg(d.socket())
                .args(args)
                .output()
                .unwrap(),
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
    let (code, _, err) = check_config(&cfg);
    assert_eq!(code, 1, "{err}");
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
