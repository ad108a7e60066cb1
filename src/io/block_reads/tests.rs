use std::time::Duration;

use super::asm::*;
use super::histogram::{bucket_of, bucket_span};
use super::programs::{self, BUCKETS};
use super::*;

/// Runs straight-line ALU and forward jumps (what `programs::bucket`
/// is made of) over registers; panics on anything else.
fn run(insns: &[Insn], regs: &mut [u64; 11]) {
    let mut pc = 0;
    while pc < insns.len() {
        let i = insns[pc];
        let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
        pc += 1;
        if i.code & 0x07 == ALU64 {
            let operand = if i.code & X != 0 {
                regs[src]
            } else {
                i.imm as i64 as u64
            };
            let d = &mut regs[dst];
            *d = match i.code & 0xf0 {
                ADD => d.wrapping_add(operand),
                SUB => d.wrapping_sub(operand),
                AND => *d & operand,
                LSH => *d << operand,
                RSH => *d >> operand,
                MOV => operand,
                op => panic!("ALU op {op:#x}"),
            };
        } else if i.code & 0x07 == JMP {
            let taken = match i.code & 0xf0 {
                0x00 => true, // JA
                JLT => regs[dst] < i.imm as i64 as u64,
                op => panic!("jump {op:#x}"),
            };
            if taken {
                pc = (pc as i64 + i64::from(i.off)) as usize;
            }
        } else {
            panic!("instruction {:#x}", i.code);
        }
    }
}

fn samples() -> Vec<u64> {
    let mut v: Vec<u64> = (0..5000).collect();
    for shift in 0..40 {
        for d in [0u64, 1, 3, 7] {
            v.push((1u64 << shift).saturating_sub(d));
            v.push((1u64 << shift) + d);
        }
    }
    v.extend([u64::MAX, (1 << 24) - 1, 1 << 24, 123_456, 999_999]);
    v
}

#[test]
fn the_program_buckets_every_time_as_user_space_does() {
    let mut p = Program::default();
    programs::bucket(&mut p, 8, 4);
    let insns = p.finish();
    for v in samples() {
        let mut regs = [0u64; 11];
        regs[8] = v;
        run(&insns, &mut regs);
        assert_eq!(regs[4], bucket_of(v) as u64, "v = {v}");
    }
}

#[test]
fn buckets_are_ordered_and_hold_their_times() {
    let mut last = 0;
    let mut vs = samples();
    vs.sort_unstable();
    for v in vs {
        let b = bucket_of(v);
        assert!(b < BUCKETS, "v = {v}");
        assert!(b >= last, "v = {v}");
        last = b;
        let (from, to) = bucket_span(b);
        if v < (1 << 24) - 1 {
            assert!(from <= v && v < to, "v = {v} in {b} = {from}..{to}");
            // At most 1/16 wide above 16 units.
            assert!((to - from) * 16 <= from.max(16), "bucket {b}");
        }
    }
    assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
}

#[test]
fn quantiles_are_the_bucket_above_and_within_a_sixteenth() {
    let mut h = Histogram::default();
    assert_eq!(h.quantile(0.99), None);
    // 990 reads at 50 µs, 10 at 400 µs: the p99 is 50 µs, the p99.9 400.
    for i in 0..1000 {
        h.add(Duration::from_micros(if i < 990 { 50 } else { 400 }));
    }
    let p99 = h.quantile(0.99).unwrap();
    assert!(
        p99 >= Duration::from_micros(50) && p99 <= Duration::from_micros(54),
        "{p99:?}"
    );
    let p999 = h.quantile(0.999).unwrap();
    assert!(
        p999 >= Duration::from_micros(400) && p999 <= Duration::from_micros(426),
        "{p999:?}"
    );
    assert_eq!(h.reads(), 1000);
    let before = h.clone();
    h.add(Duration::from_millis(3));
    let new = h.since(&before);
    assert_eq!(new.reads(), 1);
    assert!(new.quantile(0.5).unwrap() >= Duration::from_millis(3));
    // Pooled: the one slow read with the thousand before it.
    let pooled = new.plus(&before);
    assert_eq!(pooled.reads(), 1001);
    assert_eq!(pooled.since(&before), new);
    assert_eq!(pooled.quantile(1.0), new.quantile(1.0));
}

#[test]
fn device_numbers_as_the_tracepoints_carry_them() {
    assert_eq!(kernel_dev("7:0\n"), Some(7 << 20));
    assert_eq!(kernel_dev("259:3"), Some(259 << 20 | 3));
    assert_eq!(kernel_dev("4096:0"), None);
    assert_eq!(kernel_dev("8"), None);
    assert_eq!(kernel_dev("a:b"), None);
}

const COMPLETE_6_18: &str = "name: block_rq_complete
ID: 2107
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:dev_t dev;\toffset:8;\tsize:4;\tsigned:0;
\tfield:sector_t sector;\toffset:16;\tsize:8;\tsigned:0;
\tfield:unsigned int nr_sector;\toffset:24;\tsize:4;\tsigned:0;
\tfield:int error;\toffset:28;\tsize:4;\tsigned:1;
\tfield:unsigned short ioprio;\toffset:32;\tsize:2;\tsigned:0;
\tfield:char rwbs[10];\toffset:34;\tsize:10;\tsigned:0;
";

#[test]
fn a_tracepoint_laid_out_otherwise_is_refused() {
    check_format("block_rq_complete", COMPLETE_6_18).unwrap();
    // Before Linux 6.5: no ioprio, rwbs at 32.
    let old = COMPLETE_6_18
        .replace(
            "\tfield:unsigned short ioprio;\toffset:32;\tsize:2;\tsigned:0;\n",
            "",
        )
        .replace("offset:34;\tsize:10", "offset:32;\tsize:8");
    let e = check_format("block_rq_complete", &old).unwrap_err();
    assert!(e.why.contains("no field `unsigned short ioprio;`"), "{e}");
    let moved = COMPLETE_6_18.replace("offset:16;\tsize:8", "offset:20;\tsize:8");
    let e = check_format("block_rq_complete", &moved).unwrap_err();
    assert!(
        e.why.contains("sector") && e.why.contains("offset:20"),
        "{e}"
    );
}

#[test]
fn tracing_is_asked_for_only_with_the_capabilities_it_needs() {
    let status =
        |eff: &str| format!("Name:\trefreshd\nCapInh:\t0000000000000000\nCapEff:\t{eff}\n");
    // root: everything.
    may_trace(&status("000001ffffffffff")).unwrap();
    // CAP_BPF and CAP_PERFMON.
    may_trace(&status("000000c000000000")).unwrap();
    // CAP_SYS_ADMIN alone (before Linux 5.8 the only way).
    may_trace(&status("0000000000200000")).unwrap();
    // The shipped unit's set: CAP_CHOWN, CAP_DAC_OVERRIDE,
    // CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_LEASE.
    let e = may_trace(&status("000000001000000f")).unwrap_err();
    assert!(e.why.contains("CAP_BPF and CAP_PERFMON"), "{e}");
    // One of the two is not enough.
    may_trace(&status("0000008000000000")).unwrap_err();
    may_trace(&status("0000004000000000")).unwrap_err();
    assert!(may_trace("Name:\tx\n").is_err());
}

/// tracefs not mounted (or not where it is looked for), and an id that
/// is not one: said, with the path, before anything is asked of `bpf`.
#[test]
fn a_tracefs_that_is_missing_or_wrong_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let e = tracepoint(dir.path(), "block_rq_complete").unwrap_err();
    assert!(
        e.why.contains("block_rq_complete/format") && e.why.contains("is tracefs mounted"),
        "{e}"
    );
    let tp = dir.path().join("block_rq_complete");
    std::fs::create_dir(&tp).unwrap();
    std::fs::write(tp.join("format"), COMPLETE_6_18).unwrap();
    std::fs::write(tp.join("id"), "twelve\n").unwrap();
    let e = tracepoint(dir.path(), "block_rq_complete").unwrap_err();
    assert!(e.why.ends_with("id: not an id"), "{e}");
    std::fs::write(tp.join("id"), "1234\n").unwrap();
    assert_eq!(tracepoint(dir.path(), "block_rq_complete").unwrap(), 1234);
}

/// A program the verifier refuses (here: it returns a register it never
/// set) is refused with the verifier's reasons (asked for again with a
/// log). Needs CAP_BPF (root); elsewhere says why it did not run, and
/// fails under `REFRESHD_REQUIRE_PRIVILEGED_TESTS=1`.
#[test]
fn privileged_a_program_the_verifier_refuses_comes_back_with_its_reasons() {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    if let Err(e) = may_trace(&status) {
        assert_ne!(
            std::env::var("REFRESHD_REQUIRE_PRIVILEGED_TESTS").as_deref(),
            Ok("1"),
            "cannot load programs here: {e}"
        );
        // The real stderr: the harness captures `eprintln!`.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED privileged_a_program_the_verifier_refuses_comes_back_with_its_reasons: {e}"
        );
        return;
    }
    let (e, log) = sys::load_program(&[exit()], "refreshd_bad").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}: {log}");
    assert!(log.contains("R0 !read_ok"), "the verifier's log: {log}");
}

#[test]
fn a_paranoid_perf_setting_is_named_when_perf_event_open_is_refused() {
    let denied = std::io::Error::from_raw_os_error(libc::EACCES);
    let hint = super::paranoid_hint(Some("3\n"), &denied);
    assert!(hint.contains("kernel.perf_event_paranoid is 3"), "{hint}");
    let perm = std::io::Error::from_raw_os_error(libc::EPERM);
    assert!(!super::paranoid_hint(Some("4"), &perm).is_empty());
    // The upstream levels, another error, or no sysctl: nothing to add.
    assert_eq!(super::paranoid_hint(Some("2"), &denied), "");
    let missing = std::io::Error::from_raw_os_error(libc::ENOENT);
    assert_eq!(super::paranoid_hint(Some("3"), &missing), "");
    assert_eq!(super::paranoid_hint(None, &denied), "");
}
