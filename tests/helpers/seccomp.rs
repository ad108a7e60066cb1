//! A seccomp filter for one child process: the named system calls fail
//! with an errno, as systemd's `SystemCallFilter=` makes them fail.
//!
//! Process-local on purpose: the `kernel.io_uring_disabled` sysctl would
//! turn io_uring off for every test running beside this one (a daemon
//! started meanwhile measured its canary at queue depth 1 and never saw
//! its stale data as slow).

use std::os::unix::process::CommandExt;
use std::process::Command;

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;

#[cfg(target_arch = "x86_64")]
const ARCH: u32 = AUDIT_ARCH_X86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: u32 = AUDIT_ARCH_AARCH64;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jeq(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    }
}

/// The program: another architecture's calls pass; each of `calls`
/// returns `errno`; everything else is allowed.
fn program(calls: &[libc::c_long], errno: i32) -> Vec<libc::sock_filter> {
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    let mut p = vec![
        stmt(load, 4), // seccomp_data.arch
        jeq(ARCH, 1, 0),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
        stmt(load, 0), // seccomp_data.nr
    ];
    for (i, nr) in calls.iter().enumerate() {
        // Match: jump over the remaining tests and the ALLOW to the ERRNO.
        let left = (calls.len() - i - 1) as u8;
        p.push(jeq(*nr as u32, left + 1, 0));
    }
    p.push(stmt(ret, libc::SECCOMP_RET_ALLOW));
    p.push(stmt(
        ret,
        libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA),
    ));
    p
}

/// Makes `calls` fail with `errno` in the process `cmd` starts.
pub fn deny<'a>(cmd: &'a mut Command, calls: &[libc::c_long], errno: i32) -> &'a mut Command {
    let filter = program(calls, errno);
    // SAFETY: between fork and exec only async-signal-safe calls (prctl)
    // run, on memory the closure owns.
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}
