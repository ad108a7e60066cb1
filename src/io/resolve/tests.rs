//! Every case through both methods: `openat2` on this thread, and the
//! walk on a thread where a seccomp filter refuses `openat2` (ENOSYS as
//! systemd's RestrictSUIDSGID= does, and EPERM as a SystemCallFilter=
//! does). Both must give the same answer.

use super::*;
use std::os::fd::AsFd;
use std::path::PathBuf;
use testbed::seccomp::{on_thread_refusing, SYS_OPENAT2};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Got {
    File,
    Dir,
    Link,
    Err(Errno),
}

fn outcome(dir: &Path, name: &str, flags: OFlags, rules: Rules) -> (Got, Method) {
    let d = rustix::fs::open(dir, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let got = match open(
        d.as_fd(),
        Path::new(name),
        flags | OFlags::CLOEXEC,
        Mode::empty(),
        rules,
    ) {
        Err(e) => Got::Err(e),
        Ok(fd) => match rustix::fs::fstat(&fd).map(|s| FileType::from_raw_mode(s.st_mode)) {
            Ok(FileType::RegularFile) => Got::File,
            Ok(FileType::Directory) => Got::Dir,
            Ok(FileType::Symlink) => Got::Link,
            other => panic!("{name}: {other:?}"),
        },
    };
    // Which method answered: the walk is only taken when openat2 is refused.
    let refused = openat2_refused().is_some();
    (
        got,
        if refused {
            Method::Walk
        } else {
            Method::Openat2
        },
    )
}

struct Tree {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

fn tree() -> Tree {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = tmp.path().join("root");
    let outside = tmp.path().join("outside");
    for d in [root.join("a/b"), outside.clone()] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::write(root.join("a/b/f"), b"in").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(outside.join("secret"), b"out").unwrap_or_else(|e| panic!("{e}"));
    let link = |to: &Path, at: PathBuf| {
        std::os::unix::fs::symlink(to, at).unwrap_or_else(|e| panic!("{e}"))
    };
    link(&outside, root.join("a/escape"));
    link(Path::new("b/f"), root.join("a/flink"));
    link(Path::new("b"), root.join("a/dlink"));
    Tree {
        _tmp: tmp,
        root,
        outside,
    }
}

fn cases(t: &Tree) -> Vec<(PathBuf, &'static str, OFlags, Rules, Got)> {
    use Got::*;
    let path_nofollow = OFlags::PATH | OFlags::NOFOLLOW;
    let r = t.root.clone();
    vec![
        (r.clone(), "a/b/f", OFlags::RDONLY, Rules::BENEATH, File),
        (r.clone(), "a/b/f", path_nofollow, Rules::BENEATH, File),
        (
            r.clone(),
            "a/b",
            OFlags::RDONLY | OFlags::DIRECTORY,
            Rules::BENEATH,
            Dir,
        ),
        (
            r.clone(),
            "",
            OFlags::RDONLY | OFlags::DIRECTORY,
            Rules::BENEATH,
            Err(Errno::NOENT),
        ),
        (
            r.clone(),
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY,
            Rules::BENEATH,
            Dir,
        ),
        (r.clone(), "./a/./b/f", OFlags::RDONLY, Rules::BENEATH, File),
        // A symlink in the middle, to the outside or not.
        (
            r.clone(),
            "a/escape/secret",
            path_nofollow,
            Rules::BENEATH,
            Err(Errno::LOOP),
        ),
        (
            r.clone(),
            "a/dlink/f",
            path_nofollow,
            Rules::BENEATH,
            Err(Errno::LOOP),
        ),
        (
            r.clone(),
            "a/dlink",
            OFlags::RDONLY | OFlags::DIRECTORY,
            Rules::BENEATH,
            Err(Errno::LOOP),
        ),
        // A trailing symlink: the link itself with O_PATH | O_NOFOLLOW.
        (r.clone(), "a/flink", path_nofollow, Rules::BENEATH, Link),
        (
            r.clone(),
            "a/flink",
            OFlags::RDONLY,
            Rules::BENEATH,
            Err(Errno::LOOP),
        ),
        // Leaving the root.
        (
            r.clone(),
            "a/../../outside/secret",
            OFlags::RDONLY,
            Rules::BENEATH,
            Err(Errno::XDEV),
        ),
        (
            r.clone(),
            "/etc/passwd",
            OFlags::RDONLY,
            Rules::BENEATH,
            Err(Errno::XDEV),
        ),
        (
            r.clone(),
            "a/nothing",
            OFlags::RDONLY,
            Rules::BENEATH,
            Err(Errno::NOENT),
        ),
        (
            r.clone(),
            "a/b/f/x",
            OFlags::RDONLY,
            Rules::BENEATH,
            Err(Errno::NOTDIR),
        ),
        // Crossing a mount: /proc is one below /.
        (
            "/".into(),
            "proc/self/status",
            OFlags::RDONLY,
            Rules::BENEATH,
            Err(Errno::XDEV),
        ),
        (
            "/".into(),
            "proc",
            OFlags::RDONLY | OFlags::DIRECTORY,
            Rules::BENEATH,
            Err(Errno::XDEV),
        ),
        // Absolute paths, no symlinks anywhere (mounts allowed).
        (
            "/".into(),
            "/proc/self/status",
            OFlags::RDONLY,
            Rules::NO_SYMLINKS,
            Err(Errno::LOOP),
        ),
        (
            "/".into(),
            "/proc/1",
            OFlags::RDONLY | OFlags::DIRECTORY,
            Rules::NO_SYMLINKS,
            Dir,
        ),
    ]
    .into_iter()
    .chain([(
        "/".into(),
        // Leaked: the cases borrow &'static str.
        &*Box::leak(
            t.root
                .join("a/escape/secret")
                .display()
                .to_string()
                .into_boxed_str(),
        ),
        OFlags::RDONLY,
        Rules::NO_SYMLINKS,
        Err(Errno::LOOP),
    )])
    .chain([(
        "/".into(),
        &*Box::leak(
            t.outside
                .join("secret")
                .display()
                .to_string()
                .into_boxed_str(),
        ),
        OFlags::RDONLY,
        Rules::NO_SYMLINKS,
        File,
    )])
    .collect()
}

fn run_cases(t: &Tree) -> Vec<(String, Got, Method)> {
    cases(t)
        .into_iter()
        .map(|(dir, name, flags, rules, want)| {
            let (got, how) = outcome(&dir, name, flags, rules);
            assert_eq!(
                got,
                want,
                "{} + {name:?} ({flags:?}, {rules:?}) by {how:?}",
                dir.display()
            );
            (name.to_string(), got, how)
        })
        .collect()
}

#[test]
fn openat2_and_the_walk_agree_on_every_case() {
    let t = tree();
    let direct = run_cases(&t);
    assert!(direct.iter().all(|(_, _, how)| *how == Method::Openat2));
    for errno in [libc::ENOSYS, libc::EPERM] {
        let t2 = tree();
        let walked = on_thread_refusing(SYS_OPENAT2, errno, move || run_cases(&t2));
        assert!(
            walked.iter().all(|(_, _, how)| *how == Method::Walk),
            "errno {errno}: the filter made openat2 refused"
        );
        let a: Vec<Got> = direct.iter().map(|c| c.1).collect();
        let b: Vec<Got> = walked.iter().map(|c| c.1).collect();
        assert_eq!(a, b, "errno {errno}");
    }
}

#[test]
fn a_tmpfile_is_made_in_the_resolved_directory_by_both_methods() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path().to_path_buf();
    let make = move || {
        open_absolute(
            &dir,
            OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map(|fd| rustix::fs::fstat(&fd).map(|s| s.st_nlink).unwrap_or(99))
    };
    let d2 = make.clone();
    assert_eq!(make(), Ok(0), "an unnamed file");
    assert_eq!(on_thread_refusing(SYS_OPENAT2, libc::ENOSYS, d2), Ok(0));
}

#[test]
fn a_refusal_for_the_file_itself_is_not_taken_for_a_refused_openat2() {
    // EPERM from the open itself (O_NOATIME on a file we do not own, as a
    // user) must come back as EPERM, not be walked around. As root the
    // open succeeds; either way the answer is the same by both methods.
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(tmp.path().join("f"), b"x").unwrap_or_else(|e| panic!("{e}"));
    let d = rustix::fs::open(tmp.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
        .unwrap_or_else(|e| panic!("{e}"));
    let r = open(
        d.as_fd(),
        Path::new("f"),
        OFlags::RDONLY | OFlags::NOATIME,
        Mode::empty(),
        Rules::BENEATH,
    );
    assert!(r.is_ok(), "{r:?}");
    assert!(openat2_refused().is_none());
}
