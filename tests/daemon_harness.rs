//! The daemon test harness: a real `refreshd run` process in a temp dir
//! (killed and reaped on drop), its config, refreshctl, /metrics, and
//! testbed drives with stale files.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod scene;
pub use scene::scene;

use crate::helpers::*;
use refreshd::inventory::now_secs;
use refreshd::sampler::MONTH;
use serde_json::Value;
use testbed::{Drive, DriveOptions, Model};

pub const MIB: usize = 1 << 20;

/// A port on 127.0.0.1 that nothing listens on, never handed out twice
/// in this run, and below the kernel's range for outgoing connections.
/// A port the kernel picked (bind to port 0) was free only at that
/// moment: between the pick and the daemon's bind, a client's connection
/// elsewhere in the suite (etcd, curl, the tests' scrapes) could take it
/// as its local port (under `.ci/stress`: "metrics_listen … Address
/// already in use"). Ports are counted up from a start spread by the
/// process id, each checked free.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const LAST: u32 = 32_767; // ip_local_port_range starts at 32768
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let spread = std::process::id() % 64 * 150;
    for _ in FIRST..=LAST {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (FIRST + (spread + n) % (LAST - FIRST + 1)) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 in {FIRST}..={LAST}");
}

/// A running daemon; killed (SIGKILL) on drop if still running.
pub struct Daemon {
    pub child: Child,
    pub dir: PathBuf,
    pub port: u16,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes a config for `tree` with short intervals; `extra` goes into
/// `[defaults]`, but for the keys of [`TOP_LEVEL`], which replace the
/// harness's own (a state dir on a filesystem of the test's).
pub fn config(dir: &Path, tree: &Path, port: u16, extra: &str) -> PathBuf {
    config_trees(dir, &[tree], port, extra)
}

/// The config's keys outside `[defaults]` that `extra` may set.
pub const TOP_LEVEL: [&str; 3] = ["state_dir", "control_socket", "metrics_listen"];

/// A config with one `[[paths]]` per tree.
pub fn config_trees(dir: &Path, trees: &[&Path], port: u16, extra: &str) -> PathBuf {
    let p = dir.join("refreshd.toml");
    let d = dir.display();
    let mut top = vec![
        format!("state_dir = \"{d}/state\""),
        format!("control_socket = \"{d}/run/control.sock\""),
        format!("metrics_listen = \"127.0.0.1:{port}\""),
    ];
    let mut defaults: Vec<String> = [
        "scan_interval = \"30s\"",
        "sample_interval = \"2s\"",
        "sample_bytes = \"32MiB\"",
        "min_free = \"64MiB\"",
        "rate = \"400MiB/s\"",
    ]
    .iter()
    .map(|l| l.to_string())
    .collect();
    let key = |l: &str| l.split('=').next().unwrap().trim().to_string();
    for line in extra.lines().filter(|l| !l.trim().is_empty()) {
        let k = key(line);
        let lines = if TOP_LEVEL.contains(&k.as_str()) {
            &mut top
        } else {
            &mut defaults
        };
        lines.retain(|l| key(l) != k);
        lines.push(line.to_string());
    }
    std::fs::write(
        &p,
        format!(
            "{top}\n\n[defaults]\n{defaults}\n{paths}",
            top = top.join("\n"),
            paths = trees
                .iter()
                .map(|t| format!("\n[[paths]]\npath = \"{}\"\n", t.display()))
                .collect::<String>(),
            defaults = defaults.join("\n"),
        ),
    )
    .unwrap();
    p
}

impl Daemon {
    pub fn start(dir: &Path, cfg: &Path, port: u16) -> Daemon {
        Daemon::start_with(dir, cfg, port, &[])
    }

    /// Like [`Daemon::start`], with extra environment variables.
    pub fn start_with(dir: &Path, cfg: &Path, port: u16, env: &[(&str, &str)]) -> Daemon {
        Daemon::spawn(dir, cfg, port, env, refreshd())
    }

    /// Like [`Daemon::start`], under a seccomp filter that answers
    /// `openat2` with `errno`, as systemd's does under
    /// `RestrictSUIDSGID=yes` (ENOSYS).
    pub fn start_refusing_openat2(dir: &Path, cfg: &Path, port: u16, errno: i32) -> Daemon {
        Daemon::start_refusing(
            dir,
            cfg,
            port,
            testbed::seccomp::Refusal {
                syscall: testbed::seccomp::SYS_OPENAT2,
                arg1: None,
                errno,
            },
        )
    }

    /// Like [`Daemon::start`], with at most `files` open descriptors
    /// (soft and hard: the daemon cannot raise it).
    pub fn start_with_file_limit(dir: &Path, cfg: &Path, port: u16, files: u64) -> Daemon {
        let mut cmd = refreshd();
        // SAFETY: setrlimit is async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                let l = libc::rlimit {
                    rlim_cur: files,
                    rlim_max: files,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Daemon::spawn(dir, cfg, port, &[], cmd)
    }

    /// Like [`Daemon::start`], under a seccomp filter with `refusal`.
    pub fn start_refusing(
        dir: &Path,
        cfg: &Path,
        port: u16,
        refusal: testbed::seccomp::Refusal,
    ) -> Daemon {
        let mut cmd = refreshd();
        // SAFETY: refuse_all is async-signal-safe (prctl on a stack array).
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                testbed::seccomp::refuse_all(&[refusal])
            });
        }
        Daemon::spawn(dir, cfg, port, &[], cmd)
    }

    pub fn spawn(
        dir: &Path,
        cfg: &Path,
        port: u16,
        env: &[(&str, &str)],
        mut cmd: Command,
    ) -> Daemon {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("daemon.log"))
            .unwrap();
        let child = cmd
            .args(["run", "--config"])
            .arg(cfg)
            .env("RUST_LOG", "refreshd=info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let d = Daemon {
            child,
            dir: dir.to_path_buf(),
            port,
        };
        let t = Instant::now();
        while !d.socket().exists() || d.ctl(&["status"]).0 != 0 {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "daemon did not come up: {}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        d
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("run/control.sock")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    /// Runs refreshctl; returns (exit code, stdout, stderr).
    pub fn ctl(&self, args: &[&str]) -> (i32, String, String) {
        captured(
            Command::new(crate::helpers::refreshctl())
                .arg("--socket")
                .arg(self.socket())
                .args(args)
                .output()
                .unwrap(),
        )
    }

    pub fn status(&self) -> Value {
        let (code, out, err) = self.ctl(&["--json", "status"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(&out).unwrap()["drives"][0].clone()
    }

    pub fn metrics(&self) -> String {
        http_get(self.port, "/metrics")
    }

    /// Status (JSON), `refreshctl status` (table) and the metrics of one
    /// round, read between two statuses with the same last round (a round
    /// may land between two reads), once that round's status satisfies
    /// `f`; up to `secs`.
    pub fn one_round_seen(
        &self,
        what: &str,
        secs: u64,
        f: impl Fn(&Value) -> bool,
    ) -> (Value, String, String) {
        let mut seen = None;
        self.wait_for(what, secs, |d| {
            let before = d.status();
            let (text, m) = (d.ctl(&["status"]).1, d.metrics());
            let after = d.status();
            if before["last_sample"] == after["last_sample"] && f(&after) {
                seen = Some((after, text, m));
            }
            seen.is_some()
        });
        seen.unwrap()
    }

    /// Waits until `f` holds, up to `secs`.
    pub fn wait_for(&self, what: &str, secs: u64, mut f: impl FnMut(&Daemon) -> bool) {
        let t = Instant::now();
        while !f(self) {
            assert!(
                t.elapsed() < Duration::from_secs(secs),
                "timed out waiting for {what}\nstatus: {:#}\nlog:\n{}",
                self.status(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// GET as Prometheus does (OpenMetrics asked for).
pub fn http_get(port: u16, path: &str) -> String {
    http_get_accepting(port, path, "application/openmetrics-text;version=1.0.0")
}

/// GET with an `Accept` header (`*/*`: the classic text format).
pub fn http_get_accepting(port: u16, path: &str, accept: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The value of a metric line `name{labels}` (labels must match exactly).
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A 1 GiB testbed drive with decay model `model`.
pub fn drive(dir: &Path, model: &str) -> Drive {
    let opts = DriveOptions {
        size: 1 << 30,
        model: Model::preset(model).unwrap(),
        ..DriveOptions::default()
    };
    Drive::up(dir, &opts).unwrap()
}

/// refreshd_refreshed_bytes_total of the (only) drive, 0 before any.
pub fn refreshed_bytes(m: &str) -> f64 {
    m.lines()
        .find(|l| l.starts_with("refreshd_refreshed_bytes_total"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
}

pub fn signal(d: &Daemon, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(d.child.id() as i32), sig).unwrap();
}

/// `n` files of `mib` MiB under `dir`, mtime 6 months ago.
pub fn stale_files(root: &Path, n: usize, mib: usize, seed: u64) -> Vec<PathBuf> {
    std::fs::create_dir_all(root).unwrap();
    (0..n)
        .map(|i| {
            let p = root.join(format!("seg{i}"));
            write_file(&p, &pattern(mib * MIB, seed + i as u64));
            set_mtime(&p, now_secs() - (6.0 * MONTH) as i64, 0);
            p
        })
        .collect()
}

/// Intervals (start, end) in seconds of the day between "refresh starts"
/// and "refresh ends" in a daemon's log, of `device` only if given (an
/// open one ends never).
pub fn refresh_intervals(log: &str, device: Option<&str>) -> Vec<(f64, f64)> {
    let secs = |l: &str| -> Option<f64> {
        let hms = l
            .split_whitespace()
            .next()?
            .split('T')
            .nth(1)?
            .trim_end_matches('Z');
        let v: Vec<f64> = hms.split(':').filter_map(|x| x.parse().ok()).collect();
        (v.len() == 3).then(|| v[0] * 3600.0 + v[1] * 60.0 + v[2])
    };
    let tag = device.map(|d| format!("device={d}"));
    let mut out = vec![];
    let mut open = None;
    for l in log
        .lines()
        .filter(|l| tag.as_ref().is_none_or(|t| l.contains(t.as_str())))
    {
        if l.contains("refresh starts") {
            open = secs(l);
        } else if l.contains("refresh ends") {
            if let (Some(a), Some(b)) = (open.take(), secs(l)) {
                out.push((a, b));
            }
        }
    }
    if let Some(a) = open {
        out.push((a, f64::INFINITY));
    }
    out
}

/// The most intervals that overlap at one instant.
pub fn most_overlapping(intervals: &[(f64, f64)]) -> usize {
    let mut events: Vec<(f64, i32)> = intervals
        .iter()
        .flat_map(|&(a, b)| [(a, 1), (b, -1)])
        .collect();
    // Ends before starts at the same instant: touching is not overlapping.
    events.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let (mut now, mut max) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        max = max.max(now);
    }
    max as usize
}

/// Bytes refreshed over every drive of a daemon's scrape.
pub fn refreshed_total(m: &str) -> f64 {
    m.lines()
        .filter(|l| l.starts_with("refreshd_refreshed_bytes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Kills a process (SIGKILL, then reaped by the caller) at a moment its
/// recovery record for `file` vouches for the file's times (no write of
/// its own in flight, the record up to date): stopped first, killed only
/// when the record matches, else let go on for a moment and tried again.
/// A write io_uring had punted to its workers can still land as the dead
/// process's ring is torn down: the caller judges with [`record_vouches`]
/// after the reap (recovery then restores the times, or by design leaves
/// them).
pub fn kill_when_recoverable(pid: u32, state: &Path, file: &Path) {
    use nix::sys::signal::{kill, Signal};
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    let t = Instant::now();
    loop {
        kill(pid, Signal::SIGSTOP).unwrap();
        // In-flight I/O completes meanwhile; no new write is submitted.
        std::thread::sleep(Duration::from_millis(50));
        if record_vouches(state, file) {
            kill(pid, Signal::SIGKILL).unwrap();
            return;
        }
        kill(pid, Signal::SIGCONT).unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no moment at which the record vouched for {}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(7));
    }
}
