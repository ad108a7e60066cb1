//! The README's walkthrough runs as pasted. The Quickstart's daemon block
//! (an aged testbed drive, the daemon, `refreshctl status`, the metrics,
//! the teardown) is taken from README.md and run by bash, with the two
//! changes a test needs: the binaries this build made instead of
//! `target/release/` (so no `cargo build` line), and a temp dir instead of
//! `/var/tmp/tb`. Bash runs it with `-e -o pipefail`: any line that fails
//! (a `grep` that finds nothing included) fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::helpers::*;

const README: &str = include_str!("../README.md");

/// The first ```sh block that contains `needle`.
fn block_with(needle: &str) -> String {
    let mut blocks = README.split("```sh\n").skip(1);
    blocks
        .find_map(|b| {
            let body = b.split("```").next()?;
            body.contains(needle).then(|| body.to_string())
        })
        .unwrap_or_else(|| panic!("README.md has no sh block with {needle:?}"))
}

/// Tears the walkthrough down whatever happened: the daemon, the drive.
struct Teardown {
    agingssd: PathBuf,
    tb: PathBuf,
    config: PathBuf,
}

impl Drop for Teardown {
    fn drop(&mut self) {
        let _ = Command::new("pkill")
            .arg("-f")
            .arg(format!("refreshd run --config {}", self.config.display()))
            .status();
        if self.tb.join("mnt").exists() {
            let _ = Command::new(&self.agingssd)
                .args(["down", "--dir"])
                .arg(&self.tb)
                .status();
        }
    }
}

#[test]
fn privileged_the_quickstart_daemon_block_runs_as_pasted() {
    if !privileged("privileged_the_quickstart_daemon_block_runs_as_pasted") {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_refreshd")).parent().unwrap();
    let agingssd = bin.join("agingssd");
    assert!(
        agingssd.exists() && refreshctl().exists(),
        "run with `cargo test --workspace` (agingssd and refreshctl are built beside refreshd)"
    );
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let tb = tmp.path().join("tb");
    let _teardown = Teardown {
        agingssd: agingssd.clone(),
        tb: tb.clone(),
        config: tmp.path().join("tb.toml"),
    };
    let script = block_with("agingssd up")
        .lines()
        .filter(|l| !l.starts_with("cargo build"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("target/release/", &format!("{}/", bin.display()))
        .replace("/var/tmp/tb", &tb.display().to_string());
    assert!(
        script.contains("refreshctl") && script.contains("metrics"),
        "{script}"
    );
    let out = Command::new("timeout")
        .args(["180", "bash", "-e", "-o", "pipefail", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the block failed ({}):\n{script}\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("DEVICE") && stdout.contains("STATE"),
        "{stdout}"
    );
    assert!(stdout.contains("refreshd_drive_state{"), "{stdout}");
}
