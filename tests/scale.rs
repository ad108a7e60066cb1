//! Many drives, one state database: while eight drives scan 200,000
//! files each, the checkpoints other drives write as they refresh never
//! wait long and are never lost. (The scan commits per directory batch,
//! at most about 100 ms or 4,096 rows per transaction; a scan that held
//! one write transaction for its whole walk kept every other drive's
//! checkpoint waiting for the busy timeout, then dropped it.)
//!
//! `REFRESHD_SCALE_FILES` sets the files per drive (default 200,000).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use refreshd::inventory::{FileRecord, Store};

const DRIVES: usize = 8;
/// Longest a checkpoint write may wait.
const BOUND: Duration = Duration::from_secs(1);

fn files_per_drive() -> usize {
    std::env::var("REFRESHD_SCALE_FILES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000)
}

/// A tree of `n` empty files, 1,000 to a directory.
fn tree(root: &Path, n: usize) {
    for d in 0..n.div_ceil(1000) {
        let dir = root.join(format!("d{d:04}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..1000.min(n - d * 1000) {
            std::fs::File::create(dir.join(format!("f{f:04}"))).unwrap();
        }
    }
}

/// Where the trees go: memory when there is room (the database is the
/// subject, not the disk).
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

/// One writer: a drive refreshing its file, saving a checkpoint every
/// 20 ms while the scans run. Returns its slowest write and how many.
fn checkpoints(
    state: PathBuf,
    file: FileRecord,
    start: Arc<Barrier>,
    done: Arc<AtomicBool>,
) -> (Vec<Duration>, u64) {
    let store = Store::open(&state).unwrap();
    start.wait();
    let (mut waits, mut n) = (vec![], 0u64);
    while !done.load(Ordering::Relaxed) {
        n += 1;
        let t = Instant::now();
        store
            .save_checkpoint(&file, n * 4096)
            .unwrap_or_else(|e| panic!("checkpoint {n} of {} lost: {e}", file.path.display()));
        waits.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        store.resume_point(&file).unwrap(),
        n * 4096,
        "the last checkpoint reads back"
    );
    (waits, n)
}

#[test]
fn checkpoints_are_neither_delayed_nor_lost_while_eight_drives_scan() {
    let n = files_per_drive();
    let dir = scratch();
    let state = dir.path().join("state");
    let t = Instant::now();
    let roots: Vec<PathBuf> = (0..DRIVES)
        .map(|i| {
            let r = dir.path().join(format!("drive{i}"));
            tree(&r, n);
            r
        })
        .collect();
    eprintln!("{DRIVES} trees of {n} files made in {:.1?}", t.elapsed());
    // The refreshing drives' files are known to the database first.
    let mut files = vec![];
    for i in 0..DRIVES {
        let r = dir.path().join(format!("refreshing{i}"));
        std::fs::create_dir_all(&r).unwrap();
        std::fs::write(r.join("big"), vec![7u8; 1 << 20]).unwrap();
        let mut s = Store::open(&state).unwrap();
        s.scan(&r).unwrap();
        files.push(s.files(&r).unwrap().remove(0));
    }
    let start = Arc::new(Barrier::new(2 * DRIVES));
    let done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = files
        .into_iter()
        .map(|f| {
            let (state, start, done) = (state.clone(), start.clone(), done.clone());
            std::thread::spawn(move || checkpoints(state, f, start, done))
        })
        .collect();
    let t = Instant::now();
    let scanners: Vec<_> = roots
        .iter()
        .map(|r| {
            let (state, start, r) = (state.clone(), start.clone(), r.clone());
            std::thread::spawn(move || {
                let mut s = Store::open(&state).unwrap();
                start.wait();
                s.scan(&r).unwrap()
            })
        })
        .collect();
    for s in scanners {
        let stats = s.join().unwrap();
        assert_eq!(stats.files as usize, n, "every file scanned");
    }
    let scanned = t.elapsed();
    done.store(true, Ordering::Relaxed);
    let mut waits = vec![];
    let mut writes = 0;
    for w in writers {
        let (mut w, k) = w.join().unwrap();
        waits.append(&mut w);
        writes += k;
    }
    waits.sort();
    let slowest = waits.last().copied().unwrap_or_default();
    let p99 = waits[waits.len() * 99 / 100];
    let median = waits[waits.len() / 2];
    eprintln!(
        "{DRIVES} scans of {n} files took {scanned:.1?}; {writes} checkpoints written meanwhile: median {median:.1?}, p99 {p99:.1?}, slowest {slowest:.1?}"
    );
    assert!(writes >= DRIVES as u64, "the writers ran");
    assert!(
        slowest < BOUND,
        "a checkpoint waited {slowest:?} behind the scans (bound {BOUND:?})"
    );
}
