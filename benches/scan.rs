//! Inventory scan vs `find PATH -printf '%T@ %s\n'` on the same tree, side
//! by side in one run, and the daemon's memory per tracked file.
//!
//! The tree: `REFRESHD_BENCH_FILES` files (default 1,000,000) in
//! directories of 1,000, on a dedicated tmpfs (so the walk, not a disk, is
//! measured: the worst case for us against find). Caches are warm for both
//! (one untimed find first). Timed, alternating for
//! `REFRESHD_BENCH_ROUNDS` rounds (default 3):
//!   (a) find, output to /dev/null,
//!   (b) a first scan into an empty state database (on tmpfs too),
//!   (c) a rescan of the unchanged tree (the daemon's steady state).
//! Each scan runs in a child process (this binary again) that reports its
//! resident memory before and after, and its peak: memory per file is
//! (peak − before) / files.
//!
//! `cargo bench --bench scan` (root needed for the tmpfs mount).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Child mode: scan, print "seconds rss_before rss_after peak files".
fn child(root: &Path, state: &Path) {
    let before = status_kib("VmRSS:");
    let mut store = refreshd::inventory::Store::open(state).unwrap();
    let t = Instant::now();
    let stats = store.scan(root).unwrap();
    let secs = t.elapsed().as_secs_f64();
    let after = status_kib("VmRSS:");
    let peak = status_kib("VmHWM:");
    println!("{secs} {before} {after} {peak} {}", stats.files);
}

struct Tmpfs(PathBuf);
impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn scan(root: &Path, state: &Path) -> (Duration, u64, u64, u64, u64) {
    let out = Command::new(std::env::current_exe().unwrap())
        .env("REFRESHD_BENCH_SCAN_CHILD", root)
        .env("REFRESHD_BENCH_SCAN_STATE", state)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8(out.stdout).unwrap();
    let v: Vec<f64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
    (
        Duration::from_secs_f64(v[0]),
        v[1] as u64,
        v[2] as u64,
        v[3] as u64,
        v[4] as u64,
    )
}

fn find(root: &Path) -> Duration {
    let t = Instant::now();
    let st = Command::new("find")
        .arg(root)
        .args(["-printf", "%T@ %s\\n"])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    t.elapsed()
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if let Some(root) = std::env::var_os("REFRESHD_BENCH_SCAN_CHILD") {
        let state = std::env::var_os("REFRESHD_BENCH_SCAN_STATE").unwrap();
        child(Path::new(&root), Path::new(&state));
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !rustix::process::geteuid().is_root() {
        println!("scan bench skipped: needs root for a tmpfs mount");
        return;
    }
    let files = env_u64("REFRESHD_BENCH_FILES", 1_000_000);
    let rounds = env_u64("REFRESHD_BENCH_ROUNDS", 3);
    let base = tempfile::tempdir().unwrap();
    let mnt = base.path().join("tmpfs");
    std::fs::create_dir(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4g,nr_inodes=0", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success());
    let _guard = Tmpfs(mnt.clone());
    let tree = mnt.join("tree");
    let t = Instant::now();
    let per_dir = 1000;
    for d in 0..files.div_ceil(per_dir) {
        let dir = tree.join(format!("{:03}/{d:06}", d % 100));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..per_dir.min(files - d * per_dir) {
            std::fs::write(dir.join(format!("segment-{f:06}.idx")), [1u8; 100]).unwrap();
        }
    }
    println!(
        "tree: {files} files of 100 B in dirs of {per_dir}, built in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    find(&tree); // warm the dentry and inode caches
    let (mut f, mut first, mut re) = (vec![], vec![], vec![]);
    let mut mem = (0, 0, 0);
    for r in 0..rounds {
        let state = mnt.join(format!("state{r}"));
        f.push(find(&tree));
        let (d, before, after, peak, n) = scan(&tree, &state);
        assert_eq!(n, files);
        first.push(d);
        mem = (before, after, peak);
        let (d, ..) = scan(&tree, &state);
        re.push(d);
        let _ = std::fs::remove_dir_all(&state);
    }
    let (f, first, re) = (median(&mut f), median(&mut first), median(&mut re));
    println!("find -printf '%T@ %s\\n'   {:>8.3} s", f.as_secs_f64());
    println!(
        "first scan (empty db)     {:>8.3} s   {:.2}x find",
        first.as_secs_f64(),
        first.as_secs_f64() / f.as_secs_f64()
    );
    println!(
        "rescan (unchanged tree)   {:>8.3} s   {:.2}x find",
        re.as_secs_f64(),
        re.as_secs_f64() / f.as_secs_f64()
    );
    let (before, after, peak) = mem;
    println!(
        "memory: rss before {before} KiB, after {after} KiB, peak {peak} KiB; \
         per file: {:.0} B retained, {:.0} B peak",
        (after.saturating_sub(before) * 1024) as f64 / files as f64,
        (peak.saturating_sub(before) * 1024) as f64 / files as f64
    );
}
