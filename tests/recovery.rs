//! Crash recovery of the one-shot: a `refreshd refresh` killed with -9 in
//! the middle of a file leaves a journal record; the next run (one-shot or
//! daemon) puts back the mtime only if nothing but refreshd's own writes
//! moved it. A writer after the kill keeps its mtime; without the journal
//! (another state directory) the moved mtime stays.

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::helpers::*;

const MIB: usize = 1 << 20;
const OLD: (i64, i64) = (1_500_000_000, 777);

fn mtime(path: &Path) -> (i64, i64) {
    let m = std::fs::metadata(path).unwrap();
    (m.mtime(), m.mtime_nsec())
}

/// The one record in `state/journal`, if any.
fn record(state: &Path) -> Option<refreshd::engine::safety::journal::Entry> {
    let entries: Vec<PathBuf> = journal_records(state);
    assert!(entries.len() <= 1, "{entries:?}");
    refreshd::engine::safety::journal::read_record(entries.first()?).ok()
}

fn slow_oneshot(state: &Path, file: &Path) -> Child {
    refreshd()
        .args([
            "refresh",
            "--no-progress",
            "--rate",
            "2MiB/s",
            "--state-dir",
        ])
        .arg(state)
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Kills a slow one-shot in the middle of `file`; returns whether the
/// file's (mtime, ctime) are exactly what its journal record says the
/// one-shot's own writes left (no write was in flight at the kill).
fn kill_mid_file(state: &Path, file: &Path) -> bool {
    let mut child = slow_oneshot(state, file);
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // A write io_uring had punted to its workers may still land (and move
    // the times) as the dead process's ring is torn down: judge after.
    std::thread::sleep(Duration::from_millis(500));
    let r = record(state).expect("a journal record after the kill");
    assert_eq!(
        r.taken.mtime,
        refreshd::clock::Timestamp::new(OLD.0, OLD.1 as u32)
    );
    assert_ne!(mtime(file), OLD, "the kill left the mtime moved");
    record_vouches(state, file)
}

/// A small file, and a run on it (any run recovers the whole journal).
fn other_run(fs: &LoopFs, state: &Path) {
    let other = fs.path("other");
    if !other.exists() {
        write_file(&other, &pattern(MIB, 9));
    }
    run(refreshd()
        .args(["refresh", "--no-progress", "--state-dir"])
        .arg(state)
        .arg(&other));
}

fn setup(fs: &LoopFs, name: &str) -> (PathBuf, Vec<u8>) {
    let f = fs.path(name);
    let data = pattern(16 * MIB, 71);
    write_file(&f, &data);
    set_mtime(&f, OLD.0, OLD.1);
    fs.sync();
    (f, data)
}

#[test]
fn privileged_oneshot_killed_mid_file_is_put_back_by_the_next_run() {
    if !privileged("privileged_oneshot_killed_mid_file_is_put_back_by_the_next_run") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let state = fs.dir.path().join("state");
    let (mut restored, mut left) = (0, 0);
    // A kill that lands while a write is in flight cannot be told from
    // someone else's change: then the mtime must stay moved. Repeat until
    // the kill has landed between writes (the usual case) at least once.
    for round in 0..8 {
        let (f, data) = setup(&fs, &format!("f{round}"));
        let exact = kill_mid_file(&state, &f);
        let moved = mtime(&f);
        other_run(&fs, &state);
        assert!(record(&state).is_none(), "the record is settled");
        assert!(std::fs::read(&f).unwrap() == data, "content");
        if exact {
            assert_eq!(
                mtime(&f),
                OLD,
                "round {round}: refreshd's own move put back"
            );
            restored += 1;
            break;
        }
        assert_eq!(mtime(&f), moved, "round {round}: not provably ours: left");
        left += 1;
    }
    eprintln!("restored after {left} round(s) where a write was in flight at the kill");
    assert_eq!(
        restored, 1,
        "never killed between two writes in {left} rounds"
    );
}

#[test]
fn privileged_oneshot_killed_then_a_writer_keeps_its_mtime() {
    if !privileged("privileged_oneshot_killed_then_a_writer_keeps_its_mtime") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let state = fs.dir.path().join("state");
    let (f, mut data) = setup(&fs, "f");
    kill_mid_file(&state, &f);
    // Another process writes a record after the kill.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .write_all_at(b"written after the kill", 4096)
        .unwrap();
    data[4096..4096 + 22].copy_from_slice(b"written after the kill");
    let theirs = mtime(&f);
    other_run(&fs, &state);
    assert_eq!(mtime(&f), theirs, "the writer's mtime stays");
    assert!(std::fs::read(&f).unwrap() == data);
    assert!(record(&state).is_none());
}

#[test]
fn privileged_without_its_journal_a_killed_oneshot_leaves_the_mtime_moved() {
    if !privileged("privileged_without_its_journal_a_killed_oneshot_leaves_the_mtime_moved") {
        return;
    }
    // The journal switched off: the next run looks at another state
    // directory and finds nothing to put back.
    let fs = LoopFs::new("ext4", 256);
    let state = fs.dir.path().join("state");
    let elsewhere = fs.dir.path().join("elsewhere");
    let (f, _) = setup(&fs, "f");
    kill_mid_file(&state, &f);
    let moved = mtime(&f);
    other_run(&fs, &elsewhere);
    assert_eq!(mtime(&f), moved, "nothing put it back");
    assert!(
        record(&state).is_some(),
        "the record waits in its own journal"
    );
}

#[test]
fn privileged_oneshot_state_dir_must_be_usable() {
    if !privileged("privileged_oneshot_state_dir_must_be_usable") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let f = fs.path("f");
    write_file(&f, &pattern(MIB, 3));
    set_mtime(&f, OLD.0, OLD.1);
    let not_a_dir = fs.path("plain");
    write_file(&not_a_dir, b"x");
    let out = refreshd()
        .args(["refresh", "--state-dir"])
        .arg(&not_a_dir)
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--state-dir") && err.contains("plain"),
        "{err}"
    );
    assert_eq!(mtime(&f), OLD, "nothing touched");
}

/// Two one-shots share the state directory (as a one-shot shares the
/// daemon's): the second one's recovery leaves the first one's live record
/// and file alone (before, it took a lease on the file, which broke the
/// first one's, and could put an old mtime on a file still being written).
#[test]
fn privileged_a_second_run_leaves_a_running_ones_file_alone() {
    if !privileged("privileged_a_second_run_leaves_a_running_ones_file_alone") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let state = fs.dir.path().join("state");
    let (f, data) = setup(&fs, "f");
    // 16 MiB at 4 MiB/s: 4 s.
    let first = refreshd()
        .args(["refresh", "--json", "--rate", "4MiB/s", "--state-dir"])
        .arg(&state)
        .arg(&f)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(record(&state).is_some(), "the first run's record is live");
    other_run(&fs, &state);
    assert!(record(&state).is_some(), "…and still there");
    let out = first.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.lines()
            .next()
            .unwrap()
            .contains("\"status\":\"refreshed\""),
        "the first run was not disturbed: {text}"
    );
    assert_eq!(std::fs::read(&f).unwrap(), data);
    assert_eq!(mtime(&f), OLD, "the first run put its mtime back itself");
    assert!(record(&state).is_none(), "and finished its record");
}
