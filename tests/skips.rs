//! Files refreshd must not touch are skipped with the right reason and stay
//! untouched: symlinks (and their targets), FIFOs, immutable, append-only,
//! swap, running executables, files others hold open, other filesystems,
//! reflinked data.

use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::helpers::*;
use refreshd::io::syscalls;

/// A child process killed on drop.
struct Holder(Child);
impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Swap<'a>(&'a Path);
impl Drop for Swap<'_> {
    fn drop(&mut self) {
        let _ = Command::new("swapoff").arg(self.0).status();
    }
}

fn ctime(p: &Path) -> (i64, i64) {
    let m = fs::metadata(p).unwrap();
    (m.ctime(), m.ctime_nsec())
}

fn reason<'a>(reports: &'a [serde_json::Value], p: &Path) -> &'a str {
    let r = status_of(reports, p);
    assert_eq!(r["status"], "skipped", "{r}");
    r["reason"].as_str().unwrap()
}

#[test]
fn privileged_skips_what_it_must_not_touch() {
    if !privileged("privileged_skips_what_it_must_not_touch") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let inside = fs.path("inside");
    let outside = fs.path("outside");
    fs::create_dir_all(&inside).unwrap();
    fs::create_dir_all(&outside).unwrap();

    let target = outside.join("target");
    write_file(&target, &pattern(100_000, 1));
    let link = inside.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let dirlink = inside.join("dirlink");
    std::os::unix::fs::symlink(&outside, &dirlink).unwrap();
    let fifo = inside.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();

    let immutable = inside.join("immutable");
    write_file(&immutable, &pattern(50_000, 2));
    let _i = Chattr::set(&immutable, "i");
    let append = inside.join("append-only");
    write_file(&append, &pattern(50_000, 3));
    let _a = Chattr::set(&append, "a");

    let held = inside.join("held-open");
    write_file(&held, &pattern(200_000, 4));
    let _holder = Holder(
        Command::new("sleep")
            .arg("600")
            .stdin(File::open(&held).unwrap())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let exe = inside.join("exe");
    fs::copy("/bin/sleep", &exe).unwrap();
    let _running = Holder(Command::new(&exe).arg("600").spawn().unwrap());

    let swap = inside.join("swap");
    write_file(&swap, &vec![0u8; 16 << 20]);
    fs::set_permissions(&swap, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    run(Command::new("mkswap").arg(&swap));
    run(Command::new("swapon").arg(&swap));
    let _swap = Swap(&swap);

    // A mount point below the walked directory is not entered.
    let sub = inside.join("mnt");
    fs::create_dir(&sub).unwrap();
    run(Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&sub));
    let _m = MountGuard(sub.clone());
    write_file(&sub.join("on-tmpfs"), b"other filesystem");

    let normal = inside.join("normal");
    write_file(&normal, &pattern(300_000, 5));
    fs.sync();

    let watched = [&target, &immutable, &append, &held, &exe, &swap];
    let ctimes: Vec<_> = watched.iter().map(|p| ctime(p)).collect();
    let prints: Vec<_> = watched.iter().map(|p| fingerprint(p)).collect();

    // In place only: under `auto` the file held open would be relocated
    // (tests/relocate.rs). Twice: as on a plain host, and under a seccomp
    // filter refusing openat2 (systemd's sandbox): the same answers.
    for openat2 in [None, Some(libc::ENOSYS)] {
        let (code, reports, summary) =
            refresh_json_openat2(openat2, &["--strategy", "inplace"], &[&inside]);
        assert_eq!(code, 0, "skips are not failures: {reports:#?}");
        assert_eq!(reason(&reports, &link), "symlink");
        assert_eq!(reason(&reports, &dirlink), "symlink");
        assert_eq!(reason(&reports, &fifo), "not_regular");
        assert_eq!(reason(&reports, &immutable), "immutable");
        assert_eq!(reason(&reports, &append), "append_only");
        assert_eq!(reason(&reports, &held), "in_use");
        assert_eq!(reason(&reports, &exe), "running_executable");
        assert_eq!(reason(&reports, &swap), "swapfile");
        assert_eq!(reason(&reports, &sub), "other_filesystem");
        assert_eq!(status_of(&reports, &normal)["status"], "refreshed");
        assert!(
            !reports
                .iter()
                .any(|r| r["path"].as_str().unwrap().contains("on-tmpfs")),
            "walked into another filesystem"
        );
        assert_eq!(summary["refreshed"], 1, "{summary}");
        for ((p, c), f) in watched.iter().zip(&ctimes).zip(&prints) {
            assert_eq!(&ctime(p), c, "{} was touched", p.display());
            assert_eq!(&fingerprint(p), f, "{} changed", p.display());
        }
    }

    // Named directly, a symlink is refused as a whole (exit 2, the reason
    // once), and still not followed.
    let out = refreshd()
        .args(["refresh", "--json"])
        .arg(&link)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("a symlink: symlinks are never followed"),
        "{err}"
    );
    assert_eq!(
        err.matches("symlink: symlinks").count(),
        1,
        "said once: {err}"
    );
    assert_eq!(ctime(&target), ctimes[0]);
}

#[test]
fn privileged_unsupported_filesystem_is_refused() {
    if !privileged("privileged_unsupported_filesystem_is_refused") {
        return;
    }
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let p = dir.path().join("on-tmpfs");
    write_file(&p, &pattern(10_000, 9));
    // A file or a tree named on the command line: refused as a whole,
    // exit 2, nothing done.
    for named in [&p, &dir.path().to_path_buf()] {
        let out = refreshd().args(["refresh"]).arg(named).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("on a tmpfs filesystem: refreshd rewrites ext4, xfs and btrfs only"),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "nothing was done");
    }
    // A missing path: the reason once.
    let out = refreshd()
        .args(["refresh"])
        .arg(dir.path().join("nope"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

fn shared_bytes(p: &Path) -> u64 {
    fiemap_bytes(p, syscalls::FIEMAP_EXTENT_SHARED)
}

fn reflink_case(kind: &'static str) {
    let fs = LoopFs::new(kind, 512);
    let a = fs.path("a");
    let b = fs.path("b");
    write_file(&a, &pattern(4 << 20, 11));
    run(Command::new("cp").arg("--reflink=always").arg(&a).arg(&b));
    fs.sync();
    assert!(
        shared_bytes(&b) > 0,
        "{kind}: cp --reflink made no shared extents"
    );
    let before = fingerprint(&b);
    let (code, reports, _) = refresh_json(&[], &[&b]);
    assert_eq!(code, 0);
    assert_eq!(reason(&reports, &b), "shared", "{kind}");
    fs.sync();
    assert_eq!(shared_bytes(&b), 4 << 20, "{kind}: still fully shared");
    assert_eq!(fingerprint(&b), before);
}

#[test]
fn privileged_reflinked_file_is_skipped_and_stays_shared_xfs() {
    if privileged("privileged_reflinked_file_is_skipped_and_stays_shared_xfs") {
        reflink_case("xfs");
    }
}

#[test]
fn privileged_reflinked_file_is_skipped_and_stays_shared_btrfs() {
    if privileged("privileged_reflinked_file_is_skipped_and_stays_shared_btrfs") {
        reflink_case("btrfs");
    }
}
