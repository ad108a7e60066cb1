//! The package where it lives: the `.deb` `.ci/run` builds, installed with
//! `dpkg -i` into a minimal Debian booted under a real systemd
//! (`systemd-nspawn -b`), refreshing an ext4 filesystem bound at
//! `/srv/index` — under the shipped unit's seccomp filter, capability set,
//! watchdog and state directory, not a lab daemon. Every file's bytes and
//! times are checked from the host.
//!
//! First a pass with the filter switched to logging (`SystemCallLog=`):
//! every call the daemon makes that the shipped filter would refuse shows
//! in the kernel log, and there must be none. Then the shipped unit as it
//! is: READY, judging, `now --wait`, metrics, a rejected reload, stop and
//! resume, the watchdog, the one-shot template and its recovery journal,
//! an upgrade with `dpkg -i` mid-refresh, the timed-reads drop-in beside a
//! reader, and a stop that leaves nothing.
//!
//! Needs root, `systemd-nspawn` (Debian `systemd-container`), `debootstrap`
//! and a reachable Debian mirror the first time (the root is cached in
//! `/var/cache/refreshd-tests`); see README "Testing".

mod lifecycle;
mod sandbox;
mod timed;
use lifecycle::*;
use sandbox::every_call_is_allowed;
use timed::reads_are_timed_with_the_drop_in_only;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::daemon_harness::{free_port, stale_files, MIB};
use crate::helpers::nspawn::{built_package, debian_root, Container};
use crate::helpers::*;

const TEST: &str = "privileged_the_package_under_a_real_systemd";

fn needs(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        require_or_skip(&format!("`{tool}` is not installed"));
    }
    found
}

fn require_or_skip(why: &str) {
    if std::env::var("REFRESHD_REQUIRE_PRIVILEGED_TESTS").as_deref() == Ok("1") {
        panic!("{TEST}: {why}");
    }
    skipped(TEST, why);
}

/// Kills the process holding a file open on drop.
struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The files, and how each must look at the end.
struct Tree {
    fs: LoopFs,
    files: Vec<(PathBuf, Fingerprint)>,
}

impl Tree {
    /// Stale files at the top and in subdirectories, one held open by a
    /// process on the host (relocated, not rewritten), one fresh file.
    fn new() -> (Tree, Holder) {
        let fs = LoopFs::new("ext4", 768);
        let mut paths = stale_files(&fs.path("top"), 2, 4, 1);
        paths.extend(stale_files(&fs.path("sub/deeper"), 2, 4, 3));
        let held = stale_files(&fs.path("sub/held"), 1, 8, 6).remove(0);
        paths.push(held.clone());
        let fresh = fs.path("fresh");
        write_file(&fresh, &pattern(MIB, 7));
        paths.push(fresh);
        let mut t = Tree { fs, files: vec![] };
        for p in paths {
            t.remember(p);
        }
        let holder = Holder(
            Command::new("sleep")
                .arg("3600")
                .stdin(std::fs::File::open(&held).unwrap())
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        (t, holder)
    }

    fn remember(&mut self, p: PathBuf) {
        self.fs.sync();
        let print = fingerprint(&p);
        self.files.push((p, print));
    }

    /// A big stale file added from the host (a later step refreshes it).
    fn add_big(&mut self, dir: &str, seed: u64) -> PathBuf {
        let p = stale_files(&self.fs.path(dir), 1, 96, seed).remove(0);
        self.remember(p.clone());
        p
    }

    fn unchanged(&self, when: &str) {
        for (p, want) in &self.files {
            let mut got = fingerprint(p);
            // The held file is relocated: its data gets new extents, and
            // ext4 may need an extent-tree block to map them (st_blocks
            // counts it: +8 sectors seen on a loaded machine). Everything
            // else — bytes, holes, size, times, mode, owner, xattrs — is
            // exact.
            if p.components().any(|c| c.as_os_str() == "held") {
                assert!(
                    got.blocks.abs_diff(want.blocks) <= 64,
                    "{when}: {} blocks {} -> {}",
                    p.display(),
                    want.blocks,
                    got.blocks
                );
                got.blocks = want.blocks;
            }
            assert_eq!(&got, want, "{when}: {}", p.display());
        }
    }
}

fn config(port: u16, rate: &str) -> String {
    format!(
        "metrics_listen = \"127.0.0.1:{port}\"\n\n[defaults]\nscan_interval = \"1h\"\n\
         sample_interval = \"1h\"\nsample_bytes = \"32MiB\"\nmin_free = \"64MiB\"\n\
         rate = \"{rate}\"\n\n[[paths]]\npath = \"/srv/index\"\n"
    )
}

fn set_config(c: &Container, port: u16, rate: &str) {
    std::fs::write(c.path("/etc/refreshd/refreshd.toml"), config(port, rate)).unwrap();
}

fn status(c: &Container) -> serde_json::Value {
    let (code, out, err) = c.sh("refreshctl --json status");
    assert_eq!(code, 0, "refreshctl status: {out}\n{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn drive(c: &Container) -> serde_json::Value {
    status(c)["drives"][0].clone()
}

fn main_pid(c: &Container) -> String {
    c.ok("systemctl show -p MainPID --value refreshd")
        .trim()
        .to_string()
}

fn journal(c: &Container, unit: &str) -> String {
    c.sh(&format!("journalctl -b --no-pager -o cat -u {unit}"))
        .1
}

fn judged(c: &Container) {
    c.wait_for("the drive judged", 60, |c| {
        let d = drive(c);
        d["last_sample"].is_object() && d["state"] != "unknown"
    });
    let d = drive(c);
    assert!(
        ["healthy", "suspect", "degraded"].contains(&d["state"].as_str().unwrap_or("")),
        "{d:#}"
    );
    assert!(d["error"].is_null(), "{d:#}");
}

#[test]
fn privileged_the_package_under_a_real_systemd() {
    if !privileged(TEST) || !needs("systemd-nspawn") || !needs("debootstrap") {
        return;
    }
    let Some(deb) = built_package() else {
        require_or_skip(
            "no target/debian/refreshd_*.deb: run `cargo deb -p refreshd` (.ci/run does)",
        );
        return;
    };
    let root_tar = debian_root().unwrap_or_else(|e| panic!("{TEST}: {e}"));
    let (mut t, _holder) = Tree::new();
    let port = free_port();
    let c = Container::boot(&root_tar, &[(&t.fs.mnt, "/srv/index")]);
    install(&c, &deb);
    set_config(&c, port, "400MiB/s");
    c.ok("refreshd check-config");

    every_call_is_allowed(&c, &t, port);
    the_shipped_unit(&c, &t, port);
    bad_reload_fails_and_keeps_the_config(&c, port);
    stop_mid_refresh_then_resume(&c, &mut t, port);
    watchdog_restarts_a_frozen_daemon(&c);
    template_refreshes_with_its_journal(&c, &mut t);
    upgrade_restarts_and_keeps_checkpoints(&c, &deb, &mut t, port);
    reads_are_timed_with_the_drop_in_only(&c, &mut t, port);

    c.ok("systemctl stop refreshd");
    assert!(
        !c.path("/run/refreshd/control.sock").exists(),
        "systemctl stop leaves no socket"
    );
    drop(c);
    t.unchanged("at the end");
}

fn install(c: &Container, deb: &Path) {
    std::fs::copy(deb, c.path("/root/refreshd.deb")).unwrap();
    c.ok("dpkg -i /root/refreshd.deb");
    assert_eq!(
        c.ok("systemctl is-enabled refreshd").trim(),
        "enabled",
        "enabled at install"
    );
    assert_ne!(
        c.sh("systemctl is-active refreshd").1.trim(),
        "active",
        "not started at install (the shipped config names /srv/index)"
    );
}

/// The shipped unit: READY, the path resolution said at start, judged.
fn the_shipped_unit(c: &Container, t: &Tree, port: u16) {
    c.ok("systemctl start refreshd");
    assert_eq!(c.ok("systemctl is-active refreshd").trim(), "active");
    // Sampled: everything was refreshed in the first pass, so there is
    // nothing stale to measure ("unknown", said so) — and no failure.
    c.wait_for("a sample", 60, |c| drive(c)["last_sample"].is_object());
    let d = drive(c);
    assert!(d["error"].is_null(), "{d:#}");
    assert!(
        d["state"] != "cannot_sample" && d["last_sample"]["stale_bps"].is_null(),
        "{d:#}"
    );
    let log = journal(c, "refreshd");
    assert!(
        log.contains("openat2 is refused here"),
        "the resolution in use is said at start:\n{log}"
    );
    let d = drive(c);
    assert_eq!(
        d["files"],
        t.files.len() as u64,
        "subdirectories scanned: {d:#}"
    );
    metrics_inside(c, port);
    let m = c.ok(&format!("curl -fsS http://127.0.0.1:{port}/metrics"));
    assert!(
        m.contains("refreshd_syscall_refused_total{call=\"mincore\"} 0"),
        "mincore is allowed:\n{m}"
    );
}

/// `now --force --wait` rewrites every stale file (the held one by
/// relocation) and exits 0; bytes and mtimes are unchanged.
fn forced_refresh_refreshes_every_stale_file(c: &Container, t: &Tree) {
    let (code, out, err) = c.sh("refreshctl now --force --wait");
    assert_eq!(code, 0, "{out}\n{err}\n{}", journal(c, "refreshd"));
    let stale = t.files.len() - 1;
    assert!(
        out.contains(&format!("refreshed {stale} file(s)")) && !out.contains("FAILED"),
        "every stale file: {out}\n{}",
        journal(c, "refreshd")
    );
    t.unchanged("after now --force --wait");
}

fn metrics_inside(c: &Container, port: u16) {
    let m = c.ok(&format!("curl -fsS http://127.0.0.1:{port}/metrics"));
    for series in [
        "refreshd_drive_state{",
        "refreshd_refreshed_bytes_total{",
        "refreshd_stale_read_throughput_bytes_per_second{",
        "refreshd_build_info{",
    ] {
        assert!(m.contains(series), "{series} not exported:\n{m}");
    }
}

/// A config the daemon rejects: `systemctl reload` fails, the daemon runs
/// on (same process, old settings).
fn bad_reload_fails_and_keeps_the_config(c: &Container, port: u16) {
    let pid = main_pid(c);
    set_config(c, port, "fast, please");
    let (code, out, err) = c.sh("systemctl reload refreshd");
    assert_ne!(
        code, 0,
        "a rejected config must fail the reload: {out}{err}"
    );
    assert_eq!(main_pid(c), pid, "still the same daemon");
    assert_eq!(c.ok("systemctl is-active refreshd").trim(), "active");
    status(c);
    let log = journal(c, "refreshd");
    assert!(
        log.contains("rate"),
        "the problem is in the journal:\n{log}"
    );
    set_config(c, port, "400MiB/s");
    c.ok("systemctl reload refreshd");
}
