//! Relocation's kernel calls: ext4's `EXT4_IOC_MOVE_EXT` and the
//! generic `FIDEDUPERANGE`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `struct move_extent` (fs/ext4/ext4.h).
#[repr(C)]
#[derive(Debug, Default)]
struct MoveExtent {
    reserved: u32,
    donor_fd: u32,
    orig_start: u64,
    donor_start: u64,
    len: u64,
    moved_len: u64,
}

/// `_IOWR('f', 15, struct move_extent)`.
const EXT4_IOC_MOVE_EXT: libc::c_ulong = 0xC028_660F;
const _: () = assert!(std::mem::size_of::<MoveExtent>() == 40);

/// Asks ext4 to copy blocks `[start, start + len)` (in filesystem blocks)
/// of `orig` into the donor's blocks at the same offsets and swap the
/// extents, under the kernel's locks. Returns the blocks moved.
pub fn move_extents(
    orig: BorrowedFd<'_>,
    donor: BorrowedFd<'_>,
    start: u64,
    len: u64,
) -> io::Result<u64> {
    let donor_fd = u32::try_from(donor.as_raw_fd()).map_err(|_| io::Error::other("bad fd"))?;
    let mut req = MoveExtent {
        donor_fd,
        orig_start: start,
        donor_start: start,
        len,
        ..MoveExtent::default()
    };
    // SAFETY: `req` is a valid `struct move_extent`; the kernel reads it and
    // writes `moved_len`. Both fds are valid for the borrows.
    let rc = unsafe {
        libc::ioctl(
            orig.as_raw_fd(),
            EXT4_IOC_MOVE_EXT,
            &mut req as *mut MoveExtent,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if req.moved_len > 0 {
            tracing::debug!("MOVE_EXT moved {} blocks before: {e}", req.moved_len);
        }
        return Err(e);
    }
    Ok(req.moved_len)
}

/// `struct file_dedupe_range` with one `file_dedupe_range_info`.
#[repr(C)]
#[derive(Debug, Default)]
struct DedupeRange {
    src_offset: u64,
    src_length: u64,
    dest_count: u16,
    reserved1: u16,
    reserved2: u32,
    dest_fd: i64,
    dest_offset: u64,
    bytes_deduped: u64,
    status: i32,
    reserved: u32,
}

/// `_IOWR(0x94, 54, struct file_dedupe_range)` (header only: 24 bytes).
const FIDEDUPERANGE: libc::c_ulong = 0xC018_9436;
const _: () = assert!(std::mem::size_of::<DedupeRange>() == 24 + 32);

/// The kernel's answer to one dedupe request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dedupe {
    /// The ranges were identical; this many bytes now share the source's blocks.
    Same(u64),
    /// The contents differ (someone wrote meanwhile): nothing remapped.
    Differs,
}

/// `FIDEDUPERANGE`: if `src[off, off+len)` and `dest[off, off+len)` hold
/// the same bytes, the kernel (under its locks) points `dest`'s range at
/// `src`'s blocks.
pub fn dedupe(src: BorrowedFd<'_>, dest: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<Dedupe> {
    let mut req = DedupeRange {
        src_offset: off,
        src_length: len,
        dest_count: 1,
        dest_fd: i64::from(dest.as_raw_fd()),
        dest_offset: off,
        ..DedupeRange::default()
    };
    // SAFETY: `req` is a `struct file_dedupe_range` followed by exactly
    // `dest_count` (1) info records; the kernel fills `bytes_deduped` and
    // `status`. Both fds are valid for the borrows.
    let rc = unsafe { libc::ioctl(src.as_raw_fd(), FIDEDUPERANGE, &mut req as *mut DedupeRange) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    match req.status {
        0 => Ok(Dedupe::Same(req.bytes_deduped)),
        1 => Ok(Dedupe::Differs),
        s if s < 0 => Err(io::Error::from_raw_os_error(-s)),
        s => Err(io::Error::other(format!("unknown dedupe status {s}"))),
    }
}
