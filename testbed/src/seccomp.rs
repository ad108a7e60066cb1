//! A sandbox like systemd's, for tests: a seccomp filter that refuses one
//! system call with an errno, on the calling thread (and every thread it
//! starts later) or in a child process before it execs. systemd answers
//! `openat2` with ENOSYS under `RestrictSUIDSGID=yes`, and calls outside a
//! `SystemCallFilter=` with `SystemCallErrorNumber=` (EPERM in refreshd's
//! unit); tests use this to run the product as it runs there.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// `openat2` (the same number on every Linux architecture).
pub const SYS_OPENAT2: u32 = 437;

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;

/// Installs, on the calling thread, a filter under which `syscall` fails
/// with `errno` (threads started from it later inherit the filter).
/// Async-signal-safe: no allocation, usable between fork and exec.
pub fn refuse(syscall: u32, errno: i32) -> io::Result<()> {
    let filter = [
        // A = seccomp_data.nr
        libc::sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: BPF_JEQ_K,
            jt: 0,
            jf: 1,
            k: syscall,
        },
        libc::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ERRNO | (errno as u32 & 0xffff),
        },
        libc::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ALLOW,
        },
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with integer arguments; NO_NEW_PRIVS only restricts
    // this thread (required to install a filter without CAP_SYS_ADMIN).
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `prog` points at `filter`, which outlives the call; the
    // kernel copies the program.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `f` on a new thread on which `syscall` fails with `errno`.
pub fn on_thread_refusing<T: Send + 'static>(
    syscall: u32,
    errno: i32,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let t = std::thread::spawn(move || {
        refuse(syscall, errno).unwrap_or_else(|e| panic!("installing a seccomp filter: {e}"));
        f()
    });
    match t.join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Makes `cmd` run with `syscall` failing with `errno`, as under a
/// systemd unit's seccomp filter.
pub fn command_refusing(cmd: &mut Command, syscall: u32, errno: i32) -> &mut Command {
    // SAFETY: the closure only calls `refuse`, which is async-signal-safe
    // (two prctl calls on a stack array).
    unsafe { cmd.pre_exec(move || refuse(syscall, errno)) }
}
