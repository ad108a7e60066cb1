//! What a run of the executor is given and what it hands back.

use std::io;
use std::ops::Range;
use std::time::Duration;

use crate::engine::safety::watch::StopReason;
use crate::io::IoError;

/// Options of one run.
#[derive(Debug, Clone, Copy)]
pub struct ExecParams {
    /// Number of buffers in use (requests in flight at most).
    pub depth: usize,
    /// Direct-I/O alignment, the unit read errors are narrowed to.
    pub align: u64,
    /// Read each written chunk back and compare.
    pub verify: bool,
    /// Under a lease: the kernel's lease-break time. Writes in flight are
    /// bounded to what the device finishes in a fraction of it.
    pub lease_break: Option<Duration>,
    /// Test-only: write chunks whose read failed (breaks "never write what
    /// was not read").
    pub unsafe_write_failed_reads: bool,
    /// Test-only: no bound on writes in flight (breaks "no write after the
    /// lease" on a slow device).
    pub unsafe_unbounded_writes: bool,
}

/// A fatal problem: the file is reported failed.
#[derive(Debug)]
pub enum ExecError {
    Write {
        offset: u64,
        len: u64,
        source: io::Error,
    },
    Verify {
        offset: u64,
        len: u64,
    },
    /// The ring failed (not a request: its errors are narrowed).
    Io {
        op: &'static str,
        source: IoError,
    },
    /// A broken invariant of the executor itself.
    Internal(String),
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecError::Write {
                offset,
                len,
                source,
            } => {
                write!(f, "writing {len} bytes at offset {offset}: {source}")
            }
            ExecError::Verify { offset, len } => write!(
                f,
                "verify: {len} bytes at offset {offset} read back differently twice"
            ),
            ExecError::Io { op, source } => write!(f, "{op}: {source}"),
            ExecError::Internal(what) => write!(f, "internal error: {what}"),
        }
    }
}

/// What happened to the chunks.
#[derive(Debug, Default)]
pub struct ExecResult {
    /// Bytes read and written back (and verified, with verify).
    pub written: u64,
    /// Set when the run stopped early.
    pub stop: Option<StopReason>,
    /// Everything below this offset was handled (only with `stop`).
    pub resume_offset: Option<u64>,
    /// Ranges that could not be read: never written.
    pub bad_ranges: Vec<(Range<u64>, io::ErrorKind, Option<i32>)>,
    /// Writes that completed (or could not be reaped) after the lease may
    /// have been revoked: they may have overwritten another writer's data.
    pub exposed: Vec<Range<u64>>,
    pub error: Option<ExecError>,
}
