//! A state directory written by the previous release opens in this one:
//! the schema-1 database (`tests/fixtures/schema-1`, as refreshd 0.1.0's
//! daemon wrote it, with a refresh killed mid-file) is migrated with every
//! `last_refresh` and checkpoint kept, its recovery record (format 1) is
//! acted on, and a database of a newer schema is refused with what to do.

use std::fmt::Write as _;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::daemon_harness::*;
use crate::helpers::*;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/schema-1");
/// 6 months before the fixture was made (its files' mtime).
const MTIME_OLD: i64 = 1_779_717_259;

fn ns(s: i64, n: i64) -> i64 {
    s * 1_000_000_000 + n
}

fn btime_ns(p: &Path) -> i64 {
    let st = rustix::fs::statx(
        rustix::fs::CWD,
        p,
        rustix::fs::AtFlags::empty(),
        rustix::fs::StatxFlags::BTIME,
    )
    .unwrap();
    ns(st.stx_btime.tv_sec, i64::from(st.stx_btime.tv_nsec))
}

fn generation(p: &Path) -> u32 {
    let f = std::fs::File::open(p).unwrap();
    refreshd::io::syscalls::inode_generation(f.as_fd()).unwrap()
}

/// The fixture's files, made again, and the template filled with them.
struct Made {
    root: PathBuf,
    big: PathBuf,
    f2: PathBuf,
    vars: Vec<(&'static str, String)>,
}

fn make(fs: &LoopFs) -> Made {
    let root = fs.path("index");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let mut vars: Vec<(&'static str, String)> = vec![];
    let mut file = |name: &str, mib: usize, key: &'static str| -> PathBuf {
        let p = root.join(name);
        write_file(&p, &pattern(mib << 20, mib as u64));
        set_mtime(&p, MTIME_OLD, 639_664_696);
        vars.push((
            leak(format!("{{INO_{key}}}")),
            p.metadata().unwrap().ino().to_string(),
        ));
        vars.push((leak(format!("{{BTIME_{key}}}")), btime_ns(&p).to_string()));
        vars.push((leak(format!("{{GEN_{key}}}")), generation(&p).to_string()));
        p
    };
    let f0 = file("f0", 4, "F0");
    file("f1", 4, "F1");
    let f2 = file("f2", 4, "F2");
    let big = file("sub/big", 48, "BIG");
    // f2's mtime: 1901-12-13 (ext4 clamps earlier dates there).
    set_mtime(&f2, -2_147_483_648, 0);
    fs.sync();
    let now = refreshd::clock::now_secs();
    let dev = f0.metadata().unwrap().dev();
    let mut hex = String::new();
    for b in root.as_os_str().as_bytes().iter().chain(b"/") {
        write!(hex, "{b:02X}").unwrap();
    }
    vars.extend([
        ("{DEV}", dev.to_string()),
        ("{ROOT_HEX}", hex),
        ("{ROOT}", root.display().to_string()),
        ("{MTIME_OLD}", ns(MTIME_OLD, 639_664_696).to_string()),
        ("{REFRESHED_F0}", (now - 3600).to_string()),
        ("{REFRESHED_F1}", (now - 3500).to_string()),
        ("{CHECKPOINTED}", (now - 60).to_string()),
    ]);
    Made {
        root,
        big,
        f2,
        vars,
    }
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn fill(template: &str, vars: &[(&str, String)]) -> String {
    let mut s = template.to_string();
    for (k, v) in vars {
        s = s.replace(k, v);
    }
    assert!(!s.contains('{') || s.contains("{\""), "unfilled: {s}");
    s
}

/// The schema-1 state directory: the database, and the killed refresh's
/// recovery record (format 1) in a dead owner's journal directory. The
/// kill moved big's mtime: the record vouches for it as it is now.
fn old_state(state: &Path, m: &mut Made) {
    std::fs::create_dir_all(state).unwrap();
    let sql = std::fs::read_to_string(Path::new(FIXTURE).join("state.sql")).unwrap();
    let conn = rusqlite::Connection::open(state.join("state.db")).unwrap();
    conn.execute_batch(&fill(&sql, &m.vars)).unwrap();
    drop(conn);
    // What the killed refresh left: its own write moved the mtime.
    set_mtime(&m.big, MTIME_OLD + 15_000_000, 481_360_296);
    let md = m.big.metadata().unwrap();
    m.vars.extend([
        ("{CTIME_TAKEN}", ns(md.ctime() - 1, 0).to_string()),
        ("{LEFT_MTIME}", ns(md.mtime(), md.mtime_nsec()).to_string()),
        ("{LEFT_CTIME}", ns(md.ctime(), md.ctime_nsec()).to_string()),
    ]);
    let rec = std::fs::read_to_string(Path::new(FIXTURE).join("journal-record.json")).unwrap();
    let json = fill(rec.trim_end(), &m.vars);
    let owner = state.join("journal/run-1-1");
    std::fs::create_dir_all(&owner).unwrap();
    // The dead process's lock file (no one holds its flock any more).
    std::fs::write(owner.join(".lock"), b"").unwrap();
    let sum = xxhash_rust::xxh3::xxh3_64(json.as_bytes());
    let name = format!("{}-{}", md.dev(), md.ino());
    std::fs::write(owner.join(name), format!("{json}\n{sum:016x}\n")).unwrap();
}

#[test]
fn privileged_a_schema_1_state_directory_is_migrated_and_recovered() {
    if !privileged("privileged_a_schema_1_state_directory_is_migrated_and_recovered") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let fs = LoopFs::new("ext4", 256);
    let mut m = make(&fs);
    let state = tmp.path().join("state");
    old_state(&state, &mut m);
    let port = free_port();
    let cfg = config(
        tmp.path(),
        &m.root,
        port,
        "scan_interval = \"1h\"\nsample_interval = \"1h\"\nsample_bytes = \"4MiB\"\nmin_free = \"16MiB\"\n",
    );
    let d = Daemon::start(tmp.path(), &cfg, port);
    let log = d.log();
    assert!(log.contains("migrated from schema 1 to 2"), "{log}");
    assert_eq!(
        m.big.metadata().unwrap().mtime(),
        MTIME_OLD,
        "the format-1 record was recovered:\n{log}"
    );
    d.wait_for("the first scan", 30, |dm| dm.status()["last_scan"].is_i64());
    let s = d.status();
    assert_eq!(s["files"], 4, "{s:#}");
    assert_eq!(
        s["stale_files"], 2,
        "f0 and f1 keep their last refresh; f2 (1901) and big are stale: {s:#}"
    );
    let (_, plan, _) = d.ctl(&["--json", "plan"]);
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    let planned: Vec<&str> = plan[0]["plan"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        planned,
        [m.f2.to_str().unwrap(), m.big.to_str().unwrap()],
        "oldest first"
    );
    let (code, out, err) = d.ctl(&["now", "--force", "--wait"]);
    assert_eq!(code, 0, "{out}{err}");
    let log = d.log();
    assert!(
        log.lines()
            .any(|l| l.contains("resuming from checkpoint") && l.contains("skip=28094976")),
        "the schema-1 checkpoint resumes:\n{log}"
    );
    drop(d);
    assert_eq!(m.big.metadata().unwrap().mtime(), MTIME_OLD);
    assert_eq!(m.f2.metadata().unwrap().mtime(), -2_147_483_648);
    let conn = rusqlite::Connection::open(state.join("state.db")).unwrap();
    let (version, keys): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT value FROM meta WHERE key = 'schema'),
                    (SELECT COUNT(*) FROM files WHERE fs NOT LIKE 'dev-%')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (version, keys),
        (2, 4),
        "every row keyed by the filesystem's UUID"
    );
}

#[test]
fn a_newer_schema_is_refused_with_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    drop(refreshd::inventory::Store::open(&state).unwrap());
    let conn = rusqlite::Connection::open(state.join("state.db")).unwrap();
    conn.execute("UPDATE meta SET value = 3 WHERE key = 'schema'", [])
        .unwrap();
    drop(conn);
    let before = std::fs::read(state.join("state.db")).unwrap();
    let err = refreshd::inventory::Store::open(&state)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("schema version 3, written by a newer refreshd")
            && err.contains("run the newer refreshd"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(state.join("state.db")).unwrap(),
        before,
        "left alone"
    );
}
