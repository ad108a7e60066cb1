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

/// One refusal: `syscall` (with its second argument equal to `arg1`, when
/// given: an ioctl's request, say) fails with `errno`.
#[derive(Debug, Clone, Copy)]
pub struct Refusal {
    pub syscall: u32,
    pub arg1: Option<u32>,
    pub errno: i32,
}

/// `ioctl` (x86_64).
pub const SYS_IOCTL: u32 = 16;
/// `FS_IOC_FIEMAP`, an ioctl request.
pub const FS_IOC_FIEMAP: u32 = 0xC020_660B;

/// Installs, on the calling thread, a filter under which `syscall` fails
/// with `errno` (threads started from it later inherit the filter).
/// Async-signal-safe: no allocation, usable between fork and exec.
pub fn refuse(syscall: u32, errno: i32) -> io::Result<()> {
    refuse_all(&[Refusal {
        syscall,
        arg1: None,
        errno,
    }])
}

const BPF_JMP_JA: u16 = 0x05;
/// Offsets in `struct seccomp_data`: nr, then args[1]'s low half.
const NR: u32 = 0;
const ARG1_LO: u32 = 24;

/// Like [`refuse`], for several calls at once (at most 8).
pub fn refuse_all(rules: &[Refusal]) -> io::Result<()> {
    let stmt = |code, k| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k, jt, jf| libc::sock_filter {
        code: BPF_JEQ_K,
        jt,
        jf,
        k,
    };
    // Per rule: load nr; nr == syscall? (else skip the rule); [load arg1;
    // arg1 == value? (else skip)]; return errno. Then allow.
    let mut prog = [stmt(BPF_JMP_JA, 0); 8 * 5 + 1];
    let mut n = 0;
    for r in rules.iter().take(8) {
        let body: u8 = if r.arg1.is_some() { 3 } else { 1 };
        prog[n] = stmt(BPF_LD_W_ABS, NR);
        prog[n + 1] = jeq(r.syscall, 0, body);
        n += 2;
        if let Some(a) = r.arg1 {
            prog[n] = stmt(BPF_LD_W_ABS, ARG1_LO);
            prog[n + 1] = jeq(a, 0, 1);
            n += 2;
        }
        prog[n] = stmt(BPF_RET_K, SECCOMP_RET_ERRNO | (r.errno as u32 & 0xffff));
        n += 1;
    }
    prog[n] = stmt(BPF_RET_K, SECCOMP_RET_ALLOW);
    let fprog = libc::sock_fprog {
        len: (n + 1) as u16,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with integer arguments; NO_NEW_PRIVS only restricts
    // this thread (required to install a filter without CAP_SYS_ADMIN).
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fprog` points at `prog`, which outlives the call; the
    // kernel copies the program.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &fprog as *const libc::sock_fprog,
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
    on_thread_refusing_all(
        vec![Refusal {
            syscall,
            arg1: None,
            errno,
        }],
        f,
    )
}

/// Runs `f` on a new thread under [`refuse_all`]`(rules)`.
pub fn on_thread_refusing_all<T: Send + 'static>(
    rules: Vec<Refusal>,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let t = std::thread::spawn(move || {
        refuse_all(&rules).unwrap_or_else(|e| panic!("installing a seccomp filter: {e}"));
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
