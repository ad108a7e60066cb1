//! A minimal Debian booted under a real systemd, for the package's tests:
//! the root is made once by `tests/systemd/debian-root.sh` (debootstrap)
//! and cached as a tarball, unpacked afresh per test, and booted with
//! `systemd-nspawn -b --register=no --keep-unit`. Commands run inside with
//! `nsenter` into the container's PID 1. Drop powers it off (kills it if
//! it does not go) and deletes the root, also when the test panics.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Where the root tarball is cached between runs (rebuilt when missing).
pub const CACHE_DIR: &str = "/var/cache/refreshd-tests";
/// Bump when `debian-root.sh` changes what the root holds.
const ROOT_VERSION: u32 = 1;

/// The cached root tarball, made if missing (serialised by a lock file,
/// so two test processes do not both build it).
pub fn debian_root() -> Result<PathBuf, String> {
    std::fs::create_dir_all(CACHE_DIR).map_err(|e| format!("{CACHE_DIR}: {e}"))?;
    let tar = Path::new(CACHE_DIR).join(format!("debian-bookworm-v{ROOT_VERSION}.tar"));
    let lock = std::fs::File::create(Path::new(CACHE_DIR).join(".lock"))
        .map_err(|e| format!("lock: {e}"))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| format!("lock: {e}"))?;
    if tar.exists() {
        return Ok(tar);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/systemd/debian-root.sh");
    let out = Command::new("sh")
        .arg(&script)
        .arg(&tar)
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "building the Debian root failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(tar)
}

/// The newest `target/debian/refreshd_*.deb` (what `.ci/run` builds).
pub fn built_package() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/debian");
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "deb")
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("refreshd_"))
        })
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
}

/// A booted container.
pub struct Container {
    /// The unpacked root (the host sees the container's files here).
    pub root: tempfile::TempDir,
    nspawn: Child,
    /// The container's PID 1, as the host numbers it.
    pub leader: i32,
    pub log: PathBuf,
}

impl Container {
    /// Unpacks `tar` and boots it with `binds` ("host:inside" pairs).
    pub fn boot(tar: &Path, binds: &[(&Path, &str)]) -> Container {
        let root = tempfile::Builder::new()
            .prefix("refreshd-nspawn-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let ok = Command::new("tar")
            .arg("-C")
            .arg(root.path())
            .arg("-xf")
            .arg(tar)
            .status()
            .unwrap();
        assert!(ok.success(), "unpacking {}", tar.display());
        let log = root.path().with_extension("log");
        let mut cmd = Command::new("systemd-nspawn");
        cmd.arg("-D")
            .arg(root.path())
            .args(["-b", "--register=no", "--keep-unit", "--console=passive"])
            // nspawn's own seccomp filter leaves out fanotify (its
            // allow list names it as knowingly excluded, EPERM), bpf and
            // perf_event_open: a host's systemd has no such filter, so the
            // container allows what a host allows and the unit's own
            // filter is what is tested.
            .arg("--system-call-filter=fanotify_init fanotify_mark bpf perf_event_open")
            // A host's systemd has every capability to bound a unit by;
            // nspawn's default set lacks these two (the unit's drop-in
            // for timed reads adds them: tests/home/timed.rs).
            .arg("--capability=CAP_BPF,CAP_PERFMON")
            .arg(format!("--machine=refreshd-test-{}", std::process::id()));
        for (host, inside) in binds {
            cmd.arg(format!("--bind={}:{inside}", host.display()));
        }
        let nspawn = cmd
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(log.with_extension("err")).unwrap())
            .spawn()
            .unwrap();
        let mut c = Container {
            root,
            nspawn,
            leader: 0,
            log,
        };
        c.leader = c.find_leader();
        // Booted: the manager says so (degraded is fine: no network units).
        let t = Instant::now();
        loop {
            let state = c.exec(&["systemctl", "is-system-running"]);
            let s = String::from_utf8_lossy(&state.stdout).trim().to_string();
            if s == "running" || s == "degraded" {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(90),
                "the container did not boot ({s}): {}",
                c.console()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        // A host's systemd mounts tracefs at boot (sys-kernel-tracing.mount);
        // in a container it does not, and nspawn's --bind= of the host's
        // binds sysfs's empty directory under it. Timing reads reads the
        // block tracepoints' ids there.
        c.ok("mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing");
        c
    }

    /// The systemd that nspawn started (its child, PID 1 inside).
    fn find_leader(&mut self) -> i32 {
        let t = Instant::now();
        loop {
            if let Ok(Some(st)) = self.nspawn.try_wait() {
                panic!("systemd-nspawn exited ({st}): {}", self.console());
            }
            let pid = self.nspawn.id();
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .unwrap_or_default();
            for c in children.split_whitespace() {
                let comm = std::fs::read_to_string(format!("/proc/{c}/comm")).unwrap_or_default();
                if comm.trim() == "systemd" {
                    return c.parse().unwrap();
                }
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "no systemd in the container: {}",
                self.console()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What nspawn printed (the boot's console).
    pub fn console(&self) -> String {
        let out = std::fs::read_to_string(&self.log).unwrap_or_default();
        let err = std::fs::read_to_string(self.log.with_extension("err")).unwrap_or_default();
        format!("{out}\n{err}")
    }

    /// Runs `args` inside (all of the container's namespaces).
    pub fn exec(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .arg("-t")
            .arg(self.leader.to_string())
            .args(["-a", "--"])
            .arg("/usr/bin/env")
            .args(["-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"])
            .args(args)
            .output()
            .unwrap()
    }

    /// Runs a shell script inside; returns (exit code, stdout, stderr).
    pub fn sh(&self, script: &str) -> (i32, String, String) {
        let out = self.exec(&["sh", "-c", script]);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Like [`Container::sh`], and the script must succeed.
    pub fn ok(&self, script: &str) -> String {
        let (code, out, err) = self.sh(script);
        assert_eq!(code, 0, "{script}: exit {code}\n{out}\n{err}");
        out
    }

    /// A path inside, as the host sees it.
    pub fn path(&self, inside: &str) -> PathBuf {
        self.root.path().join(inside.trim_start_matches('/'))
    }

    /// Waits up to `secs` for `cond`; the panic names what never came and
    /// shows `context()`.
    pub fn wait_for(&self, what: &str, secs: u64, mut cond: impl FnMut(&Container) -> bool) {
        let t = Instant::now();
        while !cond(self) {
            assert!(
                t.elapsed() < Duration::from_secs(secs),
                "{what}: not within {secs} s\n{}",
                self.sh("journalctl -b --no-pager -n 60 -u 'refreshd*'").1
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // A clean poweroff first (units stop, mounts go); then the hammer.
        let _ = Command::new("kill")
            .args(["-s", "SIGRTMIN+4"]) // systemd: poweroff
            .arg(self.leader.to_string())
            .status();
        let t = Instant::now();
        let mut stopped = false;
        while t.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(_)) = self.nspawn.try_wait() {
                stopped = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !stopped {
            let _ = self.nspawn.kill();
            let _ = self.nspawn.wait();
        }
        // The console logs live beside the root: kept for a failed test
        // (its message names them), removed otherwise.
        if std::thread::panicking() {
            eprintln!("container logs kept: {}(.err)", self.log.display());
        } else {
            let _ = std::fs::remove_file(&self.log);
            let _ = std::fs::remove_file(self.log.with_extension("err"));
        }
    }
}
