//! refreshctl on its own: what it says without a daemon, what it offers,
//! and what it is built from.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

fn refreshctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_refreshctl"))
}

#[test]
fn without_a_daemon_it_says_so_and_exits_1() {
    let dir = std::env::temp_dir().join(format!("refreshctl-test-{}", std::process::id()));
    let socket = dir.join("control.sock");
    let out = refreshctl()
        .arg("--socket")
        .arg(&socket)
        .arg("status")
        .env_remove("REFRESHCTL_SOCKET")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("not running") && stderr.contains(&socket.display().to_string()),
        "{stderr}"
    );
}

#[test]
fn help_offers_every_verb_and_nothing_hidden() {
    let out = refreshctl().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for verb in [
        "status", "drives", "plan", "survey", "now", "pause", "resume",
    ] {
        assert!(help.contains(verb), "{verb} missing: {help}");
    }
    assert!(!help.contains("__"), "{help}");
}

/// refreshctl is built from the protocol crate alone: nothing of the
/// daemon's I/O, database or fleet links into it.
#[test]
fn it_depends_on_no_io_uring_sqlite_etcd_or_tokio() {
    let lock =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).unwrap();
    let lock: toml::Table = lock.parse().unwrap();
    let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in lock["package"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap().to_string();
        let d = p.get("dependencies").and_then(|d| d.as_array());
        let names = d.map_or_else(Vec::new, |d| {
            d.iter()
                .filter_map(|x| x.as_str())
                .map(|x| x.split(' ').next().unwrap_or(x).to_string())
                .collect()
        });
        deps.entry(name).or_default().extend(names);
    }
    let mut seen = BTreeSet::new();
    let mut todo = vec!["refreshctl".to_string()];
    while let Some(n) = todo.pop() {
        if seen.insert(n.clone()) {
            todo.extend(deps.get(&n).cloned().unwrap_or_default());
        }
    }
    for banned in [
        "io-uring",
        "rusqlite",
        "libsqlite3-sys",
        "etcd-client",
        "tokio",
        "refreshd",
    ] {
        assert!(!seen.contains(banned), "refreshctl depends on {banned}");
    }
    assert!(seen.contains("refreshd-protocol"));
}
