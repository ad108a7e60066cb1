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
//! Then the daemon itself (`REFRESHD_BENCH_ONLY=daemon` runs only this):
//! `refreshd run` on the same number of files on ext4 (a loop device: the
//! daemon serves drives, and tmpfs is none; 100-byte files are inline in
//! their inodes), its peak resident memory once the first scan and
//! sampling round are done, against the same daemon on an empty tree:
//! (peak − empty peak) / files, target ≤ 200 B per file.
//!
//! `cargo bench --bench scan` (root needed for the mounts).
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

/// A `/proc/self/status` field in KiB.
fn status_kib(field: &str) -> u64 {
    kib_in("/proc/self/status", field)
}

fn kib_in(status: &str, field: &str) -> u64 {
    let s = std::fs::read_to_string(status).unwrap_or_default();
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

/// `files` files of 100 B in directories of 1,000 under `tree`.
fn build_tree(tree: &Path, files: u64) {
    let per_dir = 1000;
    for d in 0..files.div_ceil(per_dir) {
        let dir = tree.join(format!("{:03}/{d:06}", d % 100));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..per_dir.min(files - d * per_dir) {
            std::fs::write(dir.join(format!("segment-{f:06}.idx")), [1u8; 100]).unwrap();
        }
    }
}

/// Undoes a loop-mounted ext4: unmount, detach.
struct LoopExt4 {
    mnt: PathBuf,
    dev: String,
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn kib_of(pid: u32, field: &str) -> u64 {
    kib_in(&format!("/proc/{pid}/status"), field)
}

/// Runs `refreshd run` on `tree` until its first scan counted `want`
/// files and a sampling round is done; returns (peak, current) RSS in KiB.
fn daemon_rss(dir: &Path, tree: &Path, want: u64) -> (u64, u64) {
    let cfg = dir.join("refreshd.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{d}/state\"\ncontrol_socket = \"{d}/control.sock\"\nmetrics_listen = \"\"\n\n\
             [defaults]\nscan_interval = \"1h\"\nsample_interval = \"1h\"\nsample_bytes = \"16MiB\"\n\
             min_free = \"16MiB\"\n\n[[paths]]\npath = \"{t}\"\n",
            d = dir.display(),
            t = tree.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_refreshd"))
        .args(["run", "--config"])
        .arg(&cfg)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    loop {
        let out =
            Command::new(Path::new(env!("CARGO_BIN_EXE_refreshd")).with_file_name("refreshctl"))
                .arg("--socket")
                .arg(dir.join("control.sock"))
                .args(["--json", "status"])
                .output()
                .unwrap();
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let d = &v["drives"][0];
            if d["files"].as_u64() == Some(want) && !d["last_sample"].is_null() {
                break;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(600),
            "the daemon never finished its first round"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let r = (kib_of(child.id(), "VmHWM:"), kib_of(child.id(), "VmRSS:"));
    let _ = child.kill();
    let _ = child.wait();
    r
}

fn daemon_memory(files: u64) {
    let base = tempfile::tempdir_in("/var/tmp").unwrap();
    let img = base.path().join("disk.img");
    let size = (files * 1200).max(256 << 20) + (512 << 20);
    std::fs::File::create(&img).unwrap().set_len(size).unwrap();
    let dev = run_ok(Command::new("losetup").args(["--find", "--show"]).arg(&img));
    let mnt = base.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let _g = LoopExt4 {
        mnt: mnt.clone(),
        dev: dev.clone(),
    };
    let inodes = (files + 10_000).to_string();
    run_ok(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-O", "inline_data", "-I", "256", "-N", &inodes])
            .arg(&dev),
    );
    run_ok(Command::new("mount").arg(&dev).arg(&mnt));
    let tree = mnt.join("tree");
    let empty = mnt.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let t = Instant::now();
    build_tree(&tree, files);
    println!(
        "daemon memory: {files} files of 100 B on ext4 (inline data), built in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let d0 = base.path().join("d0");
    let d1 = base.path().join("d1");
    std::fs::create_dir(&d0).unwrap();
    std::fs::create_dir(&d1).unwrap();
    let (empty_peak, empty_rss) = daemon_rss(&d0, &empty, 0);
    let t = Instant::now();
    let (peak, rss) = daemon_rss(&d1, &tree, files);
    println!(
        "  empty tree: peak {empty_peak} KiB, rss {empty_rss} KiB; {files} files: peak {peak} KiB, \
         rss {rss} KiB (first scan + sample in {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    println!(
        "  per file: {:.0} B peak, {:.0} B resident (target <= 200 B)",
        (peak.saturating_sub(empty_peak) * 1024) as f64 / files as f64,
        (rss.saturating_sub(empty_rss) * 1024) as f64 / files as f64
    );
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
    if std::env::var("REFRESHD_BENCH_ONLY").as_deref() == Ok("daemon") {
        daemon_memory(files);
        return;
    }
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
    build_tree(&tree, files);
    println!(
        "tree: {files} files of 100 B in dirs of 1000, built in {:.1} s",
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
