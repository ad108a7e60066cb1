//! `refreshd refresh --stale-after`: files found in directories whose
//! data is younger (by mtime, or by the daemon's record of their last
//! refresh) are left alone; files named on the command line are always
//! refreshed.

use std::path::Path;

use crate::helpers::{fingerprint, privileged, refresh_json, set_mtime, write_file, LoopFs};

const DAY: i64 = 86_400;

fn now() -> i64 {
    refreshd::clock::now_secs()
}

fn outcome_of(files: &[serde_json::Value], p: &Path) -> Option<String> {
    let shown = p.display().to_string();
    files
        .iter()
        .find(|f| f["path"] == shown.as_str())
        .map(|f| f["status"].as_str().unwrap_or("?").to_string())
}

#[test]
fn privileged_stale_after_leaves_younger_files_alone() {
    if !privileged("privileged_stale_after_leaves_younger_files_alone") {
        return;
    }
    let fs = LoopFs::new("ext4", 128);
    let dir = fs.path("index");
    std::fs::create_dir(&dir).unwrap();
    let (old, young, refreshed_lately) = (dir.join("old"), dir.join("young"), dir.join("lately"));
    let named = fs.path("named");
    for p in [&old, &young, &refreshed_lately, &named] {
        write_file(p, &vec![0x5a; 1 << 20]);
    }
    for p in [&old, &refreshed_lately] {
        set_mtime(p, now() - 60 * DAY, 0);
    }
    // The daemon's record: `lately` was refreshed yesterday.
    let state = fs.dir.path().join("state");
    {
        let mut store = refreshd::inventory::Store::open(&state).unwrap();
        store.scan(&dir).unwrap();
        let rec = store
            .files(&dir)
            .unwrap()
            .into_iter()
            .find(|f| f.path == refreshed_lately)
            .unwrap();
        assert!(store.mark_refreshed(rec.key(), now() - DAY, None).unwrap());
    }
    let before: Vec<_> = [&old, &young, &refreshed_lately, &named]
        .iter()
        .map(|p| fingerprint(p))
        .collect();
    let state_arg = state.display().to_string();
    let (code, files, summary) = refresh_json(
        &["--stale-after", "30d", "--state-dir", &state_arg],
        &[&dir, &named],
    );
    assert_eq!(code, 0, "{files:?} {summary}");
    assert_eq!(outcome_of(&files, &old).as_deref(), Some("refreshed"));
    assert_eq!(
        outcome_of(&files, &named).as_deref(),
        Some("refreshed"),
        "named: always"
    );
    assert_eq!(outcome_of(&files, &young), None, "younger than 30 days");
    assert_eq!(
        outcome_of(&files, &refreshed_lately),
        None,
        "the daemon refreshed it yesterday"
    );
    assert_eq!(summary["younger"], 2, "{summary}");
    // Without the daemon's record, `lately` is aged by its mtime: due.
    let empty = fs.dir.path().join("no-record");
    let (code, files, summary) = refresh_json(
        &[
            "--stale-after",
            "30d",
            "--state-dir",
            &empty.display().to_string(),
        ],
        &[&dir],
    );
    assert_eq!(code, 0, "{files:?}");
    assert_eq!(
        outcome_of(&files, &refreshed_lately).as_deref(),
        Some("refreshed")
    );
    assert_eq!(summary["younger"], 1, "{summary}");
    // Nothing about any file changed but what a refresh may change.
    for (p, b) in [&old, &young, &refreshed_lately, &named].iter().zip(before) {
        assert_eq!(fingerprint(p), b, "{}", p.display());
    }
}
