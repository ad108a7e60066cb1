//! A real etcd for the fleet tests: one member on 127.0.0.1 with free
//! ports and a temp data dir, killed on drop; stopped and started again on
//! the same data (as an outage); etcdctl against it; daemons joined to a
//! group; a watcher of who refreshes at once.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod certs;
use certs::make_certs;

use crate::daemon_harness::*;
use crate::helpers::*;

/// Whether etcd and etcdctl are installed; says why not (and fails under
/// REFRESHD_REQUIRE_PRIVILEGED_TESTS=1).
pub fn have_etcd(test: &str) -> bool {
    if !privileged(test) {
        return false;
    }
    let found = ["/usr/bin/etcd", "/usr/bin/etcdctl"]
        .iter()
        .all(|p| Path::new(p).exists());
    if !found {
        let why = "needs etcd and etcdctl (Debian: etcd-server etcd-client)";
        if std::env::var("REFRESHD_REQUIRE_PRIVILEGED_TESTS").as_deref() == Ok("1") {
            panic!("{test}: {why}");
        }
        skipped(test, why);
    }
    found
}

/// One etcd member, killed on drop.
pub struct Etcd {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub port: u16,
    peer: u16,
    args: Vec<String>,
    /// Certificates (CA, server, client) when it serves TLS.
    pub tls: Option<PathBuf>,
    /// Its name and `--initial-cluster` (one member by default).
    name: String,
    cluster: Option<String>,
}

impl Etcd {
    pub fn start() -> Etcd {
        Etcd::start_with(&[])
    }

    /// With extra command-line flags.
    pub fn start_with(args: &[&str]) -> Etcd {
        let mut e = Etcd {
            child: None,
            dir: tempfile::tempdir_in("/var/tmp").unwrap(),
            port: free_port(),
            peer: free_port(),
            args: args.iter().map(|a| a.to_string()).collect(),
            tls: None,
            name: "t".into(),
            cluster: None,
        };
        e.up();
        e
    }

    /// A cluster of `n` members, all answering.
    pub fn cluster(n: usize) -> Vec<Etcd> {
        let mut members: Vec<Etcd> = (0..n)
            .map(|i| Etcd {
                child: None,
                dir: tempfile::tempdir_in("/var/tmp").unwrap(),
                port: free_port(),
                peer: free_port(),
                args: vec![],
                tls: None,
                name: format!("m{i}"),
                cluster: None,
            })
            .collect();
        let cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        for m in &mut members {
            m.cluster = Some(cluster.clone());
            m.spawn();
        }
        for m in &members {
            m.wait_healthy();
        }
        members
    }

    /// Serving TLS only, with client certificates required, under a CA of
    /// its own (in `certs`: ca.pem, server.pem/key, client.pem/key).
    pub fn start_tls() -> Etcd {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let certs = dir.path().join("certs");
        make_certs(&certs);
        let file = |n: &str| certs.join(n).display().to_string();
        let mut e = Etcd {
            child: None,
            dir,
            port: free_port(),
            peer: free_port(),
            args: vec![
                format!("--cert-file={}", file("server.pem")),
                format!("--key-file={}", file("server.key")),
                format!("--trusted-ca-file={}", file("ca.pem")),
                "--client-cert-auth".into(),
            ],
            tls: Some(certs),
            name: "t".into(),
            cluster: None,
        };
        e.up();
        e
    }

    /// Turns authentication on: user `refreshd` (password `password`) may
    /// read and write under /refreshd/; etcdctl then runs as root.
    pub fn enable_auth(&self, password: &str) {
        let pw = format!("--new-user-password={password}");
        for args in [
            &["user", "add", "root", "--new-user-password=rootpw"][..],
            &["role", "add", "refresher"],
            &[
                "role",
                "grant-permission",
                "refresher",
                "--prefix=true",
                "readwrite",
                "/refreshd/",
            ],
            &["user", "add", "refreshd", &pw],
            &["user", "grant-role", "refreshd", "refresher"],
            &["auth", "enable"],
        ] {
            let out = self.ctl(args);
            assert!(
                out.status.success(),
                "etcdctl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::fs::write(self.dir.path().join("auth"), b"").unwrap();
    }

    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Starts the member (again, on the same data), and waits until it
    /// answers.
    pub fn up(&mut self) {
        self.spawn();
        self.wait_healthy();
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "already running");
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .unwrap();
        let cluster = self
            .cluster
            .clone()
            .unwrap_or_else(|| format!("{}={peer}", self.name));
        let child = Command::new("/usr/bin/etcd")
            .arg(format!("--name={}", self.name))
            .arg(format!(
                "--data-dir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={}", self.endpoint()))
            .arg(format!("--advertise-client-urls={}", self.endpoint()))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={cluster}"))
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    fn wait_healthy(&self) {
        let t = Instant::now();
        while !self.ctl(&["endpoint", "health"]).status.success() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "etcd did not come up: {}",
                std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the member (SIGKILL: an outage, not a goodbye).
    pub fn down(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Freezes the member (SIGSTOP): connections stay open and nothing
    /// answers, as in a network partition.
    pub fn freeze(&self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
    }

    pub fn thaw(&self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = self.child.as_ref().expect("running").id() as i32;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).unwrap();
    }

    /// etcdctl (v3 API) against this member.
    pub fn ctl(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new("/usr/bin/etcdctl");
        if self.dir.path().join("auth").exists() {
            cmd.arg("--user=root:rootpw");
        }
        if let Some(c) = &self.tls {
            cmd.arg(format!("--cacert={}", c.join("ca.pem").display()))
                .arg(format!("--cert={}", c.join("client.pem").display()))
                .arg(format!("--key={}", c.join("client.key").display()));
        }
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoint()))
            .arg("--dial-timeout=1s")
            .arg("--command-timeout=2s")
            .args(args)
            .output()
            .unwrap()
    }

    /// The group's queue keys, first come first.
    pub fn queue(&self, group: &str) -> Vec<String> {
        let out = self.ctl(&[
            "get",
            "--prefix",
            "--keys-only",
            &format!("/refreshd/{group}/queue/"),
        ]);
        // A timed-out etcdctl prints nothing: that is no empty queue.
        assert!(
            out.status.success(),
            "etcdctl get {group}'s queue: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut keys: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        keys.sort();
        keys
    }

    /// Waits until every key of `group`'s queue is deleted (every slot
    /// given back), failing after `secs` with the keys still there.
    pub fn wait_queue_empty(&self, group: &str, secs: u64) {
        self.wait_queue_empty_or(group, secs, String::new);
    }

    /// [`Etcd::wait_queue_empty`], with `why()` (the daemons' side of
    /// it) in the failure.
    pub fn wait_queue_empty_or(&self, group: &str, secs: u64, why: impl Fn() -> String) {
        let t = Instant::now();
        loop {
            let keys = self.queue(group);
            if keys.is_empty() {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(secs),
                "slots never given back: {keys:?} still queued in {group} after {secs} s{}",
                why()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.thaw();
        }
        self.down();
    }
}

/// The `[coordination]` section for daemon `name`.
pub fn coordination(etcd: &str, group: &str, name: &str, max: usize, extra: &str) -> String {
    format!(
        "\n[coordination]\netcd_endpoints = [\"{etcd}\"]\ngroup = \"{group}\"\nname = \"{name}\"\nmax_concurrent = {max}\nlease_ttl = \"5s\"\n{extra}"
    )
}

/// A daemon's config for `tree` with a `[coordination]` section.
pub fn fleet_config(dir: &Path, tree: &Path, port: u16, settings: &str, section: &str) -> PathBuf {
    let p = config(dir, tree, port, settings);
    let mut text = std::fs::read_to_string(&p).unwrap();
    // Top-level keys must come before the first table: insert the section
    // at the end (it is a table itself).
    text.push_str(section);
    std::fs::write(&p, text).unwrap();
    p
}

/// Samples the daemons' metrics every 100 ms: the most drives seen
/// refreshing at once, and whether each has refreshed yet.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    pub max_at_once: Arc<Mutex<usize>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    pub fn start(ports: Vec<u16>) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let max_at_once = Arc::new(Mutex::new(0));
        let (s, m) = (stop.clone(), max_at_once.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let n = ports.iter().filter(|p| refreshing(**p)).count();
                let mut max = m.lock().unwrap();
                *max = (*max).max(n);
                drop(max);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Watcher {
            stop,
            max_at_once,
            thread: Some(thread),
        }
    }

    pub fn max(&self) -> usize {
        *self.max_at_once.lock().unwrap()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether the daemon at `port` has a refresh running (its engine).
pub fn refreshing(port: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    use std::io::{Read, Write};
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if write!(s, "GET /metrics HTTP/1.0\r\n\r\n").is_err() {
        return false;
    }
    let mut m = String::new();
    let _ = s.read_to_string(&mut m);
    m.lines()
        .any(|l| l.starts_with("refreshd_refresh_in_progress{") && l.ends_with(" 1"))
}
