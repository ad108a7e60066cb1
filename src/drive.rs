//! Which physical drive(s) hold a file, through sysfs: partitions resolve to
//! their disk, device-mapper and md devices to their members, btrfs'
//! anonymous devices to the devices of its filesystem. Loop devices count as
//! drives (the testbed). Identity (model, serial, wwid) lets a drive keep its
//! history when its name changes; `/sys/block/X/stat` gives utilisation.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub use refreshd_protocol::drive::Drive;
use serde::Serialize;

/// Error mapping a file to its drives.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    #[error("{path}: {op}: {source}")]
    Io {
        path: PathBuf,
        op: &'static str,
        source: io::Error,
    },
    #[error("{path}: no block device found for device {dev} (not a local disk filesystem?)")]
    NoBlockDevice { path: PathBuf, dev: String },
}

const SYS: &str = "/sys";

fn read_trim(p: &Path) -> Option<String> {
    let s = fs::read_to_string(p).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// The drives holding `path` (usually one; several for md/dm/multi-device
/// btrfs), sorted by name.
pub fn drives_of(path: &Path) -> Result<Vec<Drive>, DriveError> {
    let st = rustix::fs::stat(path).map_err(|e| DriveError::Io {
        path: path.into(),
        op: "stat",
        source: e.into(),
    })?;
    let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
    let found = if major == 0 {
        // An anonymous device: btrfs (one per subvolume). Its drives are
        // listed under /sys/fs/btrfs/<fsid>/devices.
        btrfs_fsid(path).and_then(|fsid| btrfs_devices(&fsid))
    } else {
        drives_of_dev(major, minor)
    };
    found.ok_or_else(|| DriveError::NoBlockDevice {
        path: path.into(),
        dev: format!("{major}:{minor}"),
    })
}

/// The drives behind block device `major:minor`.
pub fn drives_of_dev(major: u32, minor: u32) -> Option<Vec<Drive>> {
    let sysdev = Path::new(SYS).join(format!("dev/block/{major}:{minor}"));
    let mut out = vec![];
    collect(&sysdev, &mut out, 0);
    out.sort();
    out.dedup();
    (!out.is_empty()).then_some(out)
}

/// Walks from a block device (disk, partition, dm, md) down to whole drives.
fn collect(sysdev: &Path, out: &mut Vec<Drive>, depth: u32) {
    if depth > 8 {
        return;
    }
    let Ok(real) = fs::canonicalize(sysdev) else {
        return;
    };
    // A partition: its parent directory is the disk.
    let disk = if real.join("partition").exists() {
        real.parent().map(Path::to_path_buf)
    } else {
        Some(real)
    };
    let Some(disk) = disk else { return };
    let slaves: Vec<PathBuf> = fs::read_dir(disk.join("slaves"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    if !slaves.is_empty() {
        for s in slaves {
            collect(&s, out, depth + 1);
        }
        return;
    }
    if let Some(d) = describe(&disk) {
        out.push(d);
    }
}

fn describe(disk: &Path) -> Option<Drive> {
    let name = disk.file_name()?.to_string_lossy().to_string();
    let dev = read_trim(&disk.join("dev"))?;
    let model = read_trim(&disk.join("device/model"));
    let serial = read_trim(&disk.join("device/serial")).or_else(|| read_trim(&disk.join("serial")));
    let wwid = read_trim(&disk.join("device/wwid")).or_else(|| read_trim(&disk.join("wwid")));
    let backing = read_trim(&disk.join("loop/backing_file"));
    let id = match (&wwid, &model, &serial, &backing) {
        (Some(w), ..) => w.clone(),
        (None, m, Some(s), _) => format!("{}:{s}", m.as_deref().unwrap_or("")),
        (None, _, None, Some(b)) => format!("loop:{b}"),
        _ => name.clone(),
    };
    Some(Drive {
        name,
        dev,
        id,
        model,
        serial,
    })
}

/// `struct btrfs_ioctl_fs_info_args` (1024 bytes); only the fsid is used.
#[repr(C)]
struct BtrfsFsInfo {
    max_id: u64,
    num_devices: u64,
    fsid: [u8; 16],
    rest: [u8; 992],
}

/// `BTRFS_IOC_FS_INFO` = _IOR(0x94, 31, struct btrfs_ioctl_fs_info_args).
const BTRFS_IOC_FS_INFO: libc::c_ulong = 0x8400_941F;

/// The btrfs filesystem id of the filesystem holding `path`, as sysfs
/// spells it (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
fn btrfs_fsid(path: &Path) -> Option<String> {
    use std::os::fd::AsRawFd;
    let fd = rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::NONBLOCK
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    let mut args = BtrfsFsInfo {
        max_id: 0,
        num_devices: 0,
        fsid: [0; 16],
        rest: [0; 992],
    };
    // SAFETY: `args` is a properly sized and aligned btrfs_ioctl_fs_info_args
    // that the kernel fills in; the fd is valid for the call.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            BTRFS_IOC_FS_INFO,
            &mut args as *mut BtrfsFsInfo,
        )
    };
    if rc < 0 {
        return None;
    }
    let h: Vec<String> = args.fsid.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!(
        "{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    ))
}

fn btrfs_devices(fsid: &str) -> Option<Vec<Drive>> {
    let devices = Path::new(SYS).join("fs/btrfs").join(fsid).join("devices");
    let mut out = vec![];
    for e in fs::read_dir(&devices).ok()?.flatten() {
        collect(&e.path(), &mut out, 0);
    }
    out.sort();
    out.dedup();
    (!out.is_empty()).then_some(out)
}

/// `/sys/block/<name>/stat`: cumulative counters of a drive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DiskStats {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    /// Milliseconds the drive had I/O in flight (utilisation).
    pub io_ms: u64,
}

pub fn disk_stats(name: &str) -> io::Result<DiskStats> {
    let text = fs::read_to_string(Path::new(SYS).join("block").join(name).join("stat"))?;
    let v: Vec<u64> = text
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 10 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("short stat line for {name}"),
        ));
    }
    Ok(DiskStats {
        reads: v[0],
        read_bytes: v[2] * 512,
        writes: v[4],
        write_bytes: v[6] * 512,
        io_ms: v[9],
    })
}
