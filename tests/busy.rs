//! A busy file never holds up the rest: files another process keeps
//! opening (every open breaks refreshd's lease) are first in the plan;
//! an interrupted one goes to the back of the round and is tried again
//! (one found open at a try has no lease to take: skipped, in use),
//! while every other file of the drive is refreshed in the same round. Regression: a
//! round stopped at its first interrupted file and the next waited 30 s,
//! even after `refreshctl now --force`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::daemon_harness::*;
use crate::helpers::*;

#[test]
fn privileged_busy_files_first_in_the_plan_do_not_hold_up_the_drive() {
    if !privileged("privileged_busy_files_first_in_the_plan_do_not_hold_up_the_drive") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let tree = fs.path("tree");
    let busy = stale_files(&tree.join("busy"), 2, 16, 11);
    let others = stale_files(&tree.join("others"), 4, 4, 13);
    // The busy ones are the oldest: first in the plan.
    for p in &busy {
        set_mtime(p, 1_600_000_000, 0);
    }
    fs.sync();
    let stop = Arc::new(AtomicBool::new(false));
    let opener = {
        let (busy, stop) = (busy.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for p in &busy {
                    drop(std::fs::File::open(p).unwrap());
                }
                std::thread::sleep(Duration::from_millis(30));
            }
        })
    };
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let cfg = config(
        tmp.path(),
        &tree,
        port,
        "rate = \"16MiB/s\"\nstrategy = \"inplace\"\nscan_interval = \"1h\"\nsample_interval = \"1h\"\n",
    );
    let d = Daemon::start(tmp.path(), &cfg, port);
    let t = Instant::now();
    let (code, out, err) = d.ctl(&["now", "--force", "--wait"]);
    let took = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    opener.join().unwrap();
    assert_eq!(code, 0, "interruptions are not failures: {out}{err}");
    let round = &d.status()["last_request_round"];
    assert_eq!(
        round["refreshed"].as_u64(),
        Some(4),
        "every other file: {round:#}\n{}",
        d.log()
    );
    // Each busy file ends interrupted (its tries spent), or skipped when
    // a try found it open already (no lease to take: "in use"), as one
    // did under `.ci/stress`, where the opener held it open longer.
    let (interrupted, skipped) = (
        round["interrupted"].as_u64().unwrap(),
        round["skipped"].as_u64().unwrap(),
    );
    assert_eq!(interrupted + skipped, 2, "the busy files: {round:#}");
    let log = d.log();
    let in_use: f64 = d
        .metrics()
        .lines()
        .filter(|l| l.contains("outcome=\"skipped\",reason=\"in_use\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(in_use as u64, skipped, "skipped only as in use:\n{log}");
    assert!(
        round["finished"].as_bool().unwrap(),
        "one round went through: {round:#}"
    );
    assert!(took < Duration::from_secs(25), "no 30 s pause: {took:?}");
    assert!(
        log.contains("again=true") || skipped == 2,
        "tried again in the round:\n{log}"
    );
    drop(d);
    for p in &others {
        assert!(std::fs::read(p).is_ok());
    }
}
