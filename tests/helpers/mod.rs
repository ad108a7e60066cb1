//! Test helpers: root gating, loop-mounted filesystems that clean up on
//! every path, file fingerprints (content, size, blocks, holes, times,
//! mode, xattrs), and running the real binary.

#![allow(dead_code)]

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use refreshd::engine::safety::plan::seek_data_ranges;

pub mod assets;
pub mod kernel;
pub mod nspawn;
pub mod oneshot;
pub mod stamps;
pub use oneshot::*;

/// The `refreshctl` binary. It is another package of the workspace, so
/// cargo builds it for `cargo test --workspace` (its own tests need it)
/// and leaves it beside `refreshd`.
pub fn refreshctl() -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_refreshd")).with_file_name("refreshctl");
    assert!(
        exe.exists(),
        "{} is not built: run the tests with `cargo test --workspace` (or `cargo build -p refreshctl` first)",
        exe.display()
    );
    exe
}

/// True when privileged tests may run. Without root they skip with a
/// printed reason, unless `REFRESHD_REQUIRE_PRIVILEGED_TESTS=1` (CI), where
/// they fail instead.
pub fn privileged(test: &str) -> bool {
    let root = nix::unistd::Uid::effective().is_root();
    let have_loop = Path::new("/dev/loop-control").exists();
    if root && have_loop {
        return true;
    }
    let why = if !root {
        "not root"
    } else {
        "no /dev/loop-control"
    };
    if std::env::var("REFRESHD_REQUIRE_PRIVILEGED_TESTS").as_deref() == Ok("1") {
        panic!(
            "{test}: privileged test cannot run ({why}) but REFRESHD_REQUIRE_PRIVILEGED_TESTS=1"
        );
    }
    skipped(test, &format!("needs root and loop devices ({why})"));
    false
}

/// Says a test skipped, on the real stderr: the test harness captures
/// `eprintln!` of passing tests, and a skip must not look like a silent
/// "ok". `.ci/run` counts these lines.
pub fn skipped(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A filesystem on a loop device over a sparse image in a temp dir.
/// Drop unmounts, detaches and deletes, also when the test panics.
pub struct LoopFs {
    pub dir: tempfile::TempDir,
    pub mnt: PathBuf,
    pub dev: String,
    pub kind: &'static str,
    mounted: bool,
}

impl LoopFs {
    pub fn new(kind: &'static str, size_mib: u64) -> LoopFs {
        Self::with_options(kind, size_mib, false)
    }

    /// `direct_io`: the loop device bypasses the host page cache.
    pub fn with_options(kind: &'static str, size_mib: u64, direct_io: bool) -> LoopFs {
        Self::with_mount_options(kind, size_mib, direct_io, None)
    }

    /// Like [`LoopFs::with_options`], mounted with `-o opts`.
    pub fn with_mount_options(
        kind: &'static str,
        size_mib: u64,
        direct_io: bool,
        opts: Option<&str>,
    ) -> LoopFs {
        let dir = tempfile::Builder::new()
            .prefix("refreshd-test-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let img = dir.path().join("disk.img");
        File::create(&img).unwrap().set_len(size_mib << 20).unwrap();
        let mut cmd = Command::new("losetup");
        cmd.args(["--find", "--show"]);
        if direct_io {
            cmd.arg("--direct-io=on");
        }
        let out = run(cmd.arg(&img));
        let dev = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        // From here on Drop cleans up.
        let mut me = LoopFs {
            dir,
            mnt,
            dev,
            kind,
            mounted: false,
        };
        // A reused loop device keeps the scheduler a benchmark gave it.
        testbed::host::pin_queue(&me.dev).unwrap();
        // ext4's inode tables and journal are zeroed at mkfs, not by the
        // kernel's lazy init after mount: its background writes (16 MiB in
        // the first seconds on 256 MiB, longer on a busy machine) would be
        // counted as ours by tests that measure what reached the device.
        let eager = "lazy_itable_init=0,lazy_journal_init=0";
        let mkfs = match kind {
            "ext4" => vec!["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-E", eager],
            "ext4j" => vec!["mkfs.ext4", "-q", "-F", "-E", eager],
            "xfs" => vec!["mkfs.xfs", "-q", "-f"],
            "btrfs" => vec!["mkfs.btrfs", "-q", "-f"],
            other => panic!("unknown filesystem {other}"),
        };
        run(Command::new(mkfs[0]).args(&mkfs[1..]).arg(&me.dev));
        let mut mount = Command::new("mount");
        if let Some(o) = opts {
            mount.args(["-o", o]);
        }
        run(mount.arg(&me.dev).arg(&me.mnt));
        me.mounted = true;
        me
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Sectors written to the loop device so far (`/sys/block/loopN/stat`).
    pub fn bytes_written(&self) -> u64 {
        let name = Path::new(&self.dev).file_name().unwrap().to_str().unwrap();
        let stat = fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap();
        let sectors: u64 = stat.split_whitespace().nth(6).unwrap().parse().unwrap();
        sectors * 512
    }

    /// The loop device's "major:minor".
    pub fn dev_numbers(&self) -> String {
        use std::os::unix::fs::MetadataExt;
        let rdev = fs::metadata(&self.dev).unwrap().rdev();
        format!("{}:{}", rustix::fs::major(rdev), rustix::fs::minor(rdev))
    }

    /// Flushes everything, so counters and layouts are settled.
    pub fn sync(&self) {
        let f = File::open(&self.mnt).unwrap();
        nix::unistd::syncfs(&f).unwrap();
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted {
            testbed::host::unmount(&self.mnt);
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

/// Deterministic, position-dependent content.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub fn write_file(path: &Path, data: &[u8]) {
    let mut f = File::create(path).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
}

/// Everything the safety contract says must not change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    pub hash: u64,
    pub size: u64,
    pub blocks: u64,
    pub data_ranges: Vec<std::ops::Range<u64>>,
    pub mtime: (i64, i64),
    pub atime: (i64, i64),
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub xattrs: Vec<(String, Vec<u8>)>,
}

/// Everything refreshd must leave as it was. Read with `O_NOATIME` (the
/// tests run as root): reading it does not move the atime it records.
pub fn fingerprint(path: &Path) -> Fingerprint {
    let md = fs::symlink_metadata(path).unwrap();
    let mut f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOATIME)
        .open(path)
        .unwrap();
    let mut data = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut data).unwrap();
    let data_ranges = seek_data_ranges(std::os::fd::AsFd::as_fd(&f), md.len()).unwrap();
    Fingerprint {
        hash: xxhash_rust::xxh3::xxh3_64(&data),
        size: md.len(),
        blocks: md.blocks(),
        data_ranges,
        mtime: (md.mtime(), md.mtime_nsec()),
        atime: (md.atime(), md.atime_nsec()),
        mode: md.permissions().mode(),
        uid: md.uid(),
        gid: md.gid(),
        xattrs: xattrs(path),
    }
}

pub fn xattrs(path: &Path) -> Vec<(String, Vec<u8>)> {
    let mut names = vec![0u8; 4096];
    let n = rustix::fs::listxattr(path, &mut names).unwrap();
    let mut out: Vec<(String, Vec<u8>)> = names[..n]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|name| {
            let name = String::from_utf8_lossy(name).to_string();
            let mut v = vec![0u8; 4096];
            let m = rustix::fs::getxattr(path, name.as_str(), &mut v).unwrap();
            v.truncate(m);
            (name, v)
        })
        .collect();
    out.sort();
    out
}

pub fn set_mtime(path: &Path, secs: i64, nsec: i64) {
    let ts = rustix::fs::Timespec {
        tv_sec: secs,
        tv_nsec: nsec,
    };
    let times = rustix::fs::Timestamps {
        last_access: ts,
        last_modification: ts,
    };
    rustix::fs::utimensat(rustix::fs::CWD, path, &times, rustix::fs::AtFlags::empty()).unwrap();
}

/// Bytes of `path` in FIEMAP extents carrying `flag`.
pub fn fiemap_bytes(path: &Path, flag: u32) -> u64 {
    let f = File::open(path).unwrap();
    refreshd::io::syscalls::fiemap(std::os::fd::AsFd::as_fd(&f))
        .unwrap()
        .iter()
        .filter(|e| e.flags & flag != 0)
        .map(|e| e.length)
        .sum()
}

/// Runs `chattr FLAG path` now and `chattr -FLAG` on drop.
pub struct Chattr<'a>(&'a Path, &'static str);

impl<'a> Chattr<'a> {
    pub fn set(p: &'a Path, flag: &'static str) -> Chattr<'a> {
        run(Command::new("chattr").arg(format!("+{flag}")).arg(p));
        Chattr(p, flag)
    }
}

impl Drop for Chattr<'_> {
    fn drop(&mut self) {
        let _ = Command::new("chattr")
            .arg(format!("-{}", self.1))
            .arg(self.0)
            .status();
    }
}

/// `refreshd` as the shipped unit runs it: without CAP_FSETID (dropped
/// from the bounding set, so root's effective set lacks it too).
pub fn refreshd_without_fsetid() -> Command {
    let plain = refreshd();
    let mut c = Command::new("setpriv");
    c.arg("--bounding-set=-fsetid").arg(plain.get_program());
    for (k, v) in plain.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    c
}

/// Unmounts (lazily if busy) on drop, also when the test panics.
pub struct MountGuard(pub PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        testbed::host::unmount(&self.0);
    }
}

/// The recovery journal's records under `state` (in each process's own
/// `journal/run-*` directory; not the locks).
pub fn journal_records(state: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    let Ok(owners) = fs::read_dir(state.join("journal")) else {
        return out;
    };
    for o in owners.flatten() {
        if !o.path().is_dir() || o.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        for r in fs::read_dir(o.path()).into_iter().flatten().flatten() {
            if !r.file_name().to_string_lossy().starts_with('.') {
                out.push(r.path());
            }
        }
    }
    out.sort();
    out
}

/// Whether a journal record under `state` vouches for `file` as it is
/// now: its (mtime, ctime) exactly what refreshd's own writes left (then
/// recovery restores its times). Matched by inode (a record written in a
/// container names the file by the container's path).
pub fn record_vouches(state: &Path, file: &Path) -> bool {
    let m = fs::metadata(file).unwrap();
    let mtime = refreshd::clock::Timestamp::new(m.mtime(), m.mtime_nsec() as u32);
    let ctime = refreshd::clock::Timestamp::new(m.ctime(), m.ctime_nsec() as u32);
    journal_records(state).iter().any(|r| {
        refreshd::engine::safety::journal::read_record(r)
            .is_ok_and(|e| e.taken.ino == m.ino() && e.vouches_for(mtime, ctime))
    })
}

static PAGE_CACHE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Held by a test that measures what is in the page cache: no other test
/// of this binary drops the caches meanwhile.
pub fn page_cache_lock() -> std::sync::MutexGuard<'static, ()> {
    PAGE_CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drops the page cache (a global knob), but not while a test measures it.
pub fn drop_caches() {
    let _held = page_cache_lock();
    testbed::measure::drop_caches();
}

/// The testbed device offset that holds byte `off` of `path` on drive
/// `d`: where a fault must go to be met by a read of that byte. FIEMAP
/// gives the extent's address; on ext4 and XFS that is the device
/// offset, on btrfs it is an address in the filesystem's logical space,
/// which each chunk maps to the device (the same numbers for the first
/// data chunk of a fresh filesystem, not for the next one: a fault placed
/// at the logical address lands in free space and is never met).
pub fn device_offset(d: &testbed::Drive, path: &Path, off: u64) -> u64 {
    let f = std::fs::File::open(path).unwrap();
    let ext = refreshd::io::syscalls::fiemap(std::os::fd::AsFd::as_fd(&f))
        .unwrap()
        .into_iter()
        .find(|e| e.logical <= off && off < e.logical + e.length)
        .unwrap_or_else(|| panic!("no extent of {} covers offset {off}", path.display()));
    let addr = ext.physical + (off - ext.logical);
    let fs = rustix::fs::fstatfs(&f).unwrap();
    if fs.f_type as u64 == BTRFS_SUPER_MAGIC {
        btrfs_device_offset(&d.loop_dev, addr)
    } else {
        addr
    }
}

const BTRFS_SUPER_MAGIC: u64 = 0x9123_683e;

/// The device offset of a btrfs logical address (`btrfs-map-logical`).
fn btrfs_device_offset(dev: &str, logical: u64) -> u64 {
    let out = run(Command::new("btrfs-map-logical").args(["-l", &logical.to_string(), dev]));
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .skip_while(|w| *w != "physical")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("btrfs-map-logical -l {logical} {dev}: {text}"))
}
