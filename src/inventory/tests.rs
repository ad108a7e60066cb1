use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::*;

fn write(p: &Path, n: usize) {
    fs::create_dir_all(p.parent().expect("has parent")).expect("mkdir");
    fs::write(p, vec![7u8; n]).expect("write");
}

fn paths(store: &Store, root: &Path) -> Vec<String> {
    let mut v: Vec<String> = store
        .files(root)
        .expect("files")
        .into_iter()
        .map(|f| {
            f.path
                .strip_prefix(root)
                .expect("under root")
                .display()
                .to_string()
        })
        .collect();
    v.sort();
    v
}

#[test]
fn first_scan_records_every_regular_file_once() {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path();
    write(&root.join("a"), 10);
    write(&root.join("d/b"), 20);
    write(&root.join("d/e/c"), 30);
    fs::hard_link(root.join("a"), root.join("d/a-link")).expect("link");
    std::os::unix::fs::symlink(root.join("a"), root.join("sym")).expect("symlink");
    std::os::unix::fs::symlink("/etc", root.join("d/etc")).expect("symlink");
    let mut store = Store::memory().expect("store");
    let s = store.scan(root).expect("scan");
    assert_eq!((s.files, s.added, s.extra_links, s.bytes), (3, 3, 1, 60));
    assert_eq!(s.dirs, 3);
    assert_eq!(paths(&store, root), ["a", "d/b", "d/e/c"]);
    let f = &store.files(root).expect("files")[0];
    let md = fs::metadata(root.join("a")).expect("stat");
    assert_eq!((f.dev, f.ino, f.size), (md.dev(), md.ino(), 10));
    assert!(
        matches!(f.fs, crate::io::fsid::FsId::Uuid { .. }),
        "{:?}",
        f.fs
    );
    assert_eq!(
        f.mtime,
        crate::clock::Timestamp::new(md.mtime(), md.mtime_nsec() as u32)
    );
}

#[test]
fn rescan_writes_only_differences_and_keeps_history_across_renames() {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path();
    for i in 0..5 {
        write(&root.join(format!("d{i}/f")), 100);
    }
    let mut store = Store::memory().expect("store");
    store.scan(root).expect("scan");
    let f0 = store.files(root).expect("files").remove(0);
    assert!(store.mark_refreshed(f0.key(), 1234, Some(7)).expect("mark"));

    let again = store.scan(root).expect("rescan");
    assert_eq!(
        (again.added, again.changed, again.removed, again.files),
        (0, 0, 0, 5)
    );

    // Rename across directories (both orders of the walk), modify, delete.
    fs::rename(root.join("d0/f"), root.join("d4/moved")).expect("rename");
    fs::write(root.join("d1/f"), vec![1u8; 4000]).expect("rewrite");
    fs::remove_dir_all(root.join("d2")).expect("rm");
    write(&root.join("d3/new"), 1);
    let s = store.scan(root).expect("rescan");
    assert_eq!(
        (s.added, s.changed, s.removed, s.files),
        (1, 2, 1, 5),
        "{s:?}"
    );
    assert_eq!(
        paths(&store, root),
        ["d1/f", "d3/f", "d3/new", "d4/f", "d4/moved"]
    );
    let moved = store
        .files(root)
        .expect("files")
        .into_iter()
        .find(|f| f.path.ends_with("d4/moved"))
        .expect("moved file");
    assert_eq!(
        (moved.ino, moved.last_refresh, moved.generation),
        (f0.ino, Some(1234), Some(7))
    );
    assert_eq!(
        moved.data_written(crate::clock::now_secs()),
        Some(1234.max(moved.mtime.sec))
    );
}

#[test]
fn scans_of_two_roots_do_not_delete_each_other() {
    let t = tempfile::tempdir().expect("tempdir");
    write(&t.path().join("a/x"), 1);
    write(&t.path().join("b/y"), 1);
    let mut store = Store::memory().expect("store");
    store.scan(&t.path().join("a")).expect("scan a");
    store.scan(&t.path().join("b")).expect("scan b");
    store.scan(&t.path().join("a")).expect("rescan a");
    assert_eq!(store.count().expect("count"), 2);
    // A sibling whose name extends the root's is not under it.
    write(&t.path().join("ab/z"), 1);
    store.scan(&t.path().join("ab")).expect("scan ab");
    assert_eq!(store.files(&t.path().join("a")).expect("files").len(), 1);
    assert_eq!(store.files(&t.path().join("ab")).expect("files").len(), 1);
    assert_eq!(store.files(&t.path().join("b")).expect("files").len(), 1);
}

#[test]
fn an_unreadable_root_changes_nothing() {
    let t = tempfile::tempdir().expect("tempdir");
    write(&t.path().join("a/x"), 1);
    let mut store = Store::memory().expect("store");
    store.scan(&t.path().join("a")).expect("scan");
    let err = store
        .scan(&t.path().join("missing"))
        .expect_err("no such dir");
    assert!(err.to_string().contains("missing"), "{err}");
    assert_eq!(store.count().expect("count"), 1);
}

#[test]
fn state_persists_and_a_foreign_schema_is_refused() {
    let t = tempfile::tempdir().expect("tempdir");
    write(&t.path().join("tree/x"), 1);
    {
        let mut store = Store::open(&t.path().join("state")).expect("open");
        store.scan(&t.path().join("tree")).expect("scan");
    }
    let store = Store::open(&t.path().join("state")).expect("reopen");
    assert_eq!(store.count().expect("count"), 1);
    drop(store);
    let conn = rusqlite::Connection::open(t.path().join("state/state.db")).expect("sqlite");
    conn.execute("UPDATE meta SET value = 99 WHERE key = 'schema'", [])
        .expect("update");
    drop(conn);
    let err = Store::open(&t.path().join("state")).expect_err("refused");
    assert!(err.to_string().contains("schema version 99"), "{err}");
}

#[test]
fn data_age_uses_the_later_of_mtime_and_last_refresh() {
    let f = FileRecord {
        fs: crate::io::fsid::FsId::Dev(1),
        dev: 1,
        ino: 2,
        path: "/x".into(),
        size: 0,
        alloc: 0,
        mtime: crate::clock::Timestamp::new(1_000, 0),
        btime: None,
        generation: None,
        last_refresh: None,
    };
    assert_eq!(f.data_age(1_500).as_secs(), 500);
    let g = FileRecord {
        last_refresh: Some(1_400),
        ..f.clone()
    };
    assert_eq!(g.data_age(1_500).as_secs(), 100);
    // A little in the future (clock skew): age 0.
    assert_eq!(f.data_age(990).as_secs(), 0);
}

/// Regression: a refresh while the clock was 40 years ahead stored a
/// last_refresh in 2066; with the clock fixed, the data was exempt from
/// refreshing until then. An mtime from a wrong clock exempted it too.
#[test]
fn timestamps_from_a_wrong_clock_never_exempt_data() {
    let now = 1_800_000_000;
    let forty_years = 40 * 31_557_600;
    let f = FileRecord {
        fs: crate::io::fsid::FsId::Dev(1),
        dev: 1,
        ino: 2,
        path: "/x".into(),
        size: 10,
        alloc: 10,
        mtime: crate::clock::Timestamp::new(now - 90 * 86_400, 0),
        btime: None,
        generation: None,
        last_refresh: Some(now + forty_years),
    };
    assert_eq!(f.data_age(now).as_secs(), 90 * 86_400, "the mtime counts");
    assert!(f.from_a_wrong_clock(now));
    let future_mtime = FileRecord {
        mtime: crate::clock::Timestamp::new(now + forty_years, 0),
        last_refresh: None,
        ..f.clone()
    };
    assert_eq!(future_mtime.data_age(now), std::time::Duration::MAX, "due");
    // Refreshed (with a right clock): it ages from then.
    let refreshed = FileRecord {
        last_refresh: Some(now - 86_400),
        ..future_mtime
    };
    assert_eq!(refreshed.data_age(now).as_secs(), 86_400);
}

#[test]
fn a_checkpoint_resumes_only_the_unchanged_file() {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path();
    write(&root.join("a"), 8192);
    let mut store = Store::memory().expect("store");
    store.scan(root).expect("scan");
    let f = store.files(root).expect("files").remove(0);
    assert_eq!(store.resume_point(&f).expect("none yet"), 0);
    store.save_checkpoint(&f, 4096).expect("save");
    assert_eq!(store.resume_point(&f).expect("resume"), 4096);
    assert_eq!(store.checkpoints(root).expect("list").len(), 1);
    // Changed since (another mtime): planned afresh, checkpoint dropped.
    let changed = FileRecord {
        mtime: crate::clock::Timestamp::new(f.mtime.sec, f.mtime.nsec ^ 1),
        ..f.clone()
    };
    assert_eq!(store.resume_point(&changed).expect("changed"), 0);
    assert_eq!(store.resume_point(&f).expect("dropped"), 0);
    store.save_checkpoint(&f, 4096).expect("save");
    store.clear_checkpoint(f.key()).expect("clear");
    assert!(store.checkpoints(root).expect("list").is_empty());
}

#[test]
fn the_last_refresh_under_a_root_is_one_query() {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path();
    for d in ["a", "a/b", "ab"] {
        write(&root.join(d).join("f"), 10);
    }
    let mut store = Store::memory().expect("store");
    store.scan(root).expect("scan");
    let under_a = root.join("a");
    assert_eq!(
        store.last_refresh_under(&under_a).expect("query"),
        None,
        "never"
    );
    for f in store.files(root).expect("files") {
        let at = match f.path.strip_prefix(root).expect("under").to_str() {
            Some("a/f") => 100,
            Some("a/b/f") => 300,
            _ => 900, // ab/f: beside a, not under it
        };
        store.mark_refreshed(f.key(), at, None).expect("mark");
    }
    assert_eq!(
        store.last_refresh_under(&under_a).expect("query"),
        Some(300)
    );
    assert_eq!(store.last_refresh_under(root).expect("query"), Some(900));
    let mut walked = None;
    store
        .for_each_file(&under_a, &mut |f| walked = walked.max(f.last_refresh))
        .expect("walk");
    assert_eq!(walked, Some(300), "the same as walking the records");
}

/// A directory that cannot be read keeps its rows (and their history):
/// only a directory that is really gone loses them. Here every directory
/// listing fails (getdents64 refused by a seccomp filter on the scanning
/// thread, as EACCES would). Regression: such directories were treated as
/// deleted, and their files' last_refresh went with them.
#[test]
fn an_unreadable_directory_keeps_its_rows() {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().to_path_buf();
    write(&root.join("a"), 10);
    write(&root.join("d/b"), 20);
    let mut store = Store::memory().expect("store");
    store.scan(&root).expect("scan");
    let f = store.files(&root).expect("files").remove(0);
    store.mark_refreshed(f.key(), 1234, None).expect("mark");
    const SYS_GETDENTS64: u32 = 217;
    let (stats, store) = testbed::seccomp::on_thread_refusing(SYS_GETDENTS64, libc::EACCES, {
        let root = root.clone();
        move || {
            let s = store.scan(&root).expect("scan");
            (s, store)
        }
    });
    assert!(stats.unreadable >= 1, "{stats:?}");
    assert_eq!(stats.removed, 0, "{stats:?}");
    assert!(stats.problems[0].contains("Permission denied"), "{stats:?}");
    assert_eq!(paths(&store, &root), ["a", "d/b"]);
    let again = store.files(&root).expect("files");
    assert!(again.iter().any(|g| g.last_refresh == Some(1234)));
    // Really gone: the rows go.
    let mut store = store;
    std::fs::remove_dir_all(root.join("d")).expect("rm");
    let s = store.scan(&root).expect("scan");
    assert_eq!((s.removed, s.unreadable), (1, 0));
}
