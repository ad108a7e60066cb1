//! A refreshed file is indistinguishable from before but for its ctime:
//! file capabilities, setuid and setgid bits, ACLs, user/trusted/security
//! xattrs stay, and an immutable neighbour is untouched — on ext4, XFS and
//! btrfs, by the one-shot as root, by the one-shot and the daemon without
//! CAP_FSETID (as the shipped unit runs). Every write goes through the
//! kernel's `file_remove_privs`: capabilities go whoever writes, setuid
//! and setgid without CAP_FSETID; such files are relocated (no write of
//! the file) or, in place only, skipped. Regression: a refresh stripped
//! `cap_net_raw+ep` from a binary and turned 4755 into 0755.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::daemon_harness::*;
use crate::helpers::*;

struct Files {
    fs: LoopFs,
    /// (path, expected strategy when a write would strip something, or
    /// `None` for a plain in-place refresh)
    all: Vec<PathBuf>,
    privileged: Vec<PathBuf>,
    setid: Vec<PathBuf>,
    immutable: PathBuf,
}

fn files(kind: &'static str) -> Files {
    let fs = LoopFs::new(kind, 320);
    let dir = fs.path("tree");
    std::fs::create_dir(&dir).unwrap();
    let make = |name: &str, seed: u64| -> PathBuf {
        let p = dir.join(name);
        write_file(&p, &pattern(2 << 20, seed));
        p
    };
    let cap = make("cap-binary", 1);
    run(Command::new("setcap").arg("cap_net_raw+ep").arg(&cap));
    let suid = make("setuid", 2);
    let sgid = make("setgid", 3);
    let acl = make("acl", 4);
    run(Command::new("setfacl").args(["-m", "u:65534:r"]).arg(&acl));
    let user = make("user-xattr", 5);
    run(Command::new("setfattr")
        .args(["-n", "user.refreshd", "-v", "u"])
        .arg(&user));
    let trusted = make("trusted-xattr", 6);
    run(Command::new("setfattr")
        .args(["-n", "trusted.refreshd", "-v", "t"])
        .arg(&trusted));
    let security = make("security-xattr", 7);
    run(Command::new("setfattr")
        .args(["-n", "security.refreshd", "-v", "s"])
        .arg(&security));
    let immutable = make("immutable", 8);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::fs::set_permissions(&sgid, std::fs::Permissions::from_mode(0o2755)).unwrap();
    let all = vec![
        cap.clone(),
        suid.clone(),
        sgid.clone(),
        acl,
        user,
        trusted,
        security,
        immutable.clone(),
    ];
    for p in &all {
        set_mtime(p, 1_700_000_000, 5);
    }
    fs.sync();
    Files {
        fs,
        all,
        privileged: vec![cap],
        setid: vec![suid, sgid],
        immutable,
    }
}

fn prints(f: &Files) -> Vec<Fingerprint> {
    f.all.iter().map(|p| fingerprint(p)).collect()
}

fn strategy_of(reports: &[serde_json::Value], p: &Path) -> String {
    let r = status_of(reports, p);
    assert_eq!(r["status"], "refreshed", "{r:#}");
    r["strategy"].as_str().unwrap().to_string()
}

fn run_json(mut cmd: Command, args: &[&str], dir: &Path) -> (i32, Vec<serde_json::Value>) {
    let out = cmd
        .args(["refresh", "--json"])
        .args(args)
        .arg(dir)
        .output()
        .unwrap();
    let reports = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("summary").is_none())
        .collect();
    (out.status.code().unwrap_or(-1), reports)
}

#[test]
fn privileged_nothing_but_the_ctime_changes_ext4() {
    if privileged("privileged_nothing_but_the_ctime_changes_ext4") {
        nothing_but_the_ctime_changes("ext4");
    }
}

#[test]
fn privileged_nothing_but_the_ctime_changes_xfs() {
    if privileged("privileged_nothing_but_the_ctime_changes_xfs") {
        nothing_but_the_ctime_changes("xfs");
    }
}

#[test]
fn privileged_nothing_but_the_ctime_changes_btrfs() {
    if privileged("privileged_nothing_but_the_ctime_changes_btrfs") {
        nothing_but_the_ctime_changes("btrfs");
    }
}

fn nothing_but_the_ctime_changes(kind: &'static str) {
    let f = files(kind);
    let _i = Chattr::set(&f.immutable, "i");
    let before = prints(&f);
    let dir = f.fs.path("tree");
    // As root (CAP_FSETID): capabilities would go on any write:
    // relocated; setuid and setgid stay through a write: in place.
    let (code, reports) = run_json(refreshd(), &[], &dir);
    assert_eq!(code, 0, "{kind}: {reports:#?}");
    assert_eq!(
        strategy_of(&reports, &f.privileged[0]),
        "relocate",
        "{kind}"
    );
    for p in &f.setid {
        assert_eq!(
            strategy_of(&reports, p),
            "inplace",
            "{kind}: {}",
            p.display()
        );
    }
    assert_eq!(prints(&f), before, "{kind}: one-shot as root");
    // Without CAP_FSETID (the unit): setuid and setgid are relocated too.
    let (code, reports) = run_json(refreshd_without_fsetid(), &[], &dir);
    assert_eq!(code, 0, "{kind}: {reports:#?}");
    for p in f.privileged.iter().chain(&f.setid) {
        assert_eq!(
            strategy_of(&reports, p),
            "relocate",
            "{kind}: {}",
            p.display()
        );
    }
    assert_eq!(prints(&f), before, "{kind}: one-shot without CAP_FSETID");
    // In place only: those files are skipped, with the reason.
    let (code, reports) = run_json(refreshd_without_fsetid(), &["--strategy", "inplace"], &dir);
    assert_eq!(code, 0, "{kind}: {reports:#?}");
    for p in f.privileged.iter().chain(&f.setid) {
        let r = status_of(&reports, p);
        assert_eq!(r["reason"], "privileges", "{kind}: {r:#}");
        assert!(r["detail"].as_str().unwrap().contains("strip"), "{r:#}");
    }
    assert_eq!(prints(&f), before, "{kind}: in place only");
    // The daemon without CAP_FSETID.
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let cfg = config(
        tmp.path(),
        &dir,
        port,
        "scan_interval = \"1h\"\nsample_interval = \"1h\"\n",
    );
    let d = Daemon::spawn(tmp.path(), &cfg, port, &[], refreshd_without_fsetid());
    let (code, out, err) = d.ctl(&["now", "--force", "--wait"]);
    assert_eq!(code, 0, "{kind}: {out}{err}");
    assert!(out.contains("refreshed 7 file(s)"), "{kind}: {out}");
    drop(d);
    assert_eq!(prints(&f), before, "{kind}: the daemon without CAP_FSETID");
}

/// The check switched off: an in-place write strips the capability (and,
/// without CAP_FSETID, which the test process has, it would the setuid).
#[test]
fn privileged_guard_off_a_write_strips_file_capabilities() {
    if !privileged("privileged_guard_off_a_write_strips_file_capabilities") {
        return;
    }
    use refreshd::engine::{Engine, EngineConfig, Outcome, Target, UnsafeSwitches};
    let f = files("ext4");
    let cap = &f.privileged[0];
    let before = fingerprint(cap);
    let engine = Engine::start(EngineConfig {
        unsafe_switches: UnsafeSwitches {
            strip_privileges: true,
            ..UnsafeSwitches::default()
        },
        ..EngineConfig::default()
    })
    .unwrap();
    let r = engine.refresh(Target::for_path(cap).unwrap(), None);
    assert_eq!(r.outcome, Outcome::Refreshed);
    assert!(
        !fingerprint(cap)
            .xattrs
            .iter()
            .any(|(n, _)| n == "security.capability"),
        "the capability was stripped: what the check prevents"
    );
    assert!(before
        .xattrs
        .iter()
        .any(|(n, _)| n == "security.capability"));
}
