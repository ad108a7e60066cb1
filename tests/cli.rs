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
