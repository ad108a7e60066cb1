//! A daemon over stale files on a testbed drive, ready to be acted on.

use std::path::PathBuf;

use super::*;
use crate::helpers::*;

/// A daemon over stale files on a testbed drive, with what the files
/// were. Fields drop in order: the daemon, then the drive, then the
/// directory.
pub struct Scene {
    pub daemon: Daemon,
    pub files: Vec<PathBuf>,
    pub before: Vec<Fingerprint>,
    pub tree: PathBuf,
    pub drive: Drive,
    pub tmp: tempfile::TempDir,
}

/// `n` stale files of `mib` MiB (seeded `seed`) under `index` on a drive
/// with `model`, and a daemon watching them with `extra` settings.
pub fn scene(model: &str, n: usize, mib: usize, seed: u64, extra: &str) -> Scene {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let drive = drive(tmp.path(), model);
    let tree = drive.path("index");
    let files = stale_files(&tree, n, mib, seed);
    drive.sync().unwrap();
    let before = files.iter().map(|p| fingerprint(p)).collect();
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, extra);
    let daemon = Daemon::start(tmp.path(), &cfg, port);
    Scene {
        daemon,
        files,
        before,
        tree,
        drive,
        tmp,
    }
}
