use std::path::Path;

use super::*;

#[test]
fn each_problem_is_named_at_its_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("real")).unwrap();
    std::os::unix::fs::symlink(d.join("real"), d.join("link")).unwrap();
    std::fs::write(d.join("file"), b"x").unwrap();
    let text = format!(
        "state_dir = \"{0}/file/state\"\n\
         [[paths]]\npath = \"{0}/missing\"\n\
         [[paths]]\npath = \"{0}/link\"\n\
         [[paths]]\npath = \"{0}/file\"\n",
        d.display()
    );
    let mut cfg = crate::config::parse(&text, "t.toml").unwrap();
    cfg.source = Some("t.toml".into());
    let problems: Vec<String> = check(&cfg).iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 4, "{problems:#?}");
    assert!(
        problems[0].starts_with("t.toml:1:13: state_dir"),
        "{}",
        problems[0]
    );
    assert!(
        problems[0].contains("is not a directory"),
        "{}",
        problems[0]
    );
    assert!(
        problems[1].starts_with("t.toml:3:8: tree"),
        "{}",
        problems[1]
    );
    assert!(problems[1].contains("does not exist"), "{}", problems[1]);
    assert!(problems[2].contains("is a symlink"), "{}", problems[2]);
    assert!(
        problems[3].contains("is not a directory"),
        "{}",
        problems[3]
    );
}

#[test]
fn an_unsupported_filesystem_is_named() {
    // /proc is never ext4, xfs or btrfs.
    let m = tree_problem(Path::new("/proc")).unwrap();
    assert!(
        m.contains("does not rewrite") && m.contains("on proc"),
        "{m}"
    );
    assert!(tree_problem(Path::new("/proc/self/cwd"))
        .unwrap()
        .contains("symlink"));
}

#[test]
fn trees_on_one_drive_must_agree_on_their_settings() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    if let Err(e) = crate::drive::drives_of(d) {
        eprintln!("skipped: the temporary directory is on no drive this test can find ({e})");
        return;
    }
    for t in ["a", "b", "c"] {
        std::fs::create_dir(d.join(t)).unwrap();
    }
    let text = format!(
        "[defaults]\nwindow = \"01:00-05:00\"\n\
         [[paths]]\npath = \"{0}/a\"\nrate = \"10MiB/s\"\n\
         [[paths]]\npath = \"{0}/b\"\nstale_after = \"30d\"\nrate = \"20MiB/s\"\n\
         [[paths]]\npath = \"{0}/c\"\nrate = \"10MiB/s\"\n",
        d.display()
    );
    let mut cfg = crate::config::parse(&text, "t.toml").unwrap();
    cfg.source = Some("t.toml".into());
    let problems: Vec<String> = check(&cfg).iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    let p = &problems[0];
    assert!(p.starts_with("t.toml:9:8: tree "), "at b's `rate`: {p}");
    assert!(
        p.contains("/b is on drive") && p.contains("/a (line 4)"),
        "names both trees: {p}"
    );
    assert!(
        p.contains("rate = \"20MiB/s\" here, \"10MiB/s\" there"),
        "says what differs: {p}"
    );
    let (placed, unplaced) = place(&cfg);
    assert_eq!(placed.len(), 1);
    let roots: Vec<&Path> = placed[0].roots.iter().map(|r| r.as_path()).collect();
    assert_eq!(
        roots,
        [d.join("a").as_path(), d.join("c").as_path()],
        "c agrees with a"
    );
    assert_eq!(placed[0].settings.rate, crate::units::Rate(10 << 20));
    assert_eq!(unplaced.len(), 1);
    assert_eq!(unplaced[0].path, d.join("b"));
    // Set once, in [defaults], the trees agree.
    let text = format!(
        "[defaults]\nrate = \"10MiB/s\"\n[[paths]]\npath = \"{0}/a\"\n[[paths]]\npath = \"{0}/b\"\n",
        d.display()
    );
    let cfg = crate::config::parse(&text, "t.toml").unwrap();
    assert!(check(&cfg).is_empty());
}

#[test]
fn a_filesystem_refreshd_does_not_rewrite_is_named() {
    let m = tree_problem(Path::new("/sys")).unwrap();
    assert!(
        m.contains("on sysfs, which refreshd does not rewrite"),
        "{m}"
    );
}
