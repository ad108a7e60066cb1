//! The refresh yields to an application reading the same drive, and
//! yielding changes nothing but the pace: every file's bytes and times are
//! what they were. The numbers (latency ratios) are in `benches/latency.rs`.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::daemon_harness::*;
use crate::helpers::*;

/// An application: O_DIRECT 4 KiB random reads of its own file, in a loop,
/// until dropped.
pub struct AppReader {
    stop: Arc<AtomicBool>,
    pub reads: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl AppReader {
    pub fn start(file: &Path) -> AppReader {
        write_file(file, &pattern(32 << 20, 9_001));
        AppReader::reading(file)
    }

    /// Reads `file`, written by [`AppReader::start`] before.
    pub fn reading(file: &Path) -> AppReader {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(file)
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicU64::new(0));
        let (s, n) = (stop.clone(), reads.clone());
        let thread = std::thread::spawn(move || {
            use std::os::unix::fs::FileExt;
            let mut pool = refreshd::io::buffers::BufferPool::new(1, 4096);
            let mut x = 12345u64;
            while !s.load(Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                let off = ((x >> 33) % ((32 << 20) >> 12)) << 12;
                f.read_exact_at(pool.get_mut(0), off).unwrap();
                n.fetch_add(1, Ordering::Relaxed);
            }
        });
        AppReader {
            stop,
            reads,
            thread: Some(thread),
        }
    }
}

impl Drop for AppReader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn files(dir: &Path, n: usize, mib: usize) -> Vec<(PathBuf, Fingerprint)> {
    files_of(dir, n, mib << 20)
}

/// `n` files of `len` bytes, aged.
fn files_of(dir: &Path, n: usize, len: usize) -> Vec<(PathBuf, Fingerprint)> {
    std::fs::create_dir_all(dir).unwrap();
    (0..n)
        .map(|i| {
            let p = dir.join(format!("f{i}"));
            write_file(&p, &pattern(len, 300 + i as u64));
            set_mtime(&p, 1_600_000_000 + i as i64, 0);
            let fp = fingerprint(&p);
            (p, fp)
        })
        .collect()
}

fn unchanged(files: &[(PathBuf, Fingerprint)]) {
    for (p, before) in files {
        let after = fingerprint(p);
        assert_eq!(after.hash, before.hash, "{} bytes changed", p.display());
        assert_eq!(after.mtime, before.mtime, "{} mtime changed", p.display());
    }
}

fn refresh(dir: &Path, extra: &[&str]) -> serde_json::Value {
    refresh_files(dir, extra, 6)
}

/// The one-shot at 40 MiB/s (floor 8) on `dir`, as JSON.
fn oneshot(dir: &Path, extra: &[&str]) -> std::process::Command {
    let mut c = refreshd();
    c.args([
        "refresh",
        "--json",
        "--rate",
        "40MiB/s",
        "--yield-floor",
        "8MiB/s",
    ])
    .args(extra)
    .arg(dir);
    c
}

/// The one-shot on `dir`'s `n` files: its summary.
fn refresh_files(dir: &Path, extra: &[&str], n: usize) -> serde_json::Value {
    let out = run(&mut oneshot(dir, extra));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let last = text.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(v["summary"]["refreshed"], n, "{text}");
    v["summary"].clone()
}

#[test]
fn privileged_refresh_yields_to_a_reader_and_changes_nothing() {
    if !privileged("privileged_refresh_yields_to_a_reader_and_changes_nothing") {
        return;
    }
    let fs = LoopFs::with_options("ext4", 512, true);
    let data = files(&fs.path("data"), 6, 8);
    fs.sync();
    let app = AppReader::start(&fs.path("app"));
    // Off: today's pace, whatever the reader does.
    let off = refresh(&fs.path("data"), &["--yield", "off"]);
    assert_eq!(off["yielded_seconds"], 0.0);
    unchanged(&data);
    // Auto: the reader is seen, the refresh stops to learn its latency
    // alone, then shares the drive from the 8 MiB/s floor up (how fast it
    // grows depends on what the reader feels, and on how much CPU it gets
    // beside other tests), and still finishes. 48 MiB at 40 MiB/s: long
    // enough for the pacer's first look (a tick, then LEARN).
    let reads_before = app.reads.load(Ordering::Relaxed);
    let auto = refresh(&fs.path("data"), &[]);
    let yielded = auto["yielded_seconds"].as_f64().unwrap();
    let (t_auto, t_off) = (
        auto["elapsed_s"].as_f64().unwrap(),
        off["elapsed_s"].as_f64().unwrap(),
    );
    assert!(
        app.reads.load(Ordering::Relaxed) > reads_before,
        "the app ran"
    );
    assert!(yielded > 0.5, "yielded {yielded} s: {auto}");
    assert!(
        t_auto > t_off + 0.5,
        "yielding took {t_auto} s, not yielding {t_off} s"
    );
    unchanged(&data);
    // No reader: no yielding.
    drop(app);
    let quiet = refresh(&fs.path("data"), &[]);
    assert!(
        quiet["yielded_seconds"].as_f64().unwrap() < 0.5,
        "yielded with nobody reading: {quiet}"
    );
    unchanged(&data);
}

/// Small files on a fast drive: at 40 MiB/s a 1 MiB file is opened,
/// planned, refreshed and synced in 25 ms, so every 100 ms tick of the
/// pacer holds a file's start and end. Their metadata reads are left out
/// of the counters, not the ticks: a pacer that left those ticks out
/// never saw a reader that came after the refresh started
/// (`yielded_seconds` 0 on the loop devices of the latency matrix). With
/// no reader, our own metadata reads, and the unaligned tails read
/// through the page cache, are not one.
#[test]
fn privileged_small_files_on_a_fast_drive_still_yield() {
    if !privileged("privileged_small_files_on_a_fast_drive_still_yield") {
        return;
    }
    let fs = LoopFs::with_options("ext4", 512, true);
    let data = files_of(&fs.path("data"), 160, (1 << 20) + 1000);
    drop(AppReader::start(&fs.path("app")));
    fs.sync();
    drop_caches();
    let refresh = oneshot(&fs.path("data"), &[])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader comes after the refresh has looked at the drive.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let app = AppReader::reading(&fs.path("app"));
    let out = refresh.wait_with_output().unwrap();
    drop(app);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let auto: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let auto = &auto["summary"];
    assert_eq!(auto["refreshed"], 160, "{text}");
    let yielded = auto["yielded_seconds"].as_f64().unwrap();
    assert!(yielded > 0.5, "yielded {yielded} s: {auto}");
    unchanged(&data);
    // The inodes and extent maps read again: our metadata reads.
    drop_caches();
    let quiet = refresh_files(&fs.path("data"), &[], 160);
    assert!(
        quiet["yielded_seconds"].as_f64().unwrap() < 0.5,
        "yielded with nobody reading: {quiet}"
    );
    unchanged(&data);
}

#[test]
fn privileged_daemon_status_and_metrics_say_when_it_yields() {
    if !privileged("privileged_daemon_status_and_metrics_say_when_it_yields") {
        return;
    }
    let fs = LoopFs::with_options("ext4", 512, true);
    let tree = fs.path("tree");
    let stale = stale_files(&tree, 4, 8, 501);
    let before: Vec<Fingerprint> = stale.iter().map(|p| fingerprint(p)).collect();
    fs.sync();
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let cfg = config(
        tmp.path(),
        &tree,
        port,
        // 32 MiB at 16 MiB/s: long enough for the pacer's first look.
        "sample_interval = \"1h\"\nrate = \"16MiB/s\"\nyield_floor = \"2MiB/s\"\n",
    );
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    daemon.wait_for("the first scan", 30, |dm| {
        dm.status()["files"].as_u64() == Some(4)
    });
    let dev = daemon.status()["device"].as_str().unwrap().to_string();
    let app = AppReader::start(&fs.path("app"));
    let (code, _, err) = daemon.ctl(&["now", "--force"]);
    assert_eq!(code, 0, "{err}");
    daemon.wait_for("yielding in status", 60, |dm| {
        dm.status()["yielding"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("the application reads on"))
    });
    let (_, text, _) = daemon.ctl(&["status"]);
    assert!(text.contains("yielding since"), "{text}");
    let m = daemon.metrics();
    assert_eq!(
        metric(&m, &format!("refreshd_yielding{{device=\"{dev}\"}}")),
        Some(1.0),
        "{m}"
    );
    drop(app);
    daemon.wait_for("the refresh to end", 120, |dm| {
        dm.status()["refresh"].is_null() && dm.status()["last_refresh"].is_i64()
    });
    let m = daemon.metrics();
    let yielded = metric(
        &m,
        &format!("refreshd_yield_seconds_total{{device=\"{dev}\"}}"),
    );
    assert!(yielded.is_some_and(|s| s > 0.5), "{yielded:?}");
    assert_eq!(
        metric(&m, &format!("refreshd_yielding{{device=\"{dev}\"}}")),
        Some(0.0)
    );
    for (p, b) in stale.iter().zip(&before) {
        let a = fingerprint(p);
        assert_eq!((a.hash, a.mtime), (b.hash, b.mtime), "{}", p.display());
    }
}
