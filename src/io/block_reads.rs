//! Others' reads on a drive, timed one by one where the drive serves
//! them: eBPF programs on the block layer's tracepoints
//! (`block_rq_issue`, `block_rq_complete`) count each read's time from
//! its issue to the drive to its completion in a histogram the refresh
//! reads without a system call. The drive's counters
//! (`/sys/block/<dev>/stat`) give only the mean; this gives the tail
//! (less the time a read waits in an I/O scheduler: see
//! [`programs`]).
//!
//! **Whose reads.** Reads at best-effort 7 or in the idle class are left
//! out: the refresh's own (`io_priority = "idle"`, the default), and any
//! other background work that asked to come last. With `io_priority =
//! "inherit"` the refresh's reads would be counted as the application's
//! (the pacer does not use them then). Buffered reads of the refresh
//! (the kernel's reads to open and plan a file, relocation's copies)
//! carry the thread's priority, not the request's: outside
//! `IOSchedulingClass=idle` they are counted as the application's.
//!
//! **What it costs.** A hash update when a read is issued and a lookup,
//! delete and atomic add at its completion, per read of a watched drive
//! (every completion of any drive is looked up in the watched drives):
//! a loop device over this VM's disk read 19,000 4 KiB reads/s at QD1
//! without it and 1.5–1.8 % fewer with it (three runs each, alternating,
//! the first version, which did not filter completions; tracing the same
//! events through tracefs's text cost the reader 35–50 %).
//!
//! **What it needs.** Linux ≥ 6.5 (`ioprio` in the tracepoints), tracefs
//! mounted at `/sys/kernel/tracing` (for the tracepoints' ids and
//! formats), `CAP_BPF` and `CAP_PERFMON` (or `CAP_SYS_ADMIN`), and a
//! seccomp filter that allows `bpf` and `perf_event_open`. Without any
//! of these [`ReadTimes::start`] says which, and nothing else changes;
//! without the capabilities it asks nothing of `bpf`.

use std::fmt;
use std::fs;
use std::os::fd::OwnedFd;
use std::path::Path;

mod asm;
mod histogram;
mod programs;
mod sys;
#[cfg(test)]
mod tests;

pub use histogram::Histogram;
use programs::{Maps, BUCKETS};

const TRACEFS: &str = "/sys/kernel/tracing/events/block";
/// Reads in flight the programs can follow at once, per drive set: past
/// it a read goes untimed (not a slow one forgotten: the stamps are not
/// evicted). A drive queues at most `nr_requests` (64–256 per hardware
/// queue by default).
const IN_FLIGHT: u32 = 16384;

/// What to add when `perf_event_open` was refused for permission while
/// `kernel.perf_event_paranoid` (its text, `paranoid`) is above 2:
/// Debian's and Ubuntu's kernels have a level 3 (and Ubuntu a 4) that
/// refuses the call to all but a privileged caller, and some of their
/// versions count only CAP_SYS_ADMIN as privileged, not CAP_PERFMON.
fn paranoid_hint(paranoid: Option<&str>, e: &std::io::Error) -> String {
    let level = paranoid.and_then(|p| p.trim().parse::<i32>().ok());
    match (level, e.raw_os_error()) {
        (Some(l), Some(libc::EACCES | libc::EPERM)) if l > 2 => format!(
            "; kernel.perf_event_paranoid is {l}: above 2, a distribution kernel may \
             refuse perf_event_open without CAP_SYS_ADMIN (2 is the upstream default)"
        ),
        _ => String::new(),
    }
}

/// Why reads cannot be timed here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    pub why: String,
}

impl Unavailable {
    fn new(why: String) -> Unavailable {
        Unavailable { why }
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.why)
    }
}

impl std::error::Error for Unavailable {}

/// The reads of a set of drives (one drive, or the members of an
/// array), timed until dropped.
pub struct ReadTimes {
    counts: sys::MappedCounts,
    // Closing these detaches the programs and frees the maps; the
    // events go first.
    _events: [OwnedFd; 2],
    _programs: [OwnedFd; 2],
    _maps: [OwnedFd; 3],
}

impl fmt::Debug for ReadTimes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReadTimes")
    }
}

/// A drive's `dev_t` as the block layer's tracepoints carry it (major
/// in the high 12 bits, minor in the low 20), from its sysfs `dev`
/// ("8:16").
pub fn kernel_dev(sys_dev: &str) -> Option<u32> {
    let (major, minor) = sys_dev.trim().split_once(':')?;
    let (major, minor): (u32, u32) = (major.parse().ok()?, minor.parse().ok()?);
    (major < 1 << 12 && minor < 1 << 20).then_some(major << 20 | minor)
}

impl ReadTimes {
    /// Starts timing the reads of the drives named (as in `/sys/block`).
    pub fn start(sys: &Path, drives: &[String]) -> Result<ReadTimes, Unavailable> {
        let mut devs = Vec::new();
        for d in drives {
            let p = sys.join("block").join(d).join("dev");
            let text = fs::read_to_string(&p)
                .map_err(|e| Unavailable::new(format!("{}: {e}", p.display())))?;
            let dev = kernel_dev(&text)
                .ok_or_else(|| Unavailable::new(format!("{}: not a device number", p.display())))?;
            devs.push(dev);
        }
        if devs.is_empty() {
            return Err(Unavailable::new("no drive to watch".into()));
        }
        let status = fs::read_to_string("/proc/thread-self/status")
            .map_err(|e| Unavailable::new(format!("/proc/thread-self/status: {e}")))?;
        may_trace(&status)?;
        let tracefs = Path::new(TRACEFS);
        let tracepoints = Tracepoints {
            issue: tracepoint(tracefs, "block_rq_issue")?,
            complete: tracepoint(tracefs, "block_rq_complete")?,
        };
        Self::attach(&devs, tracepoints)
    }

    fn attach(devs: &[u32], tp: Tracepoints) -> Result<ReadTimes, Unavailable> {
        let refused = |what: &str, e: std::io::Error| {
            Unavailable::new(format!(
                "{what}: {e} (timing reads needs CAP_BPF and CAP_PERFMON, and bpf and \
                 perf_event_open allowed by the seccomp filter)"
            ))
        };
        let drives = sys::create_map(sys::MAP_HASH, 4, 4, devs.len() as u32, 0, "refreshd_drives")
            .map_err(|e| refused("creating a BPF map", e))?;
        let issued = sys::create_map(sys::MAP_HASH, 16, 8, IN_FLIGHT, 0, "refreshd_issued")
            .map_err(|e| refused("creating a BPF map", e))?;
        let hist = sys::create_map(
            sys::MAP_ARRAY,
            4,
            8,
            BUCKETS as u32,
            sys::MAPPABLE,
            "refreshd_reads",
        )
        .map_err(|e| refused("creating a BPF map", e))?;
        for d in devs {
            sys::update(&drives, d, &0u32).map_err(|e| refused("filling a BPF map", e))?;
        }
        use std::os::fd::AsRawFd;
        let maps = Maps {
            drives: drives.as_raw_fd(),
            issued: issued.as_raw_fd(),
            histogram: hist.as_raw_fd(),
        };
        let load = |insns: Vec<asm::Insn>, name: &str| {
            sys::load_program(&insns, name).map_err(|(e, log)| {
                Unavailable::new(format!("the kernel refused the program {name}: {e}: {log}"))
            })
        };
        let on_issue = load(programs::on_issue(maps), "refreshd_issue")?;
        let on_complete = load(programs::on_complete(maps), "refreshd_done")?;
        let counts = sys::MappedCounts::new(&hist, BUCKETS)
            .map_err(|e| Unavailable::new(format!("mapping the histogram: {e}")))?;
        let attach = |id: u64, program: &OwnedFd, name: &str| {
            sys::attach(id, program).map_err(|e| {
                let paranoid = fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").ok();
                let hint = paranoid_hint(paranoid.as_deref(), &e);
                let mut why = refused(&format!("attaching to {name}"), e);
                why.why += &hint;
                why
            })
        };
        // The completion first: a read stamped before it could count.
        let done = attach(tp.complete, &on_complete, "block_rq_complete")?;
        let issue = attach(tp.issue, &on_issue, "block_rq_issue")?;
        Ok(ReadTimes {
            counts,
            _events: [issue, done],
            _programs: [on_issue, on_complete],
            _maps: [drives, issued, hist],
        })
    }

    /// Every read counted since the start (compare two with
    /// [`Histogram::since`]).
    pub fn histogram(&self) -> Histogram {
        Histogram::from_counts(self.counts.read())
    }
}

/// Whether this thread may load and attach tracing programs: `CAP_BPF`
/// and `CAP_PERFMON`, or `CAP_SYS_ADMIN`, in its effective set (`CapEff`
/// of its `/proc/thread-self/status`). Asked before any `bpf` call: a
/// sandbox that leaves them out (the shipped unit) is not asked for what
/// it refuses, and its filter's audit sees no call outside it.
fn may_trace(status: &str) -> Result<(), Unavailable> {
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_PERFMON: u32 = 38;
    const CAP_BPF: u32 = 39;
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or_else(|| Unavailable::new("no CapEff in /proc/thread-self/status".into()))?;
    let has = |cap: u32| effective & (1 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        Ok(())
    } else {
        Err(Unavailable::new(
            "timing reads needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), which this \
             process does not have"
                .into(),
        ))
    }
}

/// The block layer's tracepoints the programs attach to, by id.
struct Tracepoints {
    issue: u64,
    complete: u64,
}

/// The tracepoint's id, once its format is checked to be the one the
/// programs read.
fn tracepoint(tracefs: &Path, name: &str) -> Result<u64, Unavailable> {
    let dir = tracefs.join(name);
    let read = |f: &str| {
        fs::read_to_string(dir.join(f)).map_err(|e| {
            Unavailable::new(format!(
                "{}: {e} (is tracefs mounted at /sys/kernel/tracing?)",
                dir.join(f).display()
            ))
        })
    };
    check_format(name, &read("format")?)?;
    read("id")?
        .trim()
        .parse()
        .map_err(|_| Unavailable::new(format!("{}: not an id", dir.join("id").display())))
}

/// The fields the programs read are where they read them.
fn check_format(name: &str, format: &str) -> Result<(), Unavailable> {
    let want = [
        ("dev_t dev;", programs::DEV, 4),
        ("sector_t sector;", programs::SECTOR, 8),
        ("unsigned short ioprio;", programs::IOPRIO, 2),
        ("char rwbs[", programs::RWBS, 0),
    ];
    for (field, off, size) in want {
        let line = format
            .lines()
            .find(|l| l.contains(&format!("field:{field}")))
            .ok_or_else(|| Unavailable::new(format!("{name} has no field `{field}` here")))?;
        let ok = line.contains(&format!("offset:{off};"))
            && (size == 0 || line.contains(&format!("size:{size};")));
        if !ok {
            return Err(Unavailable::new(format!(
                "{name}'s field `{field}` is not where the programs read it: {}",
                line.trim()
            )));
        }
    }
    Ok(())
}
