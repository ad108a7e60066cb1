//! Bad command lines get a clear error, exit code 2, and change nothing.
//! These run without privileges.

use std::os::unix::fs::MetadataExt;

use crate::helpers::*;

fn ctime(p: &std::path::Path) -> (i64, i64) {
    let m = std::fs::metadata(p).unwrap();
    (m.ctime(), m.ctime_nsec())
}

#[test]
fn missing_path_is_a_usage_error_and_nothing_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    write_file(&good, &pattern(100_000, 1));
    let c0 = ctime(&good);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let missing = dir.path().join("missing");
    let out = refreshd()
        .arg("refresh")
        .arg(&good)
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("missing") && err.contains("No such file"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing may be reported as done");
    assert_eq!(ctime(&good), c0, "the good path was touched");
}

#[test]
fn bad_rate_is_explained() {
    let out = refreshd()
        .args(["refresh", "--rate", "fast", "/"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("50MiB/s"),
        "the accepted forms are named: {err}"
    );
}

#[test]
fn bad_chunk_and_depth_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for args in [["--chunk", "3000"], ["--queue-depth", "0"]] {
        let out = refreshd()
            .arg("refresh")
            .args(args)
            .arg(dir.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("chunk") || err.contains("depth"), "{err}");
    }
}

#[test]
fn no_paths_and_unknown_strategy_are_usage_errors() {
    let out = refreshd().arg("refresh").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = refreshd()
        .args(["refresh", "--strategy", "sideways", "/"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = refreshd()
        .args(["refresh", "--relocate-chunk", "banana", "/"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("64MiB"));
}

#[test]
fn survey_rejects_bad_paths_and_options_before_reading_anything() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    write_file(&file, &pattern(4096, 1));
    for (args, expect) in [
        (
            vec!["survey", dir.path().join("missing").to_str().unwrap()],
            "No such file",
        ),
        (vec!["survey", file.to_str().unwrap()], "not a directory"),
        (
            vec!["survey", "--min-ratio", "2", "/tmp"],
            "between 0 and 1",
        ),
        (vec!["survey", "--stale-after", "soon", "/tmp"], "30d"),
        (vec!["survey", "--sample-bytes", "lots", "/tmp"], "64MiB"),
    ] {
        let out = refreshd().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// check-config reports every problem in one pass: the file's and the
/// machine's (a tree on tmpfs, named so, a missing tree), each at a
/// position inside the file; run as another user than root it checks what
/// it can and says what it could not.
#[test]
fn check_config_reports_everything_in_one_pass() {
    let dir = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let cfg = dir.path().join("refreshd.toml");
    std::fs::write(
        &cfg,
        format!(
            "bogus = 1\n[defaults]\nrate = \"fast\"\n[[paths]]\npath = \"{}\"\n[[paths]]\npath = \"{}/missing\"\n",
            shm.path().display(),
            dir.path().display()
        ),
    )
    .unwrap();
    let (code, _, err) = check_config(&cfg);
    assert_eq!(code, 1, "{err}");
    let problems: Vec<&str> = err.lines().filter(|l| !l.starts_with("note:")).collect();
    assert_eq!(problems.len(), 4, "{err}");
    assert!(problems[0].contains(":1:1: unknown key `bogus`"), "{err}");
    assert!(problems[1].contains(":3:8: `rate`"), "{err}");
    assert!(
        problems[2].contains(":5:8: tree") && problems[2].contains("on tmpfs"),
        "{err}"
    );
    assert!(
        problems[3].contains(":7:8: tree") && problems[3].contains("does not exist"),
        "{err}"
    );
    let text = std::fs::read_to_string(&cfg).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for p in &problems {
        // file:line:col with the column inside that line.
        let rest = &p[cfg.display().to_string().len() + 1..];
        let mut it = rest.split(':');
        let line: usize = it.next().unwrap().parse().unwrap();
        let col: usize = it.next().unwrap().parse().unwrap();
        assert!(line >= 1 && col >= 1 && col <= lines[line - 1].len(), "{p}");
    }
}

#[test]
fn privileged_check_config_as_another_user_checks_what_it_can() {
    if !crate::helpers::privileged("privileged_check_config_as_another_user_checks_what_it_can") {
        return;
    }
    let dir = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let tree = dir.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let cfg = dir.path().join("refreshd.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{}\"\n[[paths]]\npath = \"{}\"\n",
            state.display(),
            tree.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cfg, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_refreshd"))
        .args(["check-config", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "a valid config passes: {err}");
    assert!(err.contains("note: not run as root"), "{err}");
}
