//! A reboot renumbers devices (NVMe, dm and md minors, loop devices,
//! btrfs's anonymous devices): the same filesystem comes back on another
//! `st_dev`. The state is keyed on the filesystem's UUID, so every file's
//! `last_refresh` is kept (no second rewrite: pure wear) and a refresh
//! killed before the "reboot" is recovered and resumed after it.
//! Regression: keyed on st_dev, 4 refreshed files were counted stale again
//! and recovery answered "another file is there now".

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::daemon_harness::*;
use crate::helpers::*;

/// An image file, attached to a loop device and mounted; Drop unmounts
/// and detaches (the image stays for the next attach).
struct Attached {
    mnt: PathBuf,
    dev: String,
}

impl Attached {
    fn new(img: &Path, mnt: &Path) -> Attached {
        let out = run(Command::new("losetup").args(["--find", "--show"]).arg(img));
        let dev = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let a = Attached {
            mnt: mnt.to_path_buf(),
            dev,
        };
        run(Command::new("mount").arg(&a.dev).arg(mnt));
        a
    }
}

impl Attached {
    /// Unmounts, keeping a device number taken until the holder drops: the
    /// loop device stays attached, and `anon` (for btrfs, whose `st_dev`
    /// is an anonymous number freed at unmount) gets a tmpfs mounted on
    /// it, which takes the lowest free anonymous number (btrfs takes two
    /// at mount and reports the higher, so the next mount lands higher).
    fn into_holder(mut self, anon: Option<&Path>) -> Holder {
        testbed::host::unmount(&self.mnt);
        let anon = anon.map(|dir| {
            std::fs::create_dir(dir).unwrap();
            run(Command::new("mount").args(["-t", "tmpfs", "anon"]).arg(dir));
            dir.to_path_buf()
        });
        Holder {
            dev: std::mem::take(&mut self.dev),
            anon,
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        testbed::host::unmount(&self.mnt);
        if !self.dev.is_empty() {
            let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
        }
    }
}

/// A device number kept taken: a loop device kept attached, an anonymous
/// number held by a tmpfs; released on drop.
struct Holder {
    dev: String,
    anon: Option<PathBuf>,
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Some(dir) = &self.anon {
            testbed::host::unmount(dir);
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

/// A sparse image with a new filesystem of `kind`.
fn image(dir: &Path, name: &str, kind: &str) -> PathBuf {
    let img = dir.join(name);
    std::fs::File::create(&img)
        .unwrap()
        .set_len(512 << 20)
        .unwrap();
    let mkfs: &[&str] = match kind {
        "ext4" => &["mkfs.ext4", "-q", "-F"],
        "xfs" => &["mkfs.xfs", "-q", "-f"],
        _ => &["mkfs.btrfs", "-q", "-f"],
    };
    run(Command::new(mkfs[0]).args(&mkfs[1..]).arg(&img));
    img
}

fn st_dev(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().dev()
}

/// Refreshes `big` slowly and kills the daemon mid-file, at a moment its
/// recovery record vouches for the file's times (again, when a write
/// io_uring had punted landed during the teardown: recovery would then
/// rightly leave the mtime, and the point here is that it restores it).
fn killed_mid_file(dir: &Path, tree: &Path, big: &Path, mtime: i64) {
    let state = dir.join("state");
    for _ in 0..5 {
        let port = free_port();
        let cfg = config(dir, tree, port, &format!("{SLOW}rate = \"8MiB/s\"\n"));
        let mut d = Daemon::start(dir, &cfg, port);
        let (code, _, err) = d.ctl(&["now", "--force", "--path", big.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        d.wait_for("the big file under way", 30, |dm| {
            dm.status()["refresh"]["bytes_done"].as_u64().unwrap_or(0) >= 12 << 20
        });
        // Let a checkpoint be saved (twice a second), then the kill.
        std::thread::sleep(Duration::from_millis(1200));
        kill_when_recoverable(d.child.id(), &state, big);
        d.child.wait().unwrap();
        drop(d);
        std::thread::sleep(Duration::from_millis(500));
        assert_ne!(
            std::fs::metadata(big).unwrap().mtime(),
            mtime,
            "killed mid-file"
        );
        if record_vouches(&state, big) {
            return;
        }
        // The next start drops that record (leaving the mtime, rightly);
        // put the mtime back by hand for the next attempt.
        set_mtime(big, mtime, 0);
    }
    panic!("no kill left a record that vouches for the file's times in 5 attempts");
}

const SLOW: &str = "scan_interval = \"1h\"\nsample_interval = \"1h\"\nsample_bytes = \"4MiB\"\n";

#[test]
fn privileged_a_remount_on_another_device_number_keeps_history_and_recovery() {
    if !privileged("privileged_a_remount_on_another_device_number_keeps_history_and_recovery") {
        return;
    }
    for kind in ["ext4", "xfs", "btrfs"] {
        remount_keeps_history(kind);
    }
}

fn remount_keeps_history(kind: &str) {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let img = image(tmp.path(), "disk.img", kind);
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let tree = mnt.join("index");
    let (before_dev, big, big_mtime, prints) = {
        let fs = Attached::new(&img, &mnt);
        let small = tree.join("small");
        let files = stale_files(&small, 4, 4, 601);
        let big = stale_files(&tree.join("big"), 1, 48, 605).remove(0);
        let big_mtime = std::fs::metadata(&big).unwrap().mtime();
        let port = free_port();
        let cfg = config(tmp.path(), &tree, port, SLOW);
        // Everything refreshed but the big file (last_refresh recorded).
        let d = Daemon::start(tmp.path(), &cfg, port);
        let (code, out, err) = d.ctl(&[
            "now",
            "--force",
            "--wait",
            "--path",
            small.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{kind}: {out}{err}");
        assert!(out.contains("refreshed 4 file(s)"), "{kind}: {out}");
        let prints: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
        drop(d);
        // The big file: a slow refresh of it, killed mid-file (a
        // checkpoint and a recovery record that vouches for its times).
        killed_mid_file(tmp.path(), &tree, &big, big_mtime);
        let dev = st_dev(&mnt);
        drop(fs);
        (dev, big, big_mtime, prints)
    };
    // "Reboot": another loop device (the first number is taken by a
    // placeholder), or for btrfs another anonymous device (another btrfs
    // mounted first takes the next one).
    let placeholder_img = image(tmp.path(), "other.img", kind);
    let other_mnt = tmp.path().join("other");
    std::fs::create_dir(&other_mnt).unwrap();
    let _placeholder = Attached::new(&placeholder_img, &other_mnt);
    // Other tests free and take device numbers meanwhile: the old number
    // may come back; then it is held, and the next one is taken.
    let mut held = vec![];
    let _fs = loop {
        let a = Attached::new(&img, &mnt);
        if st_dev(&mnt) != before_dev || held.len() == 8 {
            break a;
        }
        let anon = (kind == "btrfs").then(|| tmp.path().join(format!("anon{}", held.len())));
        held.push(a.into_holder(anon.as_deref()));
    };
    assert_ne!(
        st_dev(&mnt),
        before_dev,
        "{kind}: the same filesystem on another device number"
    );

    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, SLOW);
    let d = Daemon::start(tmp.path(), &cfg, port);
    assert_eq!(
        std::fs::metadata(&big).unwrap().mtime(),
        big_mtime,
        "{kind}: recovery put back the mtime the killed refresh had moved\n{}",
        d.log()
    );
    d.wait_for("the first scan", 30, |dm| dm.status()["last_scan"].is_i64());
    let s = d.status();
    assert_eq!(s["files"], 5, "{kind}: {s:#}");
    assert_eq!(
        s["stale_files"], 1,
        "{kind}: only the big file is stale: {s:#}"
    );
    let (_, plan, _) = d.ctl(&["--json", "plan"]);
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    let planned: Vec<&str> = plan[0]["plan"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(planned, [big.to_str().unwrap()], "{kind}: {plan:#}");
    // The big file resumes from its checkpoint.
    let (code, out, err) = d.ctl(&["now", "--force", "--wait"]);
    assert_eq!(code, 0, "{kind}: {out}{err}");
    let log = d.log();
    let resumed = log
        .lines()
        .rfind(|l| l.contains("resuming from checkpoint"))
        .unwrap_or_else(|| panic!("{kind}: no resume:\n{log}"));
    assert!(!resumed.contains("skip=0"), "{kind}: {resumed}");
    drop(d);
    let files: Vec<PathBuf> = (0..4).map(|i| tree.join(format!("small/seg{i}"))).collect();
    let after: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    assert_eq!(prints, after, "{kind}");
    assert_eq!(
        std::fs::metadata(&big).unwrap().mtime(),
        big_mtime,
        "{kind}"
    );
}
