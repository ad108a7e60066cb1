//! Which filesystem a file is on, stable across reboots and remounts: the
//! filesystem's UUID (and on btrfs the subvolume, whose inode numbers are
//! its own), never `st_dev`. Device numbers change at boot (NVMe, dm and
//! md minors, loop devices, btrfs's anonymous devices): keyed on them, a
//! remount on another number once erased every file's refresh history and
//! made recovery answer "another file is there now".
//!
//! Where the UUID comes from: `FS_IOC_GETFSUUID` (ext4, XFS; Linux 6.5+),
//! btrfs's `BTRFS_IOC_FS_INFO`, XFS's `XFS_IOC_FSGEOMETRY` (older kernels),
//! ext4's `f_fsid` (derived from its UUID). When none answers, the device
//! number is used and said so ([`FsId::Dev`]: valid for this boot only).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use rustix::fs::{AtFlags, StatxFlags};

pub use refreshd_protocol::fsid::FsId;

const FS_IOC_GETFSUUID: libc::c_ulong = 0x8011_1500;
const BTRFS_IOC_FS_INFO: libc::c_ulong = 0x8400_941F;
const BTRFS_IOC_INO_LOOKUP: libc::c_ulong = 0xD000_9412;
const XFS_IOC_FSGEOMETRY: libc::c_ulong = 0x8100_587E;
const STATX_SUBVOL: u32 = 0x8000;
const BTRFS_FIRST_FREE_OBJECTID: u64 = 256;

/// `ioctl(fd, req, buf)` with a buffer the kernel fills.
fn ioctl_into(fd: BorrowedFd<'_>, req: libc::c_ulong, buf: &mut [u8]) -> io::Result<()> {
    // SAFETY: every request used here writes at most its struct's size,
    // and each caller passes a buffer of at least that size.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), req, buf.as_mut_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn uuid_at(buf: &[u8], off: usize) -> Option<[u8; 16]> {
    let u: [u8; 16] = buf.get(off..off + 16)?.try_into().ok()?;
    (u != [0; 16]).then_some(u)
}

/// The identity of the filesystem `fd` (an open file or directory, not
/// `O_PATH`: the ioctls need a real descriptor) is on.
pub fn of(fd: BorrowedFd<'_>) -> io::Result<FsId> {
    let st = rustix::fs::statx(
        fd,
        c"",
        AtFlags::EMPTY_PATH,
        StatxFlags::BASIC_STATS | StatxFlags::from_bits_retain(STATX_SUBVOL),
    )?;
    let dev = rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor);
    // f_type's width differs by architecture.
    #[allow(clippy::unnecessary_cast)]
    let magic = rustix::fs::fstatfs(fd)
        .map(|s| s.f_type as i64)
        .unwrap_or(0);
    let is_btrfs = magic == crate::io::syscalls::BTRFS_SUPER_MAGIC;
    let uuid = uuid_of(fd, magic);
    let Some(uuid) = uuid else {
        return Ok(FsId::Dev(dev));
    };
    let subvol = if !is_btrfs {
        0
    } else if st.stx_mask & STATX_SUBVOL != 0 {
        st.stx_subvol
    } else {
        btrfs_tree_id(fd).unwrap_or(0)
    };
    Ok(FsId::Uuid { uuid, subvol })
}

fn uuid_of(fd: BorrowedFd<'_>, magic: i64) -> Option<[u8; 16]> {
    use crate::io::syscalls::{BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, XFS_SUPER_MAGIC};
    // struct fsuuid2 { __u8 len; __u8 uuid[16]; }
    // An all-zero UUID (some VM images) names nothing: the next source.
    let mut b = [0u8; 17];
    if ioctl_into(fd, FS_IOC_GETFSUUID, &mut b).is_ok() && b[0] == 16 {
        if let Some(u) = uuid_at(&b, 1) {
            return Some(u);
        }
    }
    match magic {
        BTRFS_SUPER_MAGIC => {
            // struct btrfs_ioctl_fs_info_args: max_id, num_devices, fsid[16]…
            let mut b = [0u8; 1024];
            ioctl_into(fd, BTRFS_IOC_FS_INFO, &mut b).ok()?;
            uuid_at(&b, 16)
        }
        XFS_SUPER_MAGIC => {
            // struct xfs_fsop_geom: 8 × u32, 4 × u64, then uuid[16].
            let mut b = [0u8; 256];
            ioctl_into(fd, XFS_IOC_FSGEOMETRY, &mut b).ok()?;
            uuid_at(&b, 64)
        }
        EXT4_SUPER_MAGIC => {
            // ext4's f_fsid is the UUID's two halves xor-ed: stable.
            let s = rustix::fs::fstatfs(fd).ok()?;
            // SAFETY: fsid_t is two ints; read as plain bytes.
            let raw: [u8; 8] = unsafe { std::mem::transmute(s.f_fsid) };
            if raw == [0; 8] {
                return None;
            }
            let mut u = [0u8; 16];
            u[..8].copy_from_slice(&raw);
            u[8..].copy_from_slice(b"ext4fsid");
            Some(u)
        }
        _ => None,
    }
}

/// The btrfs subvolume (tree) `fd` is in (`BTRFS_IOC_INO_LOOKUP` with
/// tree 0: allowed without privileges).
fn btrfs_tree_id(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // struct btrfs_ioctl_ino_lookup_args { u64 treeid; u64 objectid; char name[4080]; }
    let mut b = vec![0u8; 4096];
    b[8..16].copy_from_slice(&BTRFS_FIRST_FREE_OBJECTID.to_ne_bytes());
    ioctl_into(fd, BTRFS_IOC_INO_LOOKUP, &mut b)?;
    Ok(u64::from_ne_bytes(b[..8].try_into().unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_are_file_name_safe() {
        let a = FsId::Uuid {
            uuid: [0xab; 16],
            subvol: 0,
        };
        let b = FsId::Uuid {
            uuid: [1; 16],
            subvol: 257,
        };
        let c = FsId::Dev(rustix::fs::makedev(7, 3));
        for id in [a, b, c] {
            let k = id.key();
            assert!(
                k.bytes().all(|x| x.is_ascii_hexdigit()
                    || x == b'.'
                    || x == b'-'
                    || x.is_ascii_alphanumeric()),
                "{k}"
            );
            assert_eq!(FsId::parse(&k), Some(id), "{k}");
        }
        assert_eq!(c.key(), "dev-7-3");
        assert_eq!(FsId::parse("nonsense"), None);
        assert_eq!(FsId::parse(&"zz".repeat(16)), None);
    }

    #[test]
    fn a_device_number_id_matches_by_number_a_uuid_by_uuid() {
        let u = FsId::Uuid {
            uuid: [9; 16],
            subvol: 0,
        };
        let d = FsId::Dev(42);
        assert!(d.holds(&u, 42));
        assert!(!d.holds(&u, 43));
        assert!(u.holds(&u, 1));
        assert!(!u.holds(&FsId::Dev(1), 1));
    }

    #[test]
    fn the_filesystem_of_a_temp_file_has_an_identity() {
        let f = tempfile::tempfile().unwrap_or_else(|e| panic!("{e}"));
        let id = of(std::os::fd::AsFd::as_fd(&f)).unwrap_or_else(|e| panic!("{e}"));
        let again = of(std::os::fd::AsFd::as_fd(&f)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(id, again);
    }
}
