//! A daemon killed mid-file: it resumes from its checkpoint and puts the
//! times back; without its journal the moved mtime stays (the guard's
//! switch-off).

use super::*;

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
