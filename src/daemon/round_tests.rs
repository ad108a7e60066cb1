//! A round under a fleet slot that stops being provable mid-file (the
//! lease could not be renewed): the file stops after its in-flight I/O and
//! is checkpointed, its bytes and times unchanged. With the guard off the
//! round writes on past the proof — what another host's refresh of the
//! same data could overlap.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::config::{Config, Settings, YieldMode};
use crate::coordination::Fleet;
use crate::daemon::{DriveCell, Shared};
use crate::inventory::{FileRecord, Store};
use crate::units::{ByteSize, Rate};

const SIZE: usize = 8 << 20;

/// A stale 8 MiB file under `dir/tree`, scanned into a store.
fn stale_tree(dir: &Path) -> (Store, FileRecord, Vec<u8>, SystemTime) {
    let tree = dir.join("tree");
    std::fs::create_dir(&tree).unwrap_or_else(|e| panic!("{e}"));
    let data: Vec<u8> = (0..SIZE).map(|i| (i * 7 % 251) as u8).collect();
    let path = tree.join("seg0");
    let mut f = std::fs::File::create(&path).unwrap_or_else(|e| panic!("{e}"));
    f.write_all(&data).unwrap_or_else(|e| panic!("{e}"));
    f.sync_all().unwrap_or_else(|e| panic!("{e}"));
    let old = SystemTime::now() - Duration::from_secs(180 * 86_400);
    f.set_modified(old).unwrap_or_else(|e| panic!("{e}"));
    let mtime = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut store = Store::open(&dir.join("state")).unwrap_or_else(|e| panic!("{e}"));
    store.scan(&tree).unwrap_or_else(|e| panic!("{e}"));
    let mut rec = None;
    store
        .for_each_file(&tree, &mut |r| rec = Some(r))
        .unwrap_or_else(|e| panic!("{e}"));
    (store, rec.unwrap_or_else(|| panic!("scanned")), data, mtime)
}

/// Runs a forced round at 4 MiB/s (2 s for the file) under a slot proven
/// for 400 ms; returns what it did and the file's checkpoint.
fn round_past_the_proof(dir: &Path) -> (super::RoundResult, u64, FileRecord, Vec<u8>, SystemTime) {
    let (store, rec, data, mtime) = stale_tree(dir);
    let cfg = Config {
        state_dir: dir.join("state"),
        ..Config::default()
    };
    let cell = Arc::new(DriveCell::new(
        "test0".into(),
        vec![],
        vec![dir.join("tree")],
    ));
    let shared: Arc<Shared> = Shared::for_tests(cfg, vec![cell.clone()], &dir.join("journal"));
    let fleet = Fleet::new(Default::default());
    let until = Instant::now() + Duration::from_millis(400);
    let ticket = fleet.held_ticket("test0", cell.cancel.clone(), until);
    let s = Settings {
        rate: Rate(4 << 20),
        yield_mode: YieldMode::Off,
        min_free: ByteSize(0),
        ..Settings::default()
    };
    let r = super::run(&shared, &cell, &store, &s, true, None, Some(&ticket));
    let checkpoint = store.resume_point(&rec).unwrap_or(0);
    (r, checkpoint, rec, data, mtime)
}

fn assert_untouched(rec: &FileRecord, data: &[u8], mtime: SystemTime) {
    let now = std::fs::read(&rec.path).unwrap_or_default();
    assert!(now == data, "contents unchanged");
    let m = std::fs::metadata(&rec.path).and_then(|m| m.modified()).ok();
    assert_eq!(m, Some(mtime), "mtime unchanged");
}

#[test]
fn a_slot_that_cannot_be_proven_stops_the_file_and_checkpoints_it() {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap_or_else(|e| panic!("{e}"));
    let t = Instant::now();
    let (r, checkpoint, rec, data, mtime) = round_past_the_proof(tmp.path());
    assert!(r.slot_lost && !r.finished, "{r:?}");
    assert!(
        t.elapsed() < Duration::from_millis(1800),
        "stopped after {:?}",
        t.elapsed()
    );
    assert!(
        checkpoint > 0 && checkpoint < SIZE as u64,
        "checkpoint {checkpoint}"
    );
    assert!(r.refreshed.is_empty());
    assert_untouched(&rec, &data, mtime);
}

#[test]
fn with_the_guard_off_the_round_writes_past_the_proof() {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap_or_else(|e| panic!("{e}"));
    super::IGNORE_LOST_SLOT.with(|c| c.set(true));
    let (r, checkpoint, rec, data, mtime) = round_past_the_proof(tmp.path());
    super::IGNORE_LOST_SLOT.with(|c| c.set(false));
    assert!(r.finished && !r.slot_lost, "{r:?}");
    assert_eq!(
        r.refreshed.len(),
        1,
        "the whole file rewritten without a slot"
    );
    assert_eq!(checkpoint, 0);
    assert_untouched(&rec, &data, mtime);
}

#[test]
fn a_closed_window_stops_the_round_between_files() {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path();
    let (store, rec, data, mtime) = stale_tree(dir);
    let cell = Arc::new(DriveCell::new(
        "test0".into(),
        vec![],
        vec![dir.join("tree")],
    ));
    let cfg = Config {
        state_dir: dir.join("state"),
        ..Config::default()
    };
    let shared: Arc<Shared> = Shared::for_tests(cfg, vec![cell.clone()], &dir.join("journal"));
    // A one-minute window twelve hours away from now.
    let now = crate::clock::local_minute();
    let start = (now + 720) % 1440;
    let window = format!(
        "{:02}:{:02}-{:02}:{:02}",
        start / 60,
        start % 60,
        (start + 1) % 1440 / 60,
        (start + 1) % 60
    );
    let s = Settings {
        window: window.parse().unwrap_or_else(|e| panic!("{e}")),
        yield_mode: YieldMode::Off,
        min_free: ByteSize(0),
        ..Settings::default()
    };
    let r = super::run(&shared, &cell, &store, &s, true, None, None);
    assert!(r.left_window && !r.finished, "{r:?}");
    assert!(r.refreshed.is_empty());
    assert_untouched(&rec, &data, mtime);
}
