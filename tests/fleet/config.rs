//! Fleet configuration: bad input is refused or shown (never a refresh
//! without a slot), groups must agree on `max_concurrent`, TLS with
//! client certificates.

use super::*;

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
    let (code, out) = check_config_said(&m.cfg);
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
        let (code, out) = check_config_said(&cfg);
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
    let (code, out) = check_config_said(&cfg);
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
    let (code, out) = check_config_said(&with(&etcd.endpoint(), &auth));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("refreshd.toml:") && out.contains("authentication failed"),
        "{out}"
    );
    std::fs::write(&pw, "right\n").unwrap();
    let (code, out) = check_config_said(&with(&etcd.endpoint(), &auth));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("fleet: group shard-7"), "{out}");
    // Unreachable etcd: check-config says so.
    let nowhere = closed_endpoint();
    let (code, out) = check_config_said(&with(&nowhere, ""));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("etcd ({nowhere})")), "{out}");
    // An empty group and no slots: refused with positions.
    let bad = m.tmp.path().join("bad.toml");
    let text = std::fs::read_to_string(with(&etcd.endpoint(), ""))
        .unwrap()
        .replace("group = \"shard-7\"", "group = \"\"")
        .replace("max_concurrent = 1", "max_concurrent = 0");
    std::fs::write(&bad, text).unwrap();
    let (code, out) = check_config_said(&bad);
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
