//! Names that are not text cannot break the output: arbitrary byte names
//! (newlines, quotes, escape sequences, invalid UTF-8) and a path near
//! PATH_MAX go through the scan, a daemon round, `status`/`plan --json`,
//! `survey --json`, `refresh --json`, the logs and `/metrics`. Every
//! output parses, names each file (its text form reads back to the same
//! bytes) and no log line is forged. Regression: a directory named with a
//! newline forged `ERROR refreshd: FORGED LOG LINE`; one non-UTF-8 name
//! made `refreshctl plan` fail (`invalid type: null`), `survey --json`
//! panic and `refresh --json` print an error instead of the file.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use proptest::prelude::*;

use crate::daemon_harness::*;
use crate::helpers::*;
use refreshd::pathtext;

const HOSTILE: &[&[u8]] = &[
    b"new\nline ERROR refreshd: FORGED LOG LINE",
    b"quote\" path=\"etc-shadow\"",
    b"\x1b[31mred\x1b[0m",
    b"\xff\xfe invalid utf-8",
    b"back\\slash \\x41",
    b"tab\tand\rcarriage",
    b"\xe2\x80\xae bidi override",
];

fn name_strategy() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        any::<u8>().prop_filter("no NUL or /", |b| *b != 0 && *b != b'/'),
        1..64,
    )
    .prop_filter("not . or ..", |n| n != b"." && n != b"..")
}

/// The files: a tree of `names` (each a directory holding a file of the
/// same name), hostile names, and one path near PATH_MAX.
fn make(root: &Path, names: &[Vec<u8>]) -> Vec<PathBuf> {
    let mut files = vec![];
    let all: Vec<&[u8]> = names
        .iter()
        .map(|n| n.as_slice())
        .chain(HOSTILE.iter().copied())
        .collect();
    for (i, n) in all.iter().enumerate() {
        let dir = root.join(format!("d{i}")).join(OsStr::from_bytes(n));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join(OsStr::from_bytes(n));
        files.push(f);
    }
    // ~4000 bytes: 15 levels of 250-byte names, and the file.
    let mut deep = root.join("deep");
    for i in 0..15 {
        deep = deep.join(format!("{i:03}{}", "x".repeat(247)));
    }
    std::fs::create_dir_all(&deep).unwrap();
    files.push(deep.join("f"));
    for (i, f) in files.iter().enumerate() {
        write_file(f, &pattern(64 << 10, i as u64));
        set_mtime(f, 1_700_000_000, 0);
    }
    too_deep(root);
    files
}

/// A directory the walk cannot open (deeper than PATH_MAX below the
/// root), its name a forged log line: the scan reports it as a problem.
fn too_deep(root: &Path) {
    use rustix::fs::{mkdirat, openat, Mode, OFlags};
    let mut dir =
        rustix::fs::open(root, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap();
    // 16 × 250 bytes below the root, then the forged name (200 bytes):
    // the first name that takes the relative path past PATH_MAX.
    for i in 0..17 {
        let name = if i == 16 {
            let mut n = b"x\n2026-01-01T00:00:00Z ERROR refreshd: FORGED LOG LINE ".to_vec();
            n.resize(200, b'z');
            n
        } else {
            format!("{i:03}{}", "y".repeat(247)).into_bytes()
        };
        let name = OsStr::from_bytes(&name);
        mkdirat(&dir, name, Mode::from_raw_mode(0o755)).unwrap();
        dir = openat(
            &dir,
            name,
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
        .unwrap();
    }
}

/// Every JSON line of `out` parses; returns the values.
fn json_lines(out: &[u8], what: &str) -> Vec<serde_json::Value> {
    String::from_utf8(out.to_vec())
        .unwrap_or_else(|e| panic!("{what}: output is not UTF-8: {e}"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{what}: {e}: {l}")))
        .collect()
}

/// Every path string anywhere in `v` under a key named "path" or "paths".
fn paths_in(v: &serde_json::Value, out: &mut Vec<PathBuf>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("path", serde_json::Value::String(s)) => {
                        out.push(pathtext::parse(s).unwrap_or_else(|| panic!("bad {s:?}")))
                    }
                    _ => paths_in(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| paths_in(x, out)),
        _ => {}
    }
}

fn names_every_file(v: &[serde_json::Value], files: &[PathBuf], what: &str) {
    let mut seen = vec![];
    for x in v {
        paths_in(x, &mut seen);
    }
    for f in files {
        assert!(
            seen.contains(f),
            "{what} does not name {}: {seen:?}",
            pathtext::text(f)
        );
    }
}

fn one_case(fs: &LoopFs, case: usize, names: &[Vec<u8>]) {
    let root = fs.path(&format!("case{case}"));
    let files = make(&root, names);
    fs.sync();
    // refresh --json (a dry run): every file named; the directory it
    // cannot open is a failure (exit 1), named too.
    let out = refreshd()
        .args(["refresh", "--json", "--dry-run"])
        .arg(&root)
        .output()
        .unwrap();
    let lines = json_lines(&out.stdout, "refresh --json");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    names_every_file(&lines, &files, "refresh --json");
    let failed: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["status"] == "failed").collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let deep = pathtext::parse(failed[0]["path"].as_str().unwrap()).unwrap();
    assert!(
        deep.as_os_str().as_bytes().ends_with(b"zzz"),
        "the directory past PATH_MAX: {failed:?}"
    );
    // survey --json: one document; its plan names every stale file.
    let out = refreshd()
        .args([
            "survey",
            "--json",
            "--sample-bytes",
            "4MiB",
            "--min-free",
            "16MiB",
        ])
        .arg(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "survey: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    names_every_file(
        &json_lines(&out.stdout, "survey --json"),
        &files,
        "survey --json",
    );
    // The daemon: its plan, a round, status, logs and metrics.
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let port = free_port();
    let cfg = config(
        tmp.path(),
        &root,
        port,
        "scan_interval = \"1h\"\nsample_interval = \"1h\"\n",
    );
    let d = Daemon::start(tmp.path(), &cfg, port);
    d.wait_for("the scan", 30, |dm| dm.status()["last_scan"].is_i64());
    let (code, plan, err) = d.ctl(&["--json", "plan"]);
    assert_eq!(code, 0, "plan: {err}");
    names_every_file(&json_lines(plan.as_bytes(), "plan"), &files, "plan --json");
    let (code, out, err) = d.ctl(&["now", "--force", "--wait"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("refreshed {} file(s)", files.len())),
        "{out}"
    );
    let (code, status, _) = d.ctl(&["--json", "status"]);
    assert_eq!(code, 0);
    json_lines(status.as_bytes(), "status");
    let (code, table, _) = d.ctl(&["plan"]);
    assert_eq!(code, 0);
    assert!(!table.contains('\x1b'), "{table}");
    // The classic text format, as curl gets it, for promtool.
    let metrics = http_get_accepting(port, "/metrics", "*/*");
    let body = metrics
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    drop(d);
    let log = std::fs::read_to_string(tmp.path().join("daemon.log")).unwrap();
    for line in log.lines() {
        let t = line.split_whitespace().next().unwrap_or("");
        assert!(
            t.len() >= 20 && t.as_bytes()[4] == b'-' && t.ends_with('Z'),
            "a log line that is not refreshd's: {line:?}"
        );
        assert!(!line.contains('\x1b'), "{line:?}");
    }
    for f in &files {
        let shown = pathtext::Log(f).to_string();
        assert!(log.contains(&shown), "the log names {shown}");
    }
    assert!(
        log.contains("FORGED LOG LINE"),
        "the deep directory's problem is logged"
    );
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(check.stdin.as_mut().unwrap(), body.as_bytes()).unwrap();
    let checked = check.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    // A real one-shot refresh --json (not a dry run): each file's record
    // names it, refreshed.
    let out = refreshd()
        .args(["refresh", "--json", "--no-progress"])
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "the deep directory fails");
    let lines = json_lines(&out.stdout, "refresh --json");
    names_every_file(&lines, &files, "refresh --json (real)");
    let refreshed = lines.iter().filter(|l| l["status"] == "refreshed").count();
    assert_eq!(refreshed, files.len(), "{lines:?}");
    for f in &files {
        assert!(std::fs::read(f).is_ok());
    }
}

#[test]
fn privileged_byte_names_pass_through_every_output() {
    if !privileged("privileged_byte_names_pass_through_every_output") {
        return;
    }
    let fs = LoopFs::new("ext4", 512);
    let case = std::sync::atomic::AtomicUsize::new(0);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 8,
        ..ProptestConfig::default()
    });
    runner
        .run(&proptest::collection::vec(name_strategy(), 3..6), |names| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            one_case(&fs, n, &names);
            Ok(())
        })
        .unwrap();
}
