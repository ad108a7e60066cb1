//! Running the one-shot `refreshd refresh` as a test does: the binary,
//! its JSON report by path, and a seccomp filter in front of it.

use std::path::Path;
use std::process::{Command, Output};

/// The `refreshd` binary built for this test run.
/// Its recovery journal goes to cargo's temp dir for tests, never into
/// the machine's /var/lib/refreshd (tests that test recovery pass their
/// own `--state-dir`).
pub fn refreshd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_refreshd"));
    c.env(
        "REFRESHD_STATE_DIR",
        concat!(env!("CARGO_TARGET_TMPDIR"), "/oneshot-state"),
    );
    c
}

/// Runs `refreshd refresh --json ARGS`; returns (exit code, per-file
/// objects by path, summary).
pub fn refresh_json(
    args: &[&str],
    paths: &[&Path],
) -> (i32, Vec<serde_json::Value>, serde_json::Value) {
    refresh_json_by(refreshd(), args, paths)
}

/// [`refresh_json`] with `openat2` answered by `errno` (a seccomp filter,
/// as systemd's sandbox does), or as on a plain host (`None`).
pub fn refresh_json_openat2(
    openat2: Option<i32>,
    args: &[&str],
    paths: &[&Path],
) -> (i32, Vec<serde_json::Value>, serde_json::Value) {
    let refusal = openat2.map(|errno| testbed::seccomp::Refusal {
        syscall: testbed::seccomp::SYS_OPENAT2,
        arg1: None,
        errno,
    });
    refresh_json_refusing(refusal, args, paths)
}

/// [`refresh_json`] under a seccomp filter with `refusal` (an injected
/// error: a call, or one ioctl request, answered with an errno).
pub fn refresh_json_refusing(
    refusal: Option<testbed::seccomp::Refusal>,
    args: &[&str],
    paths: &[&Path],
) -> (i32, Vec<serde_json::Value>, serde_json::Value) {
    let mut cmd = refreshd();
    if let Some(r) = refusal {
        // SAFETY: refuse_all is async-signal-safe (prctl on a stack array).
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                testbed::seccomp::refuse_all(&[r])
            });
        }
    }
    refresh_json_by(cmd, args, paths)
}

fn refresh_json_by(
    mut cmd: Command,
    args: &[&str],
    paths: &[&Path],
) -> (i32, Vec<serde_json::Value>, serde_json::Value) {
    let out = cmd
        .arg("refresh")
        .arg("--json")
        .args(args)
        .args(paths)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut files = vec![];
    let mut summary = serde_json::Value::Null;
    for line in stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| {
            panic!(
                "bad JSON line {line:?}: {e}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        if let Some(s) = v.get("summary") {
            summary = s.clone();
        } else {
            files.push(v);
        }
    }
    (out.status.code().unwrap_or(-1), files, summary)
}

pub fn status_of<'a>(files: &'a [serde_json::Value], path: &Path) -> &'a serde_json::Value {
    files
        .iter()
        .find(|v| v["path"].as_str() == Some(path.to_str().unwrap()))
        .unwrap_or_else(|| panic!("no report for {}: {files:#?}", path.display()))
}

/// A finished command's exit code (-1: killed by a signal), stdout and
/// stderr.
pub fn captured(out: Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `refreshd check-config --config CFG`: (exit code, stdout, stderr).
pub fn check_config(cfg: &Path) -> (i32, String, String) {
    captured(
        refreshd()
            .args(["check-config", "--config"])
            .arg(cfg)
            .output()
            .unwrap(),
    )
}
