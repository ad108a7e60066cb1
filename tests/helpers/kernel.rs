//! Guards for kernel state that tests change: a sysctl (restored on drop),
//! a block-I/O write limit for this test process (a cgroup, removed on
//! drop, the process moved back first), the host's DAMON reclaim
//! (paused, started again on drop) and tracefs (mounted where it is not,
//! unmounted on drop). All also on panic.

use std::fs;
use std::path::{Path, PathBuf};

/// Sets a sysctl under /proc/sys; puts the old value back on drop.
pub struct Sysctl {
    path: PathBuf,
    old: String,
}

impl Sysctl {
    pub fn set(name: &str, value: &str) -> Sysctl {
        let path = Path::new("/proc/sys").join(name.replace('.', "/"));
        let old = fs::read_to_string(&path).unwrap();
        fs::write(&path, value).unwrap();
        Sysctl { path, old }
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = fs::write(&self.path, self.old.trim());
    }
}

/// The host's DAMON monitors paused while held. This VM runs a DAMON
/// `pageout` scheme (`/sys/kernel/mm/damon/admin/kdamonds/*`) that reclaims
/// page cache in physical regions it judges cold — pages read a moment
/// ago included, when they landed in such a region. A test that measures
/// which pages refreshd leaves cached pauses it, so that only refreshd
/// and the test touch the cache; the monitors are started again (with the
/// parameters still in sysfs) on drop.
pub struct DamonPaused {
    paused: Vec<PathBuf>,
}

impl DamonPaused {
    pub fn new() -> DamonPaused {
        let mut paused = vec![];
        let dirs = fs::read_dir("/sys/kernel/mm/damon/admin/kdamonds")
            .into_iter()
            .flatten();
        for dir in dirs.flatten() {
            let state = dir.path().join("state");
            let on = fs::read_to_string(&state).is_ok_and(|s| s.trim() == "on");
            if on && fs::write(&state, "off").is_ok() {
                paused.push(state);
            }
        }
        DamonPaused { paused }
    }
}

impl Drop for DamonPaused {
    fn drop(&mut self) {
        for state in &self.paused {
            if let Err(e) = fs::write(state, "on") {
                eprintln!("DAMON left off: writing on to {}: {e}", state.display());
            }
        }
    }
}

/// Which cgroup hierarchy carries block-I/O limits here.
enum Hierarchy {
    /// cgroup v1 `blkio`, mounted at this path.
    V1(PathBuf),
    /// cgroup v2 with the `io` controller, at this path.
    V2(PathBuf),
}

fn hierarchy() -> Hierarchy {
    let v1 = Path::new("/sys/fs/cgroup/blkio");
    if v1.join("cgroup.procs").exists() {
        return Hierarchy::V1(v1.to_path_buf());
    }
    for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let c = fs::read_to_string(Path::new(root).join("cgroup.controllers")).unwrap_or_default();
        if c.split_whitespace().any(|x| x == "io") {
            return Hierarchy::V2(PathBuf::from(root));
        }
    }
    panic!("no cgroup hierarchy with block-I/O limits (blkio v1 or io v2) on this machine");
}

/// The root of the block-I/O hierarchy's `cgroup.procs`: a child process
/// writes its pid there (in `pre_exec`) to escape the limit.
pub fn unlimited_procs() -> PathBuf {
    match hierarchy() {
        Hierarchy::V1(p) | Hierarchy::V2(p) => p.join("cgroup.procs"),
    }
}

/// This process's writes to one device limited to `bps`; undone on drop.
pub struct WriteLimit {
    dir: PathBuf,
    back: PathBuf,
}

impl WriteLimit {
    pub fn new(dev: &str, bps: u64) -> WriteLimit {
        let (root, v1) = match hierarchy() {
            Hierarchy::V1(p) => (p, true),
            Hierarchy::V2(p) => (p, false),
        };
        let me = std::process::id();
        // Where this process is now in that hierarchy.
        let own = fs::read_to_string("/proc/self/cgroup").unwrap();
        let rel = own
            .lines()
            .find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
                let hit = if v1 {
                    ctrl.split(',').any(|c| c == "blkio")
                } else {
                    ctrl.is_empty()
                };
                hit.then(|| path.trim_start_matches('/').to_string())
            })
            .unwrap_or_default();
        let back = root.join(rel).join("cgroup.procs");
        if !v1 {
            let _ = fs::write(root.join("cgroup.subtree_control"), "+io");
        }
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = root.join(format!("refreshd-test-{me}-{n}"));
        fs::create_dir(&dir).unwrap();
        let limit = WriteLimit { dir, back };
        if v1 {
            fs::write(
                limit.dir.join("blkio.throttle.write_bps_device"),
                format!("{dev} {bps}"),
            )
            .unwrap();
        } else {
            fs::write(limit.dir.join("io.max"), format!("{dev} wbps={bps}")).unwrap();
        }
        fs::write(limit.dir.join("cgroup.procs"), me.to_string()).unwrap();
        limit
    }
}

impl Drop for WriteLimit {
    fn drop(&mut self) {
        let _ = fs::write(&self.back, std::process::id().to_string());
        // io_uring's worker threads of a closed ring exit asynchronously and
        // stay in the cgroup until then: retry for a while.
        for _ in 0..500 {
            if fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("could not remove test cgroup {}", self.dir.display());
    }
}

/// tracefs at `/sys/kernel/tracing`, for timing reads
/// (`refreshd::io::block_reads` reads the tracepoints' ids and formats
/// there): mounted while held if the host has not mounted it (a host
/// without systemd, as this one), then unmounted. One holder at a time
/// in a process (another's unmount would pull it from under a start).
pub struct Tracefs {
    mounted: bool,
    _one: std::sync::MutexGuard<'static, ()>,
}

impl Tracefs {
    pub fn new() -> Tracefs {
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let dir = Path::new("/sys/kernel/tracing");
        let mounted = !dir.join("events").exists();
        if mounted {
            crate::helpers::run(
                std::process::Command::new("mount")
                    .args(["-t", "tracefs", "tracefs"])
                    .arg(dir),
            );
        }
        Tracefs { mounted, _one: one }
    }
}

impl Drop for Tracefs {
    fn drop(&mut self) {
        if self.mounted {
            let _ = std::process::Command::new("umount")
                .arg("/sys/kernel/tracing")
                .status();
        }
    }
}
