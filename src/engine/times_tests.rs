//! Times are put back only over refreshd's own change: another process's
//! `touch -m`, `touch -m -d`, `touch -a`, `utime` or `chmod` at each step of an
//! in-place refresh — after the last write, right before the times go
//! back, during the final fsync — is left as it made it, and the recovery
//! record never vouches for its times. With the check switched off, the
//! saved times are put over the other process's.
#![allow(clippy::unwrap_used)]

use crate::engine::test_hooks::set_times;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::engine::safety::journal::Journal;
use crate::engine::test_hooks::{self, Point};
use crate::engine::{Engine, EngineConfig, Outcome, Target, UnsafeSwitches};

const OLD: (i64, i64) = (1_500_000_000, 7);

fn mtime(p: &Path) -> (i64, i64) {
    let m = std::fs::metadata(p).unwrap();
    (m.mtime(), m.mtime_nsec())
}

#[derive(Debug, Clone, Copy)]
enum Change {
    TouchNow,
    TouchDate,
    Utime,
    Chmod,
    /// `touch -a -d`: the atime alone (no watch's event, ctime moves).
    TouchAtime,
}

impl Change {
    fn apply(self, p: &Path) {
        let omit = (0, rustix::fs::UTIME_OMIT);
        match self {
            Change::TouchNow => set_times(p, omit, (0, rustix::fs::UTIME_NOW)),
            Change::TouchDate => set_times(p, omit, (1_234_567_890, 1)),
            Change::Utime => set_times(p, (1_111, 0), (2_222, 0)),
            Change::TouchAtime => set_times(p, (1_333, 3), omit),
            Change::Chmod => {
                std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                    .unwrap()
            }
        }
    }
}

/// Refreshes a file with old times in place; `change` runs at `at`.
/// Returns the report, the file, its mtime after the change, and the
/// state dir (whose journal must be empty).
fn refresh(
    at: Point,
    change: Change,
    sw: UnsafeSwitches,
) -> (
    crate::engine::FileReport,
    PathBuf,
    Option<(i64, i64)>,
    tempfile::TempDir,
) {
    refresh_with(&[(at, change)], sw)
}

/// [`refresh`] with a change at each of several points.
fn refresh_with(
    changes: &[(Point, Change)],
    sw: UnsafeSwitches,
) -> (
    crate::engine::FileReport,
    PathBuf,
    Option<(i64, i64)>,
    tempfile::TempDir,
) {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let p = tmp.path().join("f");
    std::fs::write(&p, vec![9u8; 256 << 10]).unwrap();
    set_times(&p, OLD, OLD);
    let ino = std::fs::metadata(&p).unwrap().ino();
    let theirs = Arc::new(std::sync::Mutex::new(None));
    for &(at, change) in changes {
        let (p2, t2) = (p.clone(), theirs.clone());
        test_hooks::set(ino, at, move || {
            change.apply(&p2);
            *t2.lock().unwrap() = Some(mtime(&p2));
        });
    }
    let journal = Arc::new(Journal::open(&tmp.path().join("state")).unwrap());
    let engine = Engine::start(EngineConfig {
        journal: Some(journal.clone()),
        strategy: crate::engine::types::Strategy::Inplace,
        unsafe_switches: sw,
        ..EngineConfig::default()
    })
    .unwrap();
    let r = engine.refresh(Target::for_path(&p).unwrap(), None);
    test_hooks::clear(ino);
    assert!(
        journal.entries().unwrap().is_empty(),
        "the record is settled"
    );
    let t = *theirs.lock().unwrap();
    (r, p, t, tmp)
}

#[test]
fn another_processs_change_at_each_step_is_left_as_it_made_it() {
    for at in [Point::Written, Point::BeforeTimes] {
        for change in [
            Change::TouchNow,
            Change::TouchDate,
            Change::Utime,
            Change::Chmod,
            Change::TouchAtime,
        ] {
            let (r, p, theirs, _tmp) = refresh(at, change, UnsafeSwitches::default());
            assert_eq!(r.outcome, Outcome::Refreshed, "{at:?} {change:?}");
            assert!(
                r.times_left.is_some(),
                "{at:?} {change:?}: said so: {:?}",
                r.human_line()
            );
            assert_eq!(
                Some(mtime(&p)),
                theirs,
                "{at:?} {change:?}: left as it was made"
            );
            assert_ne!(mtime(&p), OLD, "{at:?} {change:?}");
            // (A `touch -a` after the last write moves the ctime: like
            // any change of another's, it keeps the file's times as they
            // are, refreshd's mtime included, its atime theirs.)
            if let Change::TouchAtime = change {
                assert_eq!(atime(&p), (1_333, 3), "{at:?}: their atime");
            }
        }
    }
}

#[test]
fn a_change_during_the_final_fsync_comes_after_ours_and_stays() {
    for change in [Change::TouchNow, Change::TouchDate, Change::Utime] {
        let (r, p, theirs, _tmp) = refresh(Point::BeforeFsync, change, UnsafeSwitches::default());
        assert_eq!(r.outcome, Outcome::Refreshed);
        assert_eq!(Some(mtime(&p)), theirs, "{change:?}");
    }
}

#[test]
fn nothing_else_happening_the_times_go_back() {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let p = tmp.path().join("f");
    std::fs::write(&p, vec![9u8; 256 << 10]).unwrap();
    set_times(&p, OLD, OLD);
    let engine = Engine::start(EngineConfig {
        strategy: crate::engine::types::Strategy::Inplace,
        ..EngineConfig::default()
    })
    .unwrap();
    let r = engine.refresh(Target::for_path(&p).unwrap(), None);
    assert_eq!(r.outcome, Outcome::Refreshed);
    assert_eq!(r.times_left, None);
    assert_eq!(mtime(&p), OLD);
}

#[test]
fn guard_off_the_saved_times_go_over_another_processs() {
    let sw = UnsafeSwitches {
        ignore_others_times: true,
        ..UnsafeSwitches::default()
    };
    let (r, p, theirs, _tmp) = refresh(Point::BeforeTimes, Change::TouchDate, sw);
    assert_eq!(r.outcome, Outcome::Refreshed);
    assert_eq!(mtime(&p), OLD, "refreshd's saved mtime over theirs");
    assert_ne!(Some(mtime(&p)), theirs);
}

fn atime(p: &Path) -> (i64, i64) {
    let m = std::fs::metadata(p).unwrap();
    (m.atime(), m.atime_nsec())
}

/// `touch -a` while a write of refreshd's is in flight: the write's time
/// covers the ctime it moved and no watch sees it (`IN_ACCESS` is not
/// watched). The mtime goes back; their atime stays, as refreshd's reads
/// (`O_NOATIME`) cannot have moved it. With the saved atime put back (the
/// guard off) theirs is lost.
#[test]
fn an_atime_set_while_a_write_is_in_flight_is_kept() {
    assert_atime_kept_unless_forced(&[(Point::Writing, Change::TouchAtime)], OLD);
}

/// Refreshes with `changes` (the last a `touch -a`), with the guard on
/// and off: on, the file ends with `mtime` and their atime; off
/// (`put_back_atime`), with the atime of the times put back: refreshd's
/// own, or the one captured with another's earlier change (in these
/// tests the same, as `touch -m` leaves the atime).
fn assert_atime_kept_unless_forced(changes: &[(Point, Change)], mtime_want: (i64, i64)) {
    for guard_off in [false, true] {
        let sw = UnsafeSwitches {
            put_back_atime: guard_off,
            ..UnsafeSwitches::default()
        };
        let (r, p, _, _tmp) = refresh_with(changes, sw);
        assert_eq!(r.outcome, Outcome::Refreshed);
        assert_eq!(mtime(&p), mtime_want, "guard off: {guard_off}");
        let want = if guard_off { OLD } else { (1_333, 3) };
        assert_eq!(atime(&p), want, "guard off: {guard_off}");
    }
}

/// Opened without `O_NOATIME` (refreshd's reads may have moved the atime)
/// the atime taken is put back; with it, the file's own is kept, unless
/// forced (the guard off).
#[test]
fn the_atime_goes_back_only_where_refreshds_reads_may_have_moved_it() {
    use crate::clock::Timestamp;
    use std::os::fd::AsFd;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let p = tmp.path().join("f");
    std::fs::write(&p, b"x").unwrap();
    set_times(&p, (1_333, 3), OLD);
    let taken = Timestamp::new(1_000, 0);
    for (flags, force, want) in [
        (libc::O_NOATIME, false, (1_333, 3)),
        (libc::O_NOATIME, true, (1_000, 0)),
        (0, false, (1_000, 0)),
    ] {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(&p)
            .unwrap();
        let t = crate::engine::safety::meta::times_to_put_back(f.as_fd(), taken, taken, force);
        let got = (t.last_access.tv_sec, t.last_access.tv_nsec as i64);
        assert_eq!(got, want, "flags {flags:#x}, forced {force}");
    }
}

/// Another's `touch -m -d` after the last write (seen: their times are
/// put back over refreshd's), then, once judged, their `touch -a`:
/// the atime put back is the one the file has, not the one captured with
/// their first change. With the captured one forced (the guard off),
/// their `touch -a` is lost.
#[test]
fn their_later_atime_survives_the_putting_back_of_their_times() {
    let changes = [
        (Point::Written, Change::TouchDate),
        (Point::Judged, Change::TouchAtime),
    ];
    assert_atime_kept_unless_forced(&changes, (1_234_567_890, 1));
}
