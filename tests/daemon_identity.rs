//! The root daemon touches only what it planned, beneath its trees: a
//! directory inside a tree swapped for a symlink to a directory outside
//! (same filesystem) between the scan and the refresh, and a file replaced
//! by another one at the same name. Nothing outside is opened (inotify on
//! it sees no event), and the replacement is not touched.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::daemon_harness::*;
use crate::helpers::*;

/// Watches a file for any open, access, modification or attribute change.
struct Inotify(std::os::fd::OwnedFd);

impl Inotify {
    fn watch(path: &Path) -> Inotify {
        use std::os::fd::FromRawFd;
        // SAFETY: plain syscalls; the fd is owned right away.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fd just created, owned here.
        let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        let mask = libc::IN_OPEN | libc::IN_ACCESS | libc::IN_MODIFY | libc::IN_ATTRIB;
        // SAFETY: valid fd and NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(fd, c.as_ptr(), mask) };
        assert!(wd >= 0, "{}", std::io::Error::last_os_error());
        Inotify(owned)
    }

    /// Bytes of events queued so far (0: nothing happened to the file).
    fn pending(&self) -> usize {
        use std::os::fd::AsRawFd;
        let mut buf = [0u8; 4096];
        // SAFETY: reading into a local buffer of its length.
        let n = unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        n.max(0) as usize
    }
}

fn fingerprint_with_ctime(p: &Path) -> (Fingerprint, i64, i64) {
    let m = std::fs::metadata(p).unwrap();
    (fingerprint(p), m.ctime(), m.ctime_nsec())
}

/// A daemon on an aged testbed drive holding `tree`, scanning once (the
/// scan interval is long); returns once the first scan is done. The drive
/// is judged degraded after two more sampling rounds (2 s apart) and then
/// refreshes its plan from the database — without a rescan.
///
/// `openat2`: `None` as on a plain host; `Some(errno)` under a seccomp
/// filter answering it with that errno (systemd's sandbox): names are
/// then resolved one component at a time, with the same guarantees.
fn aged_daemon(dir: &Path, d: &testbed::Drive, tree: &Path, openat2: Option<i32>) -> Daemon {
    // Other aged files that make the drive degraded on their own.
    stale_files(&tree.join("others"), 3, 8, 90);
    d.sync().unwrap();
    d.age(6.0);
    d.sync().unwrap();
    let port = free_port();
    let cfg = config(dir, tree, port, "scan_interval = \"1h\"\n");
    let daemon = match openat2 {
        None => Daemon::start(dir, &cfg, port),
        Some(errno) => {
            let d = Daemon::start_refusing_openat2(dir, &cfg, port, errno);
            assert!(d.log().contains("openat2 is refused here"), "{}", d.log());
            d
        }
    };
    daemon.wait_for("the first scan", 30, |dm| {
        dm.status()["files"].as_u64() == Some(4)
    });
    daemon
}

fn refresh_round_done(daemon: &Daemon) {
    daemon.wait_for("a refresh round", 90, |dm| {
        dm.status()["last_refresh"].is_i64()
    });
}

#[test]
fn privileged_directory_swapped_for_a_symlink_after_the_scan_reaches_nothing_outside() {
    if !privileged(
        "privileged_directory_swapped_for_a_symlink_after_the_scan_reaches_nothing_outside",
    ) {
        return;
    }
    directory_swapped_for_a_symlink(None);
}

/// The same attack under systemd's sandbox (openat2 refused with ENOSYS).
#[test]
fn privileged_directory_swapped_for_a_symlink_without_openat2() {
    if !privileged("privileged_directory_swapped_for_a_symlink_without_openat2") {
        return;
    }
    directory_swapped_for_a_symlink(Some(libc::ENOSYS));
}

fn directory_swapped_for_a_symlink(openat2: Option<i32>) {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = drive(tmp.path(), "840evo");
    let tree = d.path("tree");
    let inside = stale_files(&tree.join("sub"), 1, 8, 91).remove(0);
    let outside = stale_files(&d.path("outside/sub"), 1, 8, 92).remove(0);
    assert_eq!(inside.file_name(), outside.file_name());
    let daemon = aged_daemon(tmp.path(), &d, &tree, openat2);
    // The swap, right after the scan: tree/sub becomes ../outside/sub.
    std::fs::rename(tree.join("sub"), tree.join("sub.old")).unwrap();
    std::os::unix::fs::symlink("../outside/sub", tree.join("sub")).unwrap();
    let before = fingerprint_with_ctime(&outside);
    let watch = Inotify::watch(&outside);
    refresh_round_done(&daemon);
    let m = daemon.metrics();
    drop(daemon);
    assert_eq!(watch.pending(), 0, "the file outside the tree was opened");
    assert_eq!(
        fingerprint_with_ctime(&outside),
        before,
        "the file outside changed"
    );
    assert!(
        m.contains("outcome=\"skipped\",reason=\"symlink\""),
        "the planned file is skipped as behind a symlink:\n{m}"
    );
}

#[test]
fn privileged_file_replaced_after_the_scan_is_skipped_as_replaced() {
    if !privileged("privileged_file_replaced_after_the_scan_is_skipped_as_replaced") {
        return;
    }
    file_replaced_after_the_scan(None);
}

/// The same under a filter answering openat2 with EPERM (a
/// `SystemCallFilter=` without it).
#[test]
fn privileged_file_replaced_after_the_scan_without_openat2() {
    if !privileged("privileged_file_replaced_after_the_scan_without_openat2") {
        return;
    }
    file_replaced_after_the_scan(Some(libc::EPERM));
}

fn file_replaced_after_the_scan(openat2: Option<i32>) {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = drive(tmp.path(), "840evo");
    let tree = d.path("tree");
    let file = stale_files(&tree, 1, 8, 93).remove(0);
    let daemon = aged_daemon(tmp.path(), &d, &tree, openat2);
    // Another file takes the name (new inode), as stale as the first.
    let newcomer = tree.join("newcomer");
    write_file(&newcomer, &pattern(8 << 20, 94));
    let old = std::fs::metadata(&file).unwrap().mtime();
    set_mtime(&newcomer, old, 0);
    std::fs::rename(&newcomer, &file).unwrap();
    let before = fingerprint_with_ctime(&file);
    let watch = Inotify::watch(&file);
    refresh_round_done(&daemon);
    let m = daemon.metrics();
    drop(daemon);
    assert_eq!(watch.pending(), 0, "the replacement was opened");
    assert_eq!(fingerprint_with_ctime(&file), before);
    assert!(m.contains("outcome=\"skipped\",reason=\"replaced\""), "{m}");
}

#[test]
fn privileged_engine_refuses_a_file_that_is_not_the_expected_one() {
    if !privileged("privileged_engine_refuses_a_file_that_is_not_the_expected_one") {
        return;
    }
    use refreshd::engine::safety::guard::Identity;
    use refreshd::engine::{Engine, EngineConfig, Outcome, SkipReason, Target};
    let fs = LoopFs::new("ext4", 256);
    let file = fs.path("f");
    write_file(&file, &pattern(1 << 20, 95));
    let m = std::fs::metadata(&file).unwrap();
    let planned = Identity {
        fs: refreshd::io::fsid::of(std::os::fd::AsFd::as_fd(
            &std::fs::File::open(&file).unwrap(),
        ))
        .unwrap(),
        ino: m.ino(),
        btime: None,
        generation: None,
    };
    let newcomer = fs.path("n");
    write_file(&newcomer, &pattern(1 << 20, 96));
    std::fs::rename(&newcomer, &file).unwrap();
    let engine = Engine::start(EngineConfig::default()).unwrap();
    let target = |expect| Target {
        expect,
        ..Target::for_path(&file).unwrap()
    };
    let r = engine.refresh(target(Some(planned)), None);
    assert!(
        matches!(
            r.outcome,
            Outcome::Skipped {
                reason: SkipReason::Replaced,
                ..
            }
        ),
        "{:?}",
        r.outcome
    );
    // The identity check switched off (no expectation): the replacement is
    // opened, leased and rewritten: a file the plan never chose.
    let r = engine.refresh(target(None), None);
    assert_eq!(r.outcome, Outcome::Refreshed);
}

#[test]
fn privileged_two_and_eight_drives_starting_at_once_are_all_served() {
    if !privileged("privileged_two_and_eight_drives_starting_at_once_are_all_served") {
        return;
    }
    for n in [2usize, 8] {
        let fss: Vec<LoopFs> = (0..n).map(|_| LoopFs::new("ext4", 64)).collect();
        let trees: Vec<_> = fss.iter().map(|fs| fs.path("tree")).collect();
        for (i, t) in trees.iter().enumerate() {
            stale_files(t, 2, 1, 200 + i as u64);
        }
        let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
        let port = free_port();
        let tree_refs: Vec<&Path> = trees.iter().map(|t| t.as_path()).collect();
        let cfg = config_trees(tmp.path(), &tree_refs, port, "sample_interval = \"1h\"\n");
        let daemon = Daemon::start(tmp.path(), &cfg, port);
        let all = |dm: &Daemon| -> Vec<serde_json::Value> {
            let (code, out, err) = dm.ctl(&["--json", "status"]);
            assert_eq!(code, 0, "{err}");
            serde_json::from_str::<serde_json::Value>(&out).unwrap()["drives"]
                .as_array()
                .unwrap()
                .clone()
        };
        // Within 20 s, below the 30 s scan interval: every first scan counts.
        daemon.wait_for(&format!("{n} drives scanned"), 20, |dm| {
            let d = all(dm);
            d.len() == n && d.iter().all(|d| d["files"].as_u64() == Some(2))
        });
        for d in all(&daemon) {
            assert!(d["error"].is_null(), "{n} drives: {d:#}");
        }
        let m = daemon.metrics();
        let up: Vec<&str> = m
            .lines()
            .filter(|l| l.starts_with("refreshd_store_up{"))
            .collect();
        assert_eq!(up.len(), n, "{m}");
        assert!(up.iter().all(|l| l.ends_with(" 1")), "{up:?}");
        drop(daemon);
    }
}

#[test]
fn privileged_daemon_runs_in_process_and_stops_on_request() {
    if !privileged("privileged_daemon_runs_in_process_and_stops_on_request") {
        return;
    }
    let fs = LoopFs::new("ext4", 64);
    let tree = fs.path("tree");
    stale_files(&tree, 2, 1, 301);
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let path = config(tmp.path(), &tree, port, "sample_interval = \"1h\"\n");
    let cfg = refreshd::config::load(&path).unwrap();
    let stop = refreshd::daemon::Stop::default();
    let s2 = stop.clone();
    let daemon = std::thread::spawn(move || refreshd::daemon::run(cfg, s2));
    let socket = tmp.path().join("run/control.sock");
    let ctl = || {
        std::process::Command::new(crate::helpers::refreshctl())
            .arg("--socket")
            .arg(&socket)
            .args(["--json", "status"])
            .output()
            .unwrap()
    };
    let t = std::time::Instant::now();
    loop {
        let out = ctl();
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            if v["drives"][0]["files"].as_u64() == Some(2) {
                break;
            }
        }
        assert!(
            t.elapsed().as_secs() < 20,
            "the in-process daemon did not serve"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    stop.stop();
    let r = daemon.join().unwrap();
    assert!(r.is_ok(), "{r:?}");
    assert!(!ctl().status.success(), "stopped: nobody answers");
}
