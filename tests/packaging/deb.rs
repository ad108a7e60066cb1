//! The Debian package: its contents, units and maintainer scripts.

use super::*;

/// `cargo deb -p refreshd` (run by `.ci/run` before the tests) built a
/// package holding everything an operator needs; unpacked into a scratch
/// root, its units pass `systemd-analyze verify` against that root.
#[test]
fn privileged_debian_package_contents_and_units() {
    if !crate::helpers::privileged("privileged_debian_package_contents_and_units")
        || !tool("privileged_debian_package_contents_and_units", "dpkg-deb")
    {
        return;
    }
    let debs: Vec<_> = std::fs::read_dir(Path::new(ROOT).join("target/debian"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    let Some(deb) = debs
        .iter()
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
    else {
        if std::env::var("REFRESHD_REQUIRE_PRIVILEGED_TESTS").as_deref() == Ok("1") {
            panic!("no target/debian/*.deb: run `cargo deb -p refreshd` first (.ci/run does)");
        }
        crate::helpers::skipped(
            "privileged_debian_package_contents_and_units",
            "no target/debian/*.deb (cargo deb -p refreshd)",
        );
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let ok = Command::new("dpkg-deb")
        .arg("-x")
        .arg(deb)
        .arg(root.path())
        .status()
        .unwrap();
    assert!(ok.success());
    let control = tempfile::tempdir().unwrap();
    let ok = Command::new("dpkg-deb")
        .arg("-e")
        .arg(deb)
        .arg(control.path())
        .status()
        .unwrap();
    assert!(ok.success());
    let conffiles = std::fs::read_to_string(control.path().join("conffiles")).unwrap();
    assert!(
        conffiles.contains("/etc/refreshd/refreshd.toml"),
        "{conffiles}"
    );
    let has = |rel: &str| root.path().join(rel).exists();
    let units = root.path().join("usr/lib/systemd/system");
    for rel in [
        "usr/bin/refreshd",
        "usr/bin/refreshctl",
        "etc/refreshd/refreshd.toml",
        "usr/lib/systemd/system/refreshd.service",
        "usr/lib/systemd/system/refreshd-refresh@.service",
        "usr/share/bash-completion/completions/refreshd",
        "usr/share/bash-completion/completions/refreshctl",
        "usr/share/zsh/vendor-completions/_refreshd",
        "usr/share/fish/vendor_completions.d/refreshctl.fish",
        "usr/share/refreshd/refreshd-alerts.yml",
        "usr/share/refreshd/refreshd-dashboard.json",
        "usr/share/refreshd/timed-reads.conf",
        "usr/share/doc/refreshd/DESIGN.md",
    ] {
        assert!(has(rel), "the package lacks {rel}");
    }
    for page in [
        "refreshd",
        "refreshd-refresh",
        "refreshd-run",
        "refreshd-survey",
        "refreshd-check-config",
        "refreshctl",
        "refreshctl-status",
        "refreshctl-now",
    ] {
        let plain = format!("usr/share/man/man1/{page}.1");
        assert!(
            has(&plain) || has(&format!("{plain}.gz")),
            "the package lacks {plain}"
        );
    }
    // What the unit's Documentation= names is installed.
    let unit = std::fs::read_to_string(units.join("refreshd.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/refreshd run"), "{unit}");
    let docs = unit
        .lines()
        .find(|l| l.starts_with("Documentation="))
        .unwrap();
    for d in docs.trim_start_matches("Documentation=").split_whitespace() {
        if let Some(f) = d.strip_prefix("file://") {
            assert!(
                has(f.trim_start_matches('/')),
                "Documentation= names {f}, not installed"
            );
        }
    }
    // Stripped binaries; their symbols and line tables in refreshd-dbgsym,
    // found by build id (what a crash report's symbolizer looks up).
    let ddeb = deb.with_file_name(
        deb.file_name()
            .unwrap()
            .to_string_lossy()
            .replace("refreshd_", "refreshd-dbgsym_")
            .replace(".deb", ".ddeb"),
    );
    let dbg = tempfile::tempdir().unwrap();
    let ok = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&ddeb)
        .arg(dbg.path())
        .status()
        .unwrap();
    assert!(ok.success(), "{}", ddeb.display());
    for exe in ["refreshd", "refreshctl"] {
        let bin = root.path().join("usr/bin").join(exe);
        let size = std::fs::metadata(&bin).unwrap().len();
        assert!(size < 25 << 20, "{exe} is {size} bytes");
        let sections = Command::new("readelf")
            .arg("-S")
            .arg(&bin)
            .output()
            .unwrap();
        let sections = String::from_utf8_lossy(&sections.stdout);
        assert!(
            !sections.contains(".debug_info"),
            "{exe}: debug info left in"
        );
        let notes = Command::new("readelf")
            .arg("-n")
            .arg(&bin)
            .output()
            .unwrap();
        let notes = String::from_utf8_lossy(&notes.stdout);
        let id = notes
            .lines()
            .find_map(|l| l.trim().strip_prefix("Build ID: "))
            .unwrap_or_else(|| panic!("{exe}: no build id"));
        let debug = dbg
            .path()
            .join("usr/lib/debug/.build-id")
            .join(&id[..2])
            .join(format!("{}.debug", &id[2..]));
        assert!(
            debug.exists(),
            "{exe}: no symbols for build id {id} in {}",
            ddeb.display()
        );
    }
    // Enabled at install (the maintainer script does it).
    let postinst = std::fs::read_to_string(control.path().join("postinst")).unwrap();
    assert!(
        postinst.contains("deb-systemd-helper enable refreshd.service"),
        "{postinst}"
    );
    // The installed units, verified against the installed binary (the
    // scratch root has no systemd of its own to verify inside).
    let verify = tempfile::tempdir().unwrap();
    let installed_bin = root.path().join("usr/bin/refreshd");
    for (u, from) in [
        ("refreshd.service", "refreshd.service"),
        (
            "refreshd-refresh@srv-index.service",
            "refreshd-refresh@.service",
        ),
    ] {
        let text = std::fs::read_to_string(units.join(from)).unwrap();
        let path = verify.path().join(u);
        std::fs::write(
            &path,
            text.replace("/usr/bin/refreshd", &installed_bin.to_string_lossy()),
        )
        .unwrap();
        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let ours: Vec<&str> = err.lines().filter(|l| l.contains("refreshd")).collect();
        assert!(out.status.success() && ours.is_empty(), "{u}: {err}");
    }
}
