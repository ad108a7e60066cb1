//! The host's side of a drive: the loop device's queue, mount points and
//! the FUSE connection — kernel objects that outlive a drive and are reused
//! by the next one.

use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

/// Aborts the FUSE connection mounted at `mountpoint`, if any, through
/// fusectl (`/sys/fs/fuse/connections/<minor>/abort`).
pub(crate) fn abort_fuse(mountpoint: &Path) {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let target = mountpoint.to_string_lossy();
    let Some(minor) = info.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(4) == Some(&&*target))
            .then(|| f.get(2)?.split(':').nth(1).map(str::to_string))
            .flatten()
    }) else {
        return;
    };
    let conns = Path::new("/sys/fs/fuse/connections");
    let empty = fs::read_dir(conns)
        .map(|mut d| d.next().is_none())
        .unwrap_or(true);
    let mounted_here = empty
        && Command::new("mount")
            .args(["-t", "fusectl", "fusectl"])
            .arg(conns)
            .status()
            .is_ok_and(|s| s.success());
    let _ = fs::write(conns.join(minor).join("abort"), "1");
    // Leave the system as we found it.
    if mounted_here {
        let _ = Command::new("umount").arg(conns).status();
    }
}

/// Unmounts `path`, retrying for up to 5 s while it is busy, then
/// detaches it lazily (it goes away once the last user is gone). Never
/// fails: cleanup goes on regardless.
pub fn unmount(path: &Path) {
    // A process that is still exiting (one just killed) keeps the mount
    // busy for a moment: a lazy unmount then would leave the filesystem
    // alive, and mounting it again (XFS: "duplicate UUID") would fail.
    let t = std::time::Instant::now();
    while is_mount_point(path) {
        let ok = Command::new("umount")
            .arg(path)
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok {
            return;
        }
        if t.elapsed() > std::time::Duration::from_secs(5) {
            let _ = Command::new("umount").arg("-l").arg(path).status();
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Whether `path` is where something is mounted (/proc/self/mountinfo).
fn is_mount_point(path: &Path) -> bool {
    let Ok(want) = path.canonicalize() else {
        return false;
    };
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .is_some_and(|m| Path::new(&unescape_mount(m)) == want)
    })
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mount(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Waits (up to 5 s) until a detached loop device has let go of its file.
pub(crate) fn wait_released(loop_dev: &str) {
    let name = Path::new(loop_dev)
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let backing = Path::new("/sys/block").join(name).join("loop/backing_file");
    let t = std::time::Instant::now();
    while backing.exists() && t.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Sets a fresh loop device's queue to the kernel's defaults. A loop
/// device is a kernel object that outlives the drive: `losetup -d` keeps
/// its scheduler and writeback throttle, so a benchmark that chose `bfq`
/// for loop0 would otherwise hand it to every later drive on loop0.
pub fn pin_queue(loop_dev: &str) -> Result<()> {
    let name = Path::new(loop_dev)
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let queue = Path::new("/sys/block").join(name).join("queue");
    let scheduler = queue.join("scheduler");
    fs::write(&scheduler, "none").with_context(|| format!("writing {}", scheduler.display()))?;
    // -1 restores the default latency target; absent without CONFIG_BLK_WBT.
    let wbt = queue.join("wbt_lat_usec");
    if wbt.exists() {
        fs::write(&wbt, "-1").with_context(|| format!("writing {}", wbt.display()))?;
    }
    Ok(())
}

/// The flash lives in memory: says so when the drive could outgrow what
/// the host has available (it holds what is written, not its size).
pub fn warn_if_larger_than_memory(size: u64) {
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let available_kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok());
    if let Some(kib) = available_kib.filter(|&kib| size > kib * 1024) {
        eprintln!(
            "agingssd: the drive's flash is in memory: {} MiB written to it would take {} MiB \
             of RAM, and {} MiB are available",
            size >> 20,
            size >> 20,
            kib >> 10
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape_mount("/var/tmp/a\\040b"), "/var/tmp/a b");
        assert_eq!(unescape_mount("/x\\134y\\012"), "/x\\y\n");
        assert_eq!(unescape_mount("/plain\\04"), "/plain\\04");
    }

    #[test]
    fn the_root_is_a_mount_point_and_a_file_is_not() {
        assert!(is_mount_point(Path::new("/")));
        let f = tempfile::NamedTempFile::new().unwrap();
        assert!(!is_mount_point(f.path()));
    }
}
