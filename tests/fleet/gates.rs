//! What holds a fleet refresh back: the health gate, a drive waiting for
//! its host, pause and the window; three degraded drives take turns.

use super::*;

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
    // A file under way, not only the round: the gate is asked before the
    // first file too, and a "no" there rightly refreshes nothing (CI once
    // removed the flag between the round's start and its first file).
    d.wait_for("the first file under way", 30, |d| bytes_done(d) > 0);
    // Not green any more mid-file: the file finishes, the next one waits,
    // and the slot is given back.
    std::fs::remove_file(&flag).unwrap();
    let at_no = bytes_done(&d);
    d.wait_for("the round to stop between files", 30, |d| !in_progress(d));
    let done = refreshed(&d);
    assert!(
        done > 0 && done % (16 << 20) == 0,
        "whole files only: {done}"
    );
    // (at_no, read after the flag went, is at or past where the round
    // was then: the file under way then and none after it.)
    let file = 16u64 << 20;
    assert!(
        done <= (at_no / file + 1) * file,
        "stopped after the file under way ({at_no} bytes done then): {done}"
    );
    // Unless the last file was under way already, the gate stopped it.
    assert!(
        done == 48 << 20
            || d.log()
                .contains("the refresh stops here and gives its slot back"),
        "stopped between files by the gate:\n{}",
        d.log()
    );
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
