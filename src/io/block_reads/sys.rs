//! The system calls: `bpf(2)` for maps and programs, `perf_event_open(2)`
//! to attach a program to a tracepoint, `mmap(2)` to read the histogram
//! without a call per bucket.

use std::io::Error;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use super::asm::Insn;

/// `union bpf_attr`, zeroed (the kernel refuses unknown non-zero bytes).
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(mut self, off: usize, v: u32) -> Attr {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(mut self, off: usize, v: u64) -> Attr {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn name(mut self, off: usize, name: &str) -> Attr {
        let n = name.len().min(15);
        self.0[off..off + n].copy_from_slice(&name.as_bytes()[..n]);
        self
    }
}

const MAP_CREATE: i64 = 0;
const MAP_UPDATE_ELEM: i64 = 2;
const PROG_LOAD: i64 = 5;
pub const MAP_HASH: u32 = 1;
pub const MAP_ARRAY: u32 = 2;
/// `BPF_F_MMAPABLE`: an array user space maps.
pub const MAPPABLE: u32 = 1 << 10;
const PROG_TRACEPOINT: u32 = 5;

/// The call itself: its non-negative return, or the error.
fn bpf_call(cmd: i64, attr: &mut Attr) -> Result<i64, Error> {
    // SAFETY: the attribute is a zeroed 128-byte buffer that lives across
    // the call; any pointers in it (instructions, license, log, key,
    // value) point at memory the caller keeps alive for the call.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.0.as_mut_ptr(), attr.0.len()) };
    if rc < 0 {
        return Err(Error::last_os_error());
    }
    Ok(rc)
}

/// A call that makes an object (MAP_CREATE, PROG_LOAD): its new fd.
fn bpf(cmd: i64, attr: &mut Attr) -> Result<OwnedFd, Error> {
    let fd = bpf_call(cmd, attr)?;
    // SAFETY: on success MAP_CREATE and PROG_LOAD return a new fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

pub fn create_map(
    kind: u32,
    key: u32,
    value: u32,
    entries: u32,
    flags: u32,
    name: &str,
) -> Result<OwnedFd, Error> {
    let mut a = Attr::new()
        .u32(0, kind)
        .u32(4, key)
        .u32(8, value)
        .u32(12, entries)
        .u32(16, flags)
        .name(28, name);
    bpf(MAP_CREATE, &mut a)
}

/// Sets `key` to `value` in `map`; both must be of the map's sizes (the
/// caller's types) and outlive the call, as `bpf_call` asks.
pub fn update<K, V>(map: &OwnedFd, key: &K, value: &V) -> Result<(), Error> {
    let mut a = Attr::new()
        .u32(0, map.as_raw_fd() as u32)
        .u64(8, key as *const K as u64)
        .u64(16, value as *const V as u64);
    bpf_call(MAP_UPDATE_ELEM, &mut a).map(|_| ())
}

/// Loads a tracepoint program. On refusal, the verifier's reasons.
pub fn load_program(insns: &[Insn], name: &str) -> Result<OwnedFd, (Error, String)> {
    let license = c"MIT OR Apache-2.0";
    let attr = |log: Option<&mut Vec<u8>>| {
        let a = Attr::new()
            .u32(0, PROG_TRACEPOINT)
            .u32(4, insns.len() as u32)
            .u64(8, insns.as_ptr() as u64)
            .u64(16, license.as_ptr() as u64)
            .name(48, name);
        match log {
            Some(l) => a
                .u32(24, 1)
                .u32(28, l.len() as u32)
                .u64(32, l.as_mut_ptr() as u64),
            None => a,
        }
    };
    match bpf(PROG_LOAD, &mut attr(None)) {
        Ok(fd) => Ok(fd),
        Err(e) => {
            // Again, for the verifier's log.
            let mut log = vec![0u8; 64 << 10];
            let _ = bpf(PROG_LOAD, &mut attr(Some(&mut log)));
            let end = log.iter().position(|&b| b == 0).unwrap_or(0);
            Err((e, String::from_utf8_lossy(&log[..end]).into_owned()))
        }
    }
}

/// Attaches `program` to the tracepoint with this id (system-wide: a
/// tracepoint's programs run on every CPU from one event).
pub fn attach(tracepoint_id: u64, program: &OwnedFd) -> Result<OwnedFd, Error> {
    const PERF_TYPE_TRACEPOINT: u32 = 2;
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
    const SET_BPF: libc::c_ulong = 0x4004_2408;
    const ENABLE: libc::c_ulong = 0x2400;
    const DISABLED: u64 = 1;
    // `struct perf_event_attr`: type, size, config, sample_period, and
    // the flags (opened disabled: enabled once the program is set).
    let a = Attr::new()
        .u32(0, PERF_TYPE_TRACEPOINT)
        .u32(4, 128)
        .u64(8, tracepoint_id)
        .u64(16, 1)
        .u64(40, DISABLED);
    // SAFETY: the attribute outlives the call; pid -1 and cpu 0 with no
    // group is a system-wide event, returning a new fd we own.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            a.0.as_ptr(),
            -1,
            0,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if rc < 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: a new fd, ours.
    let event = unsafe { OwnedFd::from_raw_fd(rc as i32) };
    // SAFETY: both ioctls take an int argument (the program's fd; none).
    unsafe {
        if libc::ioctl(event.as_raw_fd(), SET_BPF as _, program.as_raw_fd()) < 0
            || libc::ioctl(event.as_raw_fd(), ENABLE as _, 0) < 0
        {
            return Err(Error::last_os_error());
        }
    }
    Ok(event)
}

/// An array map of u64 counts, mapped read-only.
pub struct MappedCounts {
    ptr: *mut libc::c_void,
    len: usize,
    entries: usize,
}

// SAFETY: the mapping is read through atomics only, and unmapped once.
unsafe impl Send for MappedCounts {}
// SAFETY: as for Send: shared reads are atomic loads.
unsafe impl Sync for MappedCounts {}

impl MappedCounts {
    pub fn new(map: &OwnedFd, entries: usize) -> Result<MappedCounts, Error> {
        let page = 4096;
        let len = (entries * 8).div_ceil(page) * page;
        // SAFETY: a fresh shared read-only mapping of the map's fd; the
        // kernel keeps the map alive while it is mapped.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                map.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::last_os_error());
        }
        Ok(MappedCounts { ptr, len, entries })
    }

    pub fn read(&self) -> Vec<u64> {
        (0..self.entries)
            .map(|i| {
                // SAFETY: within the mapping; u64-aligned (page-aligned
                // base); the programs add to these atomically.
                let c = unsafe { &*(self.ptr as *const AtomicU64).add(i) };
                c.load(Ordering::Relaxed)
            })
            .collect()
    }
}

impl Drop for MappedCounts {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}
