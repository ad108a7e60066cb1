//! Fleet sessions lost and kept: a killed holder's slot frees itself, an
//! etcd outage (closed or silent) stops the holder and nobody starts, an
//! expiring auth token does not lose the slot, one endpoint of two or a
//! cluster member may die, a clean stop frees the slot at once.

use super::*;

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
    // No byte before a checkpoint written twice.
    each_exactly_once_one_at_a_time(daemons, &members);
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
    let (code, out) = check_config_said(&m.cfg);
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
    each_exactly_once_one_at_a_time(daemons, &members);
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
