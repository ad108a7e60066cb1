//! Each rule on a real file: what refreshd's own writes do, and what
//! another process's `touch -m`, `touch -m -d`, `chmod` and `utime` do.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::engine::test_hooks::set_times;
use std::cell::{Cell, RefCell};
use std::os::unix::fs::FileExt;
use std::path::Path;

thread_local! {
    /// Run by `look` between its read of the times and its drain of the
    /// events (once).
    static BETWEEN: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
    /// The guard off: a change first seen by a look is captured with the
    /// times that look read before the drain (the code before d46a0c3).
    static FIRST_READ: Cell<bool> = const { Cell::new(false) };
}

pub(super) fn between_the_read_and_the_drain() {
    if let Some(f) = BETWEEN.with(|b| b.borrow_mut().take()) {
        f();
    }
}

pub(super) fn capture_from_the_first_read(w: &mut AttrWatch<'_>, st: &rustix::fs::Stat) {
    if FIRST_READ.get() {
        w.theirs = Some((
            Timestamp::from_stat(st.st_atime, st.st_atime_nsec),
            Timestamp::from_stat(st.st_mtime, st.st_mtime_nsec),
        ));
    }
}

fn times(file: BorrowedFd<'_>) -> io::Result<(Timestamp, Timestamp)> {
    let st = rustix::fs::fstat(file)?;
    Ok((
        Timestamp::from_stat(st.st_mtime, st.st_mtime_nsec),
        Timestamp::from_stat(st.st_ctime, st.st_ctime_nsec),
    ))
}

const OMIT: (i64, i64) = (0, rustix::fs::UTIME_OMIT);
const NOW: (i64, i64) = (0, rustix::fs::UTIME_NOW);

/// A file with old times, open for writing, and a watcher.
fn written(tmp: &Path) -> (std::path::PathBuf, std::fs::File, Watcher) {
    let p = tmp.join("f");
    std::fs::write(&p, vec![1u8; 8192]).unwrap();
    set_times(&p, (1_000, 0), (1_000, 0));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    (p, f, Watcher::new().unwrap())
}

fn our_write(w: &mut AttrWatch<'_>, f: &std::fs::File) {
    w.writing(f.as_fd());
    f.write_all_at(b"ours", 0).unwrap();
    assert!(matches!(w.look(f.as_fd()), Ok(Seen::Own(..))), "our write");
}

#[test]
fn refreshds_own_writes_are_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let (_p, f, watcher) = written(tmp.path());
    let mut w = watcher.watch(f.as_fd(), times(f.as_fd()).unwrap()).unwrap();
    for _ in 0..3 {
        our_write(&mut w, &f);
    }
    f.sync_all().unwrap();
    assert_eq!(w.may_restore(f.as_fd()), Ok(()));
}

#[test]
fn another_processs_time_or_attribute_change_is_seen() {
    type Change = fn(&Path);
    let cases: [(&str, Change); 4] = [
        ("touch -m (now)", |p| set_times(p, OMIT, NOW)),
        ("touch -m -d", |p| set_times(p, OMIT, (1_234, 5))),
        ("utime", |p| set_times(p, (7, 0), (8, 0))),
        ("chmod", |p| {
            std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap()
        }),
    ];
    for (what, change) in cases {
        for between_writes in [true, false] {
            let tmp = tempfile::tempdir().unwrap();
            let (p, f, watcher) = written(tmp.path());
            let mut w = watcher.watch(f.as_fd(), times(f.as_fd()).unwrap()).unwrap();
            our_write(&mut w, &f);
            change(&p);
            if between_writes {
                // Then another write of ours (its times over theirs).
                w.writing(f.as_fd());
                f.write_all_at(b"ours", 0).unwrap();
                assert_eq!(w.look(f.as_fd()).ok(), Some(Seen::Another), "{what}");
            }
            assert!(
                w.may_restore(f.as_fd()).is_err(),
                "{what}, between writes: {between_writes}"
            );
        }
    }
}

#[test]
fn another_processs_change_as_the_times_go_back_is_seen() {
    let tmp = tempfile::tempdir().unwrap();
    let (p, f, watcher) = written(tmp.path());
    let mut w = watcher.watch(f.as_fd(), times(f.as_fd()).unwrap()).unwrap();
    our_write(&mut w, &f);
    assert_eq!(w.may_restore(f.as_fd()), Ok(()));
    let old = rustix::fs::Timespec {
        tv_sec: 1_000,
        tv_nsec: 0,
    };
    let back = rustix::fs::Timestamps {
        last_access: old,
        last_modification: old,
    };
    rustix::fs::futimens(&f, &back).unwrap();
    assert!(!w.restored(), "ours alone");
    rustix::fs::futimens(&f, &back).unwrap();
    set_times(&p, OMIT, NOW);
    assert!(w.restored(), "their touch right after ours");
}

/// The kernel stores a write's ctime, then its mtime, and nothing keeps a
/// `stat` out in between: beside a writing thread about 1 stat in 8,000
/// sees ctime moved and mtime not yet (ext4, this machine). Such a look
/// comes right before each submission while refreshd's earlier writes run
/// on io_uring's workers; rule 3 judged it another process's change, and a
/// one-shot put a file's mtime of 2300 back as "now" (seen once in CI).
/// Checked here until the side look has seen 50 torn views.
#[test]
fn torn_times_of_our_own_writes_in_flight_are_not_anothers() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let (_p, f, watcher) = written(tmp.path());
    f.set_len(4 << 20).unwrap();
    let mut w = watcher.watch(f.as_fd(), times(f.as_fd()).unwrap()).unwrap();
    our_write(&mut w, &f);
    // As before each submission: from here on a write of ours is in flight.
    w.writing(f.as_fd());
    let stop = AtomicBool::new(false);
    let (mut looks, mut torn, mut anothers) = (0u64, 0u64, false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                f.write_all_at(b"ours", (i % 1024) * 4096).unwrap();
                i += 1;
            }
        });
        let started = std::time::Instant::now();
        while torn < 50 && !anothers && started.elapsed() < std::time::Duration::from_secs(60) {
            w.writing(f.as_fd());
            looks += 1;
            anothers = w.seen;
            let st = rustix::fs::fstat(&f).unwrap();
            torn += u64::from((st.st_mtime, st.st_mtime_nsec) != (st.st_ctime, st.st_ctime_nsec));
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(
        !anothers,
        "our own write taken for another's after {looks} looks"
    );
    if torn < 50 {
        // A kernel or a machine that seldom shows a half-done write: the
        // assertion above held on fewer chances than meant.
        eprintln!("NOTE: only {torn} torn views in {looks} looks in 60 s");
    }
    // The writes done, a look sees them as ours.
    assert!(matches!(w.look(f.as_fd()), Ok(Seen::Own(..))));
}

/// `touch -m -d` (an mtime alone raises IN_MODIFY, not IN_ATTRIB) while a
/// write of ours is in flight: the times it leaves (mtime ≠ ctime, an
/// mtime no write of ours could have left) are another's, though rule 2
/// cannot tell its event from the write's.
#[test]
fn a_dated_mtime_while_our_write_is_in_flight_is_anothers() {
    let tmp = tempfile::tempdir().unwrap();
    let (p, f, watcher) = written(tmp.path());
    let mut w = watcher.watch(f.as_fd(), times(f.as_fd()).unwrap()).unwrap();
    our_write(&mut w, &f);
    w.writing(f.as_fd());
    f.write_all_at(b"ours", 0).unwrap(); // in flight: not looked at yet
    set_times(&p, OMIT, (1_234, 5));
    w.writing(f.as_fd());
    f.write_all_at(b"ours", 4096).unwrap();
    assert_eq!(w.look(f.as_fd()).ok(), Some(Seen::Another));
    assert!(w.may_restore(f.as_fd()).is_err());
    assert_eq!(w.theirs().map(|t| t.1), Some(Timestamp::new(1_234, 5)));
}

/// Another process moves the times between the stat refreshd took the
/// file with and the watch: the watch starts from those times, not from
/// the file's now, and before refreshd's first write any move of the times
/// is another's. Both kinds: a dated `touch -m -d` (mtime ≠ ctime), and a
/// `touch -m` without a date (mtime = ctime = now).
#[test]
fn times_moved_before_the_watch_started_are_anothers() {
    for (kind, mtime) in [("touch -m -d", (1_234, 5)), ("touch -m", NOW)] {
        let tmp = tempfile::tempdir().unwrap();
        let (p, f, watcher) = written(tmp.path());
        let took = times(f.as_fd()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(10)); // a new ctime
        set_times(&p, OMIT, mtime);
        let mut w = watcher.watch(f.as_fd(), took).unwrap();
        w.writing(f.as_fd());
        f.write_all_at(b"ours", 0).unwrap();
        assert_eq!(w.look(f.as_fd()).ok(), Some(Seen::Another), "{kind}");
    }
}

/// Two writes of ours whose time updates run at once (io_uring's workers,
/// ext4's parallel direct writes) can leave the ctime of one and the mtime
/// of the other: mtime ≠ ctime with no write in flight (84 of 20,000 pairs
/// of concurrent O_DIRECT writes on ext4, this machine under load; XFS
/// locks its time update: 0). A look after them is still refreshd's own.
/// Checked until 5 such pairs were seen, at most 30 s.
#[test]
fn times_two_of_our_writes_left_crossed_are_ours() {
    let tmp = tempfile::tempdir().unwrap();
    let (p, f, watcher) = written(tmp.path());
    f.set_len(4 << 20).unwrap();
    let direct = std::os::unix::fs::OpenOptionsExt::custom_flags(
        std::fs::OpenOptions::new().write(true),
        libc::O_DIRECT,
    )
    .open(&p);
    let Ok(direct) = direct else {
        eprintln!("NOTE: no O_DIRECT in {}: not checked", tmp.path().display());
        return;
    };
    let mut w = watcher.watch(f.as_fd(), times(f.as_fd()).unwrap()).unwrap();
    our_write(&mut w, &f);
    let (mut crossed, mut pairs) = (0, 0u64);
    let started = std::time::Instant::now();
    while crossed < 5 && started.elapsed() < std::time::Duration::from_secs(30) {
        w.writing(f.as_fd());
        let barrier = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            for off in [0u64, 1 << 20] {
                let (direct, barrier) = (&direct, &barrier);
                s.spawn(move || {
                    let block = crate::io::buffers::BufferPool::new(1, 4096);
                    barrier.wait();
                    direct.write_all_at(block.get(0), off).unwrap();
                });
            }
        });
        pairs += 1;
        let (m, c) = times(f.as_fd()).unwrap();
        crossed += usize::from(m != c);
        let seen = w.look(f.as_fd()).ok();
        assert!(
            matches!(seen, Some(Seen::Own(..))),
            "pair {pairs}: {seen:?} (mtime {m:?}, ctime {c:?})"
        );
    }
    if crossed < 5 {
        eprintln!("NOTE: only {crossed} crossed pairs in {pairs}");
    }
}

/// `touch -m -d` by another process (a real one: fanotify tells
/// processes apart) while a write of ours is in flight, before that
/// write stores its own time: the write's time covers theirs
/// (mtime = ctime again) and inotify merges the two `IN_MODIFY` into
/// one. Rule 0 sees it as another's; on rules 1–3 alone (the guard off)
/// it is taken for ours, and the old times would be put back over it,
/// as a stress run of the suite caught the daemon doing.
#[test]
fn a_dated_mtime_our_write_in_flight_then_covers_is_anothers() {
    let tmp = tempfile::tempdir().unwrap();
    for fanotify in [true, false] {
        let (p, f, watcher) = written(tmp.path());
        let taken = times(f.as_fd()).unwrap();
        let mut w = if fanotify {
            watcher.watch(f.as_fd(), taken).unwrap()
        } else {
            watcher.watch_by_inotify(f.as_fd(), taken).unwrap()
        };
        assert_eq!(w.writers.is_some(), fanotify, "fanotify on this kernel");
        our_write(&mut w, &f);
        w.writing(f.as_fd());
        touch_by_another(&p);
        assert_eq!(times(f.as_fd()).unwrap().0, Timestamp::new(1_234, 0));
        f.write_all_at(b"ours", 0).unwrap(); // the write in flight lands
        let (m, c) = times(f.as_fd()).unwrap();
        assert_eq!(m, c, "the write's time covered theirs");
        let seen = w.look(f.as_fd()).unwrap();
        if fanotify {
            assert_eq!(seen, Seen::Another);
            assert!(w.may_restore(f.as_fd()).is_err());
        } else {
            assert_eq!(seen, Seen::Own(m, c), "rules 1-3 cannot tell it");
            assert_eq!(w.may_restore(f.as_fd()), Ok(()));
        }
    }
}

/// Rule 0 takes refreshd's own changes for its own: writes, and the
/// times it puts back (the same process, another thread).
#[test]
fn fanotify_takes_our_own_writes_and_times_for_ours() {
    let tmp = tempfile::tempdir().unwrap();
    let (p, f, watcher) = written(tmp.path());
    let mut w = watcher.watch(f.as_fd(), times(f.as_fd()).unwrap()).unwrap();
    assert!(w.writers.is_some(), "fanotify on this kernel");
    w.writing(f.as_fd());
    let g = f.try_clone().unwrap();
    std::thread::spawn(move || g.write_all_at(b"ours", 8192).unwrap())
        .join()
        .unwrap();
    f.write_all_at(b"ours", 0).unwrap();
    assert!(matches!(w.look(f.as_fd()), Ok(Seen::Own(..))));
    assert_eq!(w.may_restore(f.as_fd()), Ok(()));
    set_times(&p, (1_000, 0), (1_000, 0));
    assert!(!w.restored(), "our own putting back");
}

/// `touch -c -m -d @1234` by another process (fanotify tells processes
/// apart; a call from this one would be ours).
fn touch_by_another(p: &Path) {
    let touch = std::process::Command::new("touch")
        .args(["-c", "-m", "-d", "@1234"])
        .arg(p)
        .status()
        .unwrap();
    assert!(touch.success());
}

/// One fanotify group per I/O thread: a file's mark goes with its watch,
/// and what was queued for it is not the next file's. Without the unmark
/// or the drain, the next file's watch would take the last file's
/// changes for its own and leave its times.
#[test]
fn the_next_files_watch_does_not_take_the_last_files_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let (p, f, watcher) = written(tmp.path());
    let q = tmp.path().join("g");
    std::fs::write(&q, vec![2u8; 8192]).unwrap();
    let g = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&q)
        .unwrap();
    {
        let w = watcher.watch(f.as_fd(), times(f.as_fd()).unwrap()).unwrap();
        assert!(w.writers.is_some(), "fanotify on this kernel");
        touch_by_another(&p); // queued, never looked at
    }
    let mut w = watcher.watch(g.as_fd(), times(g.as_fd()).unwrap()).unwrap();
    assert!(w.writers.is_some());
    touch_by_another(&p); // the last file, no longer marked
    our_write(&mut w, &g);
    assert_eq!(w.may_restore(g.as_fd()), Ok(()));
    touch_by_another(&q);
    assert_eq!(w.look(g.as_fd()).ok(), Some(Seen::Another), "its own file");
}

/// Another process's change landing between a look's read of the times
/// and its drain of the events: the drain sees it, and the times kept
/// as theirs are read again after it. Captured from the first read (the
/// guard off) they are the times refreshd took the file with, and those
/// would be put back over theirs at the end.
#[test]
fn a_change_between_the_read_and_the_drain_keeps_its_own_times() {
    let tmp = tempfile::tempdir().unwrap();
    for guard_off in [false, true] {
        let (p, f, watcher) = written(tmp.path());
        let mut w = watcher.watch(f.as_fd(), times(f.as_fd()).unwrap()).unwrap();
        BETWEEN.with(|b| *b.borrow_mut() = Some(Box::new(move || touch_by_another(&p))));
        FIRST_READ.set(guard_off);
        let seen = w.look(f.as_fd()).unwrap();
        FIRST_READ.set(false);
        assert_eq!(seen, Seen::Another, "the drain saw it");
        let kept = w.theirs().map(|(_, m)| m);
        if guard_off {
            assert_eq!(kept, Some(Timestamp::new(1_000, 0)), "the times taken with");
        } else {
            assert_eq!(kept, Some(Timestamp::new(1_234, 0)), "their mtime");
        }
    }
}
