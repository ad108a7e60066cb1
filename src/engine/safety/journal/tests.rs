//! The journal: the decision table, torn records, and recovery on real
//! files (restored only when nothing but refreshd's own write moved it).
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::FileExt;
use std::time::Duration;

use std::fs::File;
use std::path::{Path, PathBuf};

use rustix::fs::AtFlags;
use xxhash_rust::xxh3::xxh3_64;

use super::record::*;
use super::*;
use crate::clock::Timestamp;
use crate::io::fsid::FsId;
use std::os::fd::AsFd;

const FS: FsId = FsId::Uuid {
    uuid: [5; 16],
    subvol: 0,
};

fn t(s: i64) -> Timestamp {
    Timestamp::new(s, 0)
}

fn obs(mtime: i64, ctime: i64) -> Observed {
    Observed {
        fs: FS,
        dev: 1,
        ino: 2,
        btime: Some(t(3)),
        generation: Some(4),
        atime: t(5),
        mtime: t(mtime),
        ctime: t(ctime),
    }
}

fn entry() -> Entry {
    Entry {
        version: VERSION,
        path: "/srv/a".into(),
        taken: obs(100, 100),
        left_mtime: t(200),
        left_ctime: t(200),
        lease_broken: false,
        changed_by_another: false,
        reads_moved_atime: false,
    }
}

#[test]
fn the_same_file_after_a_reboot_on_another_device_number_is_recovered() {
    // Identity is the filesystem's UUID: a new st_dev does not matter.
    let e = entry();
    let after_reboot = Observed {
        dev: 99,
        ..obs(200, 200)
    };
    assert_eq!(decide(&e, &after_reboot), Verdict::Restore);
    let other_fs = Observed {
        fs: FsId::Uuid {
            uuid: [6; 16],
            subvol: 0,
        },
        ..obs(200, 200)
    };
    assert!(matches!(decide(&e, &other_fs), Verdict::Leave(_)));
}

#[test]
fn version_1_records_are_read_and_matched_by_device_number() {
    let v1 = r#"{"version":1,"path":"/srv/a","taken":{"dev":1,"ino":2,"btime_ns":3000000000,"generation":4,"atime_ns":5000000000,"mtime_ns":100000000000,"ctime_ns":100000000000},"left_mtime_ns":200000000000,"left_ctime_ns":200000000000,"lease_broken":false}"#;
    let rec = format!("{v1}\n{:016x}\n", xxh3_64(v1.as_bytes()));
    let e = decode(rec.as_bytes()).unwrap();
    assert_eq!(e.taken.fs, FsId::Dev(1));
    assert_eq!(e.left_mtime, t(200));
    assert_eq!(
        decide(&e, &obs(200, 200)),
        Verdict::Restore,
        "same boot: dev 1"
    );
    let rebooted = Observed {
        dev: 7,
        ..obs(200, 200)
    };
    assert!(matches!(decide(&e, &rebooted), Verdict::Leave(_)));
}

#[test]
fn any_date_statx_can_return_round_trips() {
    // 2300-01-01 overflowed i64 nanoseconds: the record held 1715 and
    // recovery set the mtime to 1901-12-13.
    for (sec, nsec) in [(10_413_792_000, 1), (-2_208_988_800, 999_999_999), (0, 0)] {
        let mut e = entry();
        e.taken.mtime = Timestamp::new(sec, nsec);
        e.left_mtime = Timestamp::new(sec + 1, nsec);
        let back = decode(&encode(&e)).unwrap();
        assert_eq!(back, e);
    }
}

#[test]
fn restores_only_what_refreshd_left_exactly() {
    let e = entry();
    assert_eq!(decide(&e, &obs(200, 200)), Verdict::Restore);
    assert!(
        matches!(decide(&e, &obs(300, 300)), Verdict::Leave(_)),
        "written since"
    );
    assert!(
        matches!(decide(&e, &obs(200, 300)), Verdict::Leave(_)),
        "chmod since"
    );
    assert!(
        matches!(decide(&e, &obs(100, 300)), Verdict::Leave(_)),
        "already back"
    );
    let mut broken = entry();
    broken.lease_broken = true;
    assert!(matches!(decide(&broken, &obs(200, 200)), Verdict::Leave(_)));
    for other in [
        Observed {
            ino: 9,
            ..obs(200, 200)
        },
        Observed {
            btime: Some(t(8)),
            ..obs(200, 200)
        },
        Observed {
            generation: Some(7),
            ..obs(200, 200)
        },
    ] {
        assert!(matches!(decide(&e, &other), Verdict::Leave(_)), "{other:?}");
    }
}

#[test]
fn torn_or_corrupt_records_are_rejected() {
    let e = entry();
    let bytes = encode(&e);
    assert_eq!(decode(&bytes).unwrap(), e);
    let mut flipped = bytes.clone();
    flipped[10] ^= 1;
    assert!(decode(&flipped).is_err());
    assert!(decode(&bytes[..bytes.len() / 2]).is_err());
    // A shorter record written over a longer one leaves a tail: ignored.
    let mut longer = encode(&Entry {
        path: "/srv/a-much-longer-name".into(),
        ..e.clone()
    });
    longer[..bytes.len()].copy_from_slice(&bytes);
    assert_eq!(decode(&longer).unwrap(), e);
}

/// A file in a temp dir, a journal beside it, and a record taken now (as
/// the engine does under its lease), then one write of "ours".
fn setup() -> (tempfile::TempDir, Journal, PathBuf, Record) {
    setup_with(|_| ())
}

/// [`setup`], with `meanwhile` run right before our write.
fn setup_with(meanwhile: impl FnOnce(&Path)) -> (tempfile::TempDir, Journal, PathBuf, Record) {
    setup_recorded(false, meanwhile)
}

/// [`setup_with`], the record saying whether the run's reads could move
/// the atime (it read without `O_NOATIME`).
fn setup_recorded(
    reads_moved_atime: bool,
    meanwhile: impl FnOnce(&Path),
) -> (tempfile::TempDir, Journal, PathBuf, Record) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("f");
    std::fs::write(&path, vec![7u8; 8192]).unwrap();
    let old = rustix::fs::Timespec {
        tv_sec: 1_500_000_000,
        tv_nsec: 123,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        &path,
        &rustix::fs::Timestamps {
            last_access: old,
            last_modification: old,
        },
        AtFlags::empty(),
    )
    .unwrap();
    let j = Journal::open(&tmp.path().join("state")).unwrap();
    let f = File::options().read(true).write(true).open(&path).unwrap();
    let taken = observe(f.as_fd()).unwrap();
    let mut rec = j
        .begin(Entry {
            version: VERSION,
            path: path.clone(),
            taken,
            left_mtime: taken.mtime,
            left_ctime: taken.ctime,
            lease_broken: false,
            changed_by_another: false,
            reads_moved_atime,
        })
        .unwrap();
    meanwhile(&path);
    f.write_all_at(&[7u8; 4096], 0).unwrap();
    let now = observe(f.as_fd()).unwrap();
    rec.observe(now.mtime, now.ctime).unwrap();
    (tmp, j, path, rec)
}

/// The next run after a kill: the old owner is gone (its lock released,
/// its records left), a new process opens the journal.
fn next_run(j: Journal) -> Journal {
    let state = j.root.parent().unwrap().to_path_buf();
    drop(j);
    Journal::open(&state).unwrap()
}

/// Another process writes to the file; returns the mtime it left.
fn another_process_writes(path: &Path) -> (i64, i64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .write_all_at(b"theirs", 100)
        .unwrap();
    mtime(path)
}

fn mtime(path: &Path) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).unwrap();
    (m.mtime(), m.mtime_nsec())
}

#[test]
fn a_killed_refresh_is_put_back() {
    let (_tmp, j, path, rec) = setup();
    std::mem::forget(rec); // killed: the record stays
    let j = next_run(j);
    let r = recover(&j).unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].outcome, RecoveryOutcome::Restored);
    assert_eq!(mtime(&path), (1_500_000_000, 123));
    assert!(j.entries().unwrap().is_empty(), "record dropped");
}

/// Another process's `touch -a` while our write was in flight (the write
/// then covered the ctime it moved): the mtime goes back, their atime
/// stays (refreshd's reads, `O_NOATIME`, cannot have moved it). With the
/// recorded atime put back whatever the descriptor (the guard off),
/// theirs is lost.
#[test]
fn an_atime_set_before_the_kill_is_kept() {
    use std::os::unix::fs::MetadataExt;
    for guard_off in [false, true] {
        let (_tmp, j, path, rec) = setup_with(|p| {
            crate::engine::test_hooks::set_times(p, (1_333, 3), (0, rustix::fs::UTIME_OMIT));
        });
        std::mem::forget(rec);
        let j = next_run(j);
        test_switch::set_put_back_atime(guard_off);
        let r = recover(&j);
        test_switch::set_put_back_atime(false);
        assert_eq!(r.unwrap()[0].outcome, RecoveryOutcome::Restored);
        assert_eq!(mtime(&path), (1_500_000_000, 123));
        let m = std::fs::metadata(&path).unwrap();
        // The atime recorded when refreshd took the file.
        let want = if guard_off {
            (1_500_000_000, 123)
        } else {
            (1_333, 3)
        };
        assert_eq!((m.atime(), m.atime_nsec()), want, "guard off: {guard_off}");
    }
}

/// A run without `O_NOATIME` (not the owner, no `CAP_FOWNER`) whose
/// reads moved the atime, killed, and recovered by a run whose own
/// descriptor holds `O_NOATIME`: the record says the atime may be the
/// killed run's, and the taken one goes back. A record without that word
/// (as before the field) leaves the atime the killed run's reads set.
#[test]
fn an_atime_the_killed_runs_reads_moved_goes_back() {
    use std::os::unix::fs::MetadataExt;
    for recorded in [true, false] {
        // The killed run's read moved the atime (set here as a read
        // would; our write after it covers the ctime the setting moved).
        let (_tmp, j, path, rec) = setup_recorded(recorded, |p| {
            crate::engine::test_hooks::set_times(p, (1_777, 7), (0, rustix::fs::UTIME_OMIT));
        });
        std::mem::forget(rec);
        let j = next_run(j);
        let r = recover(&j).unwrap();
        assert_eq!(r[0].outcome, RecoveryOutcome::Restored);
        assert_eq!(mtime(&path), (1_500_000_000, 123));
        let m = std::fs::metadata(&path).unwrap();
        let want = if recorded {
            (1_500_000_000, 123)
        } else {
            (1_777, 7)
        };
        assert_eq!((m.atime(), m.atime_nsec()), want, "recorded: {recorded}");
    }
}

/// The killed run's reads could move the atime (recorded), but another
/// process read the file after the kill (no lease held it off; under
/// `relatime` the first read after refreshd's write moves the atime, not
/// the ctime): its atime is kept, not replaced by the one refreshd took.
#[test]
fn a_read_after_the_kill_keeps_its_atime() {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let (_tmp, j, path, rec) = setup_recorded(true, |_| ());
    std::mem::forget(rec);
    std::thread::sleep(Duration::from_millis(20)); // past the write's tick
    let before = std::fs::metadata(&path).unwrap();
    std::fs::File::open(&path)
        .unwrap()
        .read_exact(&mut [0u8; 512])
        .unwrap();
    let read = std::fs::metadata(&path).unwrap();
    assert_ne!(
        (read.atime(), read.atime_nsec()),
        (before.atime(), before.atime_nsec()),
        "the read moved the atime (a mount with noatime cannot run this test)"
    );
    assert_eq!(
        (read.ctime(), read.ctime_nsec()),
        (before.ctime(), before.ctime_nsec()),
        "a read moves no ctime"
    );
    let j = next_run(j);
    let r = recover(&j).unwrap();
    assert_eq!(r[0].outcome, RecoveryOutcome::Restored);
    assert_eq!(mtime(&path), (1_500_000_000, 123));
    let m = std::fs::metadata(&path).unwrap();
    assert_eq!(
        (m.atime(), m.atime_nsec()),
        (read.atime(), read.atime_nsec()),
        "their read's atime"
    );
}

/// The field is optional: a record written before it reads as "reads
/// could not move the atime", and one with it round-trips.
#[test]
fn a_record_without_the_atime_word_reads_as_before() {
    let mut e = entry();
    e.reads_moved_atime = true;
    assert_eq!(decode(&encode(&e)).unwrap(), e);
    e.reads_moved_atime = false;
    let encoded = String::from_utf8(encode(&e)).unwrap();
    let json = encoded.lines().next().unwrap();
    let older = json.replace(",\"reads_moved_atime\":false", "");
    assert_ne!(older, json, "the field was in the record");
    let rec = format!("{older}\n{:016x}\n", xxh3_64(older.as_bytes()));
    assert_eq!(decode(rec.as_bytes()).unwrap(), e);
}

#[test]
fn a_write_by_someone_else_after_the_kill_is_kept() {
    let (_tmp, j, path, rec) = setup();
    drop(rec);
    std::thread::sleep(Duration::from_millis(20));
    let theirs = another_process_writes(&path);
    let j = next_run(j);
    let r = recover(&j).unwrap();
    assert!(matches!(r[0].outcome, RecoveryOutcome::Left(_)), "{r:?}");
    assert_eq!(mtime(&path), theirs, "the writer's mtime stays");
    assert!(j.entries().unwrap().is_empty());
}

#[test]
fn guard_off_restoring_without_the_exact_match_hides_a_writers_change() {
    let (_tmp, j, path, rec) = setup();
    drop(rec);
    std::thread::sleep(Duration::from_millis(20));
    let theirs = another_process_writes(&path);
    test_switch::set_restore_always(true);
    let j = next_run(j);
    let r = recover(&j).unwrap();
    test_switch::set_restore_always(false);
    assert_eq!(r[0].outcome, RecoveryOutcome::Restored);
    assert_ne!(
        mtime(&path),
        theirs,
        "the writer's mtime is gone: what the rule prevents"
    );
}

#[test]
fn a_chmod_by_someone_else_is_kept_too() {
    let (_tmp, j, path, rec) = setup();
    drop(rec);
    let before = mtime(&path);
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let j = next_run(j);
    let r = recover(&j).unwrap();
    assert!(matches!(r[0].outcome, RecoveryOutcome::Left(_)), "{r:?}");
    assert_eq!(mtime(&path), before);
}

#[test]
fn a_broken_lease_is_never_recovered() {
    let (_tmp, j, path, mut rec) = setup();
    rec.lease_broken().unwrap();
    let moved = mtime(&path);
    drop(rec);
    let j = next_run(j);
    let r = recover(&j).unwrap();
    assert!(matches!(r[0].outcome, RecoveryOutcome::Left(_)), "{r:?}");
    assert_eq!(mtime(&path), moved);
}

#[test]
fn a_replaced_file_is_left_alone() {
    let (tmp, j, path, rec) = setup();
    drop(rec);
    let other = tmp.path().join("other");
    std::fs::write(&other, b"new file").unwrap();
    std::fs::rename(&other, &path).unwrap();
    let before = mtime(&path);
    let j = next_run(j);
    let r = recover(&j).unwrap();
    assert!(matches!(r[0].outcome, RecoveryOutcome::Left(_)), "{r:?}");
    assert_eq!(mtime(&path), before);
}

#[test]
fn a_file_in_use_is_deferred_and_its_record_kept() {
    let (_tmp, j, path, rec) = setup();
    drop(rec);
    let holder = File::open(&path).unwrap();
    let j = next_run(j);
    let r = recover(&j).unwrap();
    assert!(
        matches!(r[0].outcome, RecoveryOutcome::Deferred(_)),
        "{r:?}"
    );
    assert_eq!(j.entries().unwrap().len(), 1, "kept for the next run");
    drop(holder);
    assert_eq!(recover(&j).unwrap()[0].outcome, RecoveryOutcome::Restored);
}

#[test]
fn a_finished_record_leaves_nothing() {
    let (_tmp, j, _path, rec) = setup();
    rec.finish().unwrap();
    assert!(j.entries().unwrap().is_empty());
    assert!(recover(&j).unwrap().is_empty());
}

#[test]
fn a_write_right_after_refreshds_last_write_is_still_seen() {
    // No pause: the other write lands within the same timer tick. Because
    // refreshd read the ctime after its write, the kernel's multigrain
    // timestamps give the next change a later ctime.
    for _ in 0..50 {
        let (_tmp, j, path, rec) = setup();
        drop(rec);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .write_all_at(b"theirs", 100)
            .unwrap();
        let theirs = mtime(&path);
        let j = next_run(j);
        let r = recover(&j).unwrap();
        assert!(matches!(r[0].outcome, RecoveryOutcome::Left(_)), "{r:?}");
        assert_eq!(mtime(&path), theirs);
    }
}

#[test]
fn a_running_refreshds_records_are_left_to_it() {
    // Process A is still rewriting (its journal open, its record live);
    // process B starts and recovers: A's record and file are untouched.
    let (_tmp, a, path, rec) = setup();
    let state = a.root.parent().unwrap().to_path_buf();
    let ours = mtime(&path);
    let b = Journal::open(&state).unwrap();
    assert!(recover(&b).unwrap().is_empty(), "nothing recovered");
    assert_eq!(mtime(&path), ours, "the live file's times untouched");
    assert_eq!(b.entries().unwrap().len(), 1, "A's record kept");
    // A finishes normally: nothing is left.
    rec.finish().unwrap();
    drop(a);
    assert!(b.entries().unwrap().is_empty());
    assert!(recover(&b).unwrap().is_empty());
}

#[test]
fn guard_off_recovering_a_running_refreshds_records_moves_its_files_times() {
    let (_tmp, a, path, rec) = setup();
    let state = a.root.parent().unwrap().to_path_buf();
    let ours = mtime(&path);
    let b = Journal::open(&state).unwrap();
    test_switch::set_ignore_owners(true);
    let r = recover(&b);
    test_switch::set_ignore_owners(false);
    assert_eq!(r.unwrap()[0].outcome, RecoveryOutcome::Restored);
    assert_ne!(
        mtime(&path),
        ours,
        "B put an old mtime on a file A is still rewriting"
    );
    drop(rec);
}

#[test]
fn a_clean_exit_leaves_no_owner_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(tmp.path()).unwrap();
    let dir = j.dir().to_path_buf();
    assert!(dir.join(".lock").exists());
    drop(j);
    assert!(!dir.exists());
    let left: Vec<_> = std::fs::read_dir(tmp.path().join("journal"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
