//! A whole emulated drive: the FUSE disk, a loop device over it (direct I/O
//! on, so nothing is cached between the filesystem and the "flash"), a real
//! filesystem, mounted. [`Drive`] tears everything down on drop, also when
//! a test panics.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use fuser::{BackgroundSession, Config, MountOption};

use crate::disk::{AgingDisk, DiskState, Stats, IMAGE_NAME};
use crate::host::{self, abort_fuse, unmount, wait_released};
use crate::model::Model;

/// How to build a drive.
#[derive(Debug, Clone)]
pub struct DriveOptions {
    pub size: u64,
    /// ext4, xfs or btrfs.
    pub fs: String,
    pub model: Model,
    pub channels: u32,
    /// Real seconds per virtual month (the clock also moves by itself).
    pub month_seconds: Option<f64>,
}

impl Default for DriveOptions {
    fn default() -> Self {
        DriveOptions {
            size: 2 << 30,
            fs: "ext4".into(),
            model: Model::preset("840evo").expect("preset exists"),
            channels: 8,
            month_seconds: None,
        }
    }
}

/// Paths of a drive's state directory.
pub fn fuse_dir(dir: &Path) -> PathBuf {
    dir.join("fuse")
}
pub fn mnt_dir(dir: &Path) -> PathBuf {
    dir.join("mnt")
}
pub fn image_path(dir: &Path) -> PathBuf {
    fuse_dir(dir).join(IMAGE_NAME)
}

/// Runs a command, failing with its stderr.
pub fn sh(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Says what is missing to build a drive on this machine, if anything.
pub fn preflight() -> Result<()> {
    if !nix::unistd::Uid::effective().is_root() {
        bail!("agingssd needs root (FUSE mount, loop devices, mkfs, mount)");
    }
    if !Path::new("/dev/fuse").exists() {
        bail!("/dev/fuse is missing: load the fuse module (modprobe fuse)");
    }
    if !Path::new("/dev/loop-control").exists() {
        bail!("/dev/loop-control is missing: load the loop module (modprobe loop)");
    }
    Ok(())
}

/// A mounted emulated drive.
pub struct Drive {
    pub dir: PathBuf,
    pub mnt: PathBuf,
    pub loop_dev: String,
    pub state: Arc<DiskState>,
    session: Option<BackgroundSession>,
    mounted: bool,
}

impl std::fmt::Debug for Drive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drive")
            .field("dir", &self.dir)
            .field("loop_dev", &self.loop_dev)
            .finish()
    }
}

impl Drive {
    /// Builds the drive under `dir` (which must exist).
    pub fn up(dir: &Path, opts: &DriveOptions) -> Result<Drive> {
        preflight()?;
        let mkfs: Vec<&str> = match opts.fs.as_str() {
            // Inode tables zeroed by mkfs, not by ext4's lazy init after
            // the mount: its zero-ranges are discards, and a discard at a
            // random later moment cures a fade a test has just set (the
            // journal too, by mkfs, at the cost of one zero-range).
            "ext4" => vec![
                "mkfs.ext4",
                "-q",
                "-F",
                "-E",
                "nodiscard,lazy_itable_init=0,lazy_journal_init=0",
            ],
            "xfs" => vec!["mkfs.xfs", "-q", "-f", "-K"],
            "btrfs" => vec!["mkfs.btrfs", "-q", "-f", "-K"],
            other => bail!("unknown filesystem {other:?}: expected ext4, xfs or btrfs"),
        };
        let dir = dir
            .canonicalize()
            .with_context(|| format!("{}", dir.display()))?;
        for d in [fuse_dir(&dir), mnt_dir(&dir)] {
            fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        }
        host::warn_if_larger_than_memory(opts.size);
        let state = Arc::new(
            DiskState::in_memory(opts.size, opts.model, opts.channels, opts.month_seconds)
                .context("creating the drive's flash (a memfd)")?,
        );
        let mut config = Config::default();
        config.mount_options = vec![MountOption::FSName("agingssd".into()), MountOption::NoAtime];
        config.n_threads = Some(opts.channels as usize * 2 + 2);
        config.clone_fd = true;
        let session = fuser::spawn_mount(AgingDisk::new(state.clone()), fuse_dir(&dir), &config)
            .context("mounting the FUSE disk")?;
        let mut drive = Drive {
            mnt: mnt_dir(&dir),
            dir,
            loop_dev: String::new(),
            state,
            session: Some(session),
            mounted: false,
        };
        // From here on Drop cleans up whatever was set up.
        drive.loop_dev = sh(Command::new("losetup")
            .args([
                "--find",
                "--show",
                "--direct-io=on",
                "--sector-size",
                "4096",
            ])
            .arg(image_path(&drive.dir)))?;
        host::pin_queue(&drive.loop_dev)?;
        sh(Command::new(mkfs[0]).args(&mkfs[1..]).arg(&drive.loop_dev))?;
        // No online discard: btrfs turns `discard=async` on by itself
        // (Linux 6.2 on) on a device that takes discards, and its
        // discards, minutes after a delete, would cure a fade at a moment
        // of their own (ext4 and XFS default to this already).
        sh(Command::new("mount")
            .args(["-o", "nodiscard"])
            .arg(&drive.loop_dev)
            .arg(&drive.mnt))?;
        drive.mounted = true;
        Ok(drive)
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Ages every written block by `months` (time travel).
    pub fn age(&self, months: f64) {
        self.state.age(months);
    }

    /// Reads touching device bytes `[offset, offset + len)` fail with EIO.
    pub fn fault(&self, offset: u64, len: u64) {
        self.state.add_fault(offset, len);
    }

    /// Caps the drive's link at `bytes_per_sec` (0 lifts it): every byte
    /// is slow, fresh or old, like a port negotiated down.
    pub fn link_cap(&self, bytes_per_sec: u64) {
        self.state.set_link_cap(bytes_per_sec);
    }

    /// Write-path fade: after `after_bytes` written since the last
    /// discard, every request is `factor` times slower (0 turns it off).
    pub fn fade(&self, after_bytes: u64, factor: u64) {
        self.state.set_fade(after_bytes, factor);
    }

    /// Writes touching the device range fail with EIO.
    pub fn write_fault(&self, offset: u64, len: u64) {
        self.state.add_write_fault(offset, len);
    }

    pub fn stats(&self) -> Stats {
        self.state.stats()
    }

    /// Flushes the filesystem so everything is on the "flash".
    pub fn sync(&self) -> Result<()> {
        let f = File::open(&self.mnt)?;
        nix::unistd::syncfs(&f)?;
        Ok(())
    }

    /// Tears down now (also done on drop).
    pub fn down(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let mut first_err = None;
        if self.mounted {
            unmount(&self.mnt);
            self.mounted = false;
        }
        if !self.loop_dev.is_empty() {
            if let Err(e) = sh(Command::new("losetup").arg("-d").arg(&self.loop_dev)) {
                first_err.get_or_insert(e);
            }
            // Detaching is asynchronous: the loop device keeps the image
            // open until it is released, and the FUSE unmount below would
            // fail with EBUSY.
            wait_released(&self.loop_dev);
            self.loop_dev.clear();
        }
        if let Some(s) = self.session.take() {
            if s.umount_and_join().is_err() {
                unmount(&fuse_dir(&self.dir));
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Drive {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A failing test shows what the drive did: its counters say
            // whether the emulator kept to its model meanwhile.
            eprintln!(
                "agingssd drive {} at the failure:\n{}",
                self.loop_dev,
                self.stats().render()
            );
        }
        if let Err(e) = self.teardown() {
            eprintln!("agingssd: tearing down {}: {e:#}", self.dir.display());
        }
    }
}

/// Cleans up after a drive whose process died: unmounts the filesystem,
/// detaches every loop device backed by its image, unmounts the FUSE
/// mount. Idempotent; leaves nothing behind.
pub fn cleanup_leftovers(dir: &Path) -> Result<()> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    // First abort the FUSE connection: with its server dead, I/O through
    // the loop device would wait forever (and so would umount and the
    // dying server's own threads). Aborting fails those requests at once.
    abort_fuse(&fuse_dir(&dir));
    let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mounted = |p: &Path| {
        mounts
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(&*p.to_string_lossy()))
    };
    let mnt = mnt_dir(&dir);
    if mounted(&mnt) {
        unmount(&mnt);
    }
    let image = image_path(&dir);
    for entry in fs::read_dir("/sys/block")?.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !name.starts_with("loop") {
            continue;
        }
        let backing =
            fs::read_to_string(entry.path().join("loop/backing_file")).unwrap_or_default();
        if Path::new(backing.trim()) == image {
            sh(Command::new("losetup")
                .arg("-d")
                .arg(format!("/dev/{name}")))?;
        }
    }
    let fuse = fuse_dir(&dir);
    if mounted(&fuse) {
        unmount(&fuse);
    }
    Ok(())
}
