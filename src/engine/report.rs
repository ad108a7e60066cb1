//! What happened to one file: the outcome, the bytes, and why.

use std::path::PathBuf;

use serde::Serialize;

use crate::io::backend::BackendKind;
use crate::io::syscalls::FsKind;
use crate::units::format_size;

/// Bytes left out of the plan, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Excluded {
    /// Preallocated, never written (`fallocate`): reads as zeros.
    pub unwritten: u64,
    /// Shared with another file or snapshot (reflink).
    pub shared: u64,
    /// Stored inside metadata (inline data, tails packed with others).
    pub inline: u64,
    /// Compressed or otherwise encoded on disk.
    pub encoded: u64,
    /// Delayed allocation or unknown location.
    pub delalloc: u64,
}

impl Excluded {
    pub fn total(&self) -> u64 {
        self.unwritten + self.shared + self.inline + self.encoded + self.delalloc
    }
}

/// Why a file was left alone. The names are stable (scripts, metrics labels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    InUse,
    Symlink,
    NotRegular,
    OtherFilesystem,
    UnsupportedFilesystem,
    Immutable,
    AppendOnly,
    Swapfile,
    RunningExecutable,
    NoDirectIo,
    NoData,
    Shared,
    HardLink,
    LowSpace,
    Vanished,
    StrategyUnavailable,
    /// fs-verity: the kernel refuses any change of its data.
    Verity,
    /// fscrypt: not refreshed without its key.
    Encrypted,
    /// The kernel refused the relocation (MOVE_EXT, FIDEDUPERANGE).
    KernelRefused,
    /// Another file is at that name now than the inventory knows.
    Replaced,
    /// A write would make the kernel strip its setuid/setgid bits or file
    /// capabilities, and it cannot be relocated (`--strategy inplace`).
    Privileges,
    /// Another process changed it meanwhile (truncated, punched, replaced
    /// its data): it is left as that process made it, and tried again.
    ChangedMeanwhile,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::InUse => "in use",
            SkipReason::Symlink => "symlink",
            SkipReason::NotRegular => "not a regular file",
            SkipReason::OtherFilesystem => "other filesystem",
            SkipReason::UnsupportedFilesystem => "unsupported filesystem",
            SkipReason::Immutable => "immutable",
            SkipReason::AppendOnly => "append-only",
            SkipReason::Swapfile => "swap file",
            SkipReason::RunningExecutable => "running executable",
            SkipReason::NoDirectIo => "no direct I/O",
            SkipReason::NoData => "no data to refresh",
            SkipReason::Shared => "shared extents",
            SkipReason::HardLink => "hard link already seen",
            SkipReason::LowSpace => "low free space",
            SkipReason::Vanished => "vanished",
            SkipReason::StrategyUnavailable => "strategy unavailable",
            SkipReason::Verity => "fs-verity",
            SkipReason::Encrypted => "encrypted",
            SkipReason::KernelRefused => "kernel refused",
            SkipReason::Replaced => "replaced",
            SkipReason::Privileges => "privileges",
            SkipReason::ChangedMeanwhile => "changed meanwhile",
        }
    }
}

/// Why a file failed, as a stable label (`failure` in JSON, `reason` in
/// the metric `refreshd_refresh_files_total{outcome="failed"}`); the
/// outcome's `reason` says it in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailKind {
    /// A read, write, sync or system call failed (EIO, an unusable file).
    Io,
    /// No space (ENOSPC) or quota (EDQUOT) for relocation's copy.
    NoSpace,
    /// Ranges could not be read: left unwritten.
    Unreadable,
    /// A chunk read back differently twice (`--verify`).
    Verify,
    /// The kernel may have revoked the lease with writes in flight, or
    /// before the times could be put back: the mtime is left moved.
    LeaseRevoked,
    /// The file's layout changed during the refresh.
    LayoutChanged,
    /// The recovery journal could not be written: nothing was written.
    Journal,
    /// refreshd itself: a panic, a broken I/O ring, a stopped I/O thread.
    Internal,
}

impl FailKind {
    pub const ALL: [FailKind; 8] = [
        FailKind::Io,
        FailKind::NoSpace,
        FailKind::Unreadable,
        FailKind::Verify,
        FailKind::LeaseRevoked,
        FailKind::LayoutChanged,
        FailKind::Journal,
        FailKind::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailKind::Io => "io",
            FailKind::NoSpace => "no_space",
            FailKind::Unreadable => "unreadable",
            FailKind::Verify => "verify",
            FailKind::LeaseRevoked => "lease_revoked",
            FailKind::LayoutChanged => "layout_changed",
            FailKind::Journal => "journal",
            FailKind::Internal => "internal",
        }
    }
}

/// How a file ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    Refreshed,
    /// `--dry-run`: everything was checked, nothing written.
    WouldRefresh,
    Skipped {
        reason: SkipReason,
        detail: String,
    },
    /// Stopped early (another process, cancel, low space); resume at
    /// `offset`.
    Interrupted {
        offset: u64,
        cause: Interruption,
        reason: String,
    },
    Failed {
        #[serde(rename = "failure")]
        kind: FailKind,
        reason: String,
    },
}

/// Why a file stopped before its end, as a stable label (`cause` in JSON,
/// `reason` of `refreshd_refresh_files_total{outcome="interrupted"}`).
/// None of them is a failure: the file is tried again later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Interruption {
    /// Another process opened it (the lease broke).
    InUse,
    /// Another process changed it: truncated, punched, or replaced data
    /// refreshd was moving.
    Changed,
    /// Free space fell to the watermark.
    LowSpace,
    /// Stopped on request: pause, shutdown, Ctrl-C, a lost fleet slot.
    Cancelled,
}

impl Interruption {
    pub const ALL: [Interruption; 4] = [
        Interruption::InUse,
        Interruption::Changed,
        Interruption::LowSpace,
        Interruption::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Interruption::InUse => "in_use",
            Interruption::Changed => "changed",
            Interruption::LowSpace => "low_space",
            Interruption::Cancelled => "cancelled",
        }
    }
}

impl Outcome {
    pub fn interrupted(offset: u64, cause: Interruption, reason: impl Into<String>) -> Outcome {
        Outcome::Interrupted {
            offset,
            cause,
            reason: reason.into(),
        }
    }

    pub fn failed(kind: FailKind, reason: impl Into<String>) -> Outcome {
        Outcome::Failed {
            kind,
            reason: reason.into(),
        }
    }
}

/// A byte range of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Range {
    pub offset: u64,
    pub len: u64,
}

/// An unreadable range: never written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadError {
    pub offset: u64,
    pub len: u64,
    pub error: String,
}

/// The result for one file.
#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    #[serde(with = "crate::pathtext::json")]
    pub path: PathBuf,
    #[serde(flatten)]
    pub outcome: Outcome,
    pub strategy: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<FsKind>,
    pub size: u64,
    pub bytes_planned: u64,
    pub bytes_refreshed: u64,
    pub excluded: Excluded,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_errors: Vec<ReadError>,
    /// Relocation: ranges another process wrote during the refresh, left as
    /// they are (freshly written by that process).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changed_meanwhile: Vec<Range>,
    /// Writes that completed after the kernel could have revoked the lease:
    /// they may have overwritten another process's data there.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lease_exposed: Vec<Range>,
    /// Why the original atime and mtime were not put back (another process
    /// set the file's times or attributes meanwhile: they stay as it made
    /// them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub times_left: Option<String>,
    /// The largest unit relocated at once (bytes), relocation only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest_unit: Option<u64>,
    pub verified: bool,
    pub elapsed_s: f64,
    #[serde(skip)]
    pub dev_ino: Option<(u64, u64)>,
    /// The inode generation the guard read (for the inventory).
    #[serde(skip)]
    pub generation: Option<u32>,
}

impl FileReport {
    pub fn new(path: PathBuf, outcome: Outcome) -> FileReport {
        FileReport {
            path,
            outcome,
            strategy: "inplace",
            backend: None,
            filesystem: None,
            size: 0,
            bytes_planned: 0,
            bytes_refreshed: 0,
            excluded: Excluded::default(),
            read_errors: vec![],
            changed_meanwhile: vec![],
            lease_exposed: vec![],
            times_left: None,
            largest_unit: None,
            verified: false,
            elapsed_s: 0.0,
            dev_ino: None,
            generation: None,
        }
    }

    /// The outcome of a file that ran to its end: refreshed, or failed if
    /// ranges could not be read (they were left unwritten).
    pub fn done_outcome(&self) -> Outcome {
        match self.read_errors.first() {
            None => Outcome::Refreshed,
            Some(first) => Outcome::failed(
                FailKind::Unreadable,
                format!(
                    "{} unreadable range(s), left unwritten; first at offset {} length {}: {}",
                    self.read_errors.len(),
                    first.offset,
                    first.len,
                    first.error
                ),
            ),
        }
    }

    pub fn skipped(path: PathBuf, reason: SkipReason, detail: impl Into<String>) -> FileReport {
        FileReport::new(
            path,
            Outcome::Skipped {
                reason,
                detail: detail.into(),
            },
        )
    }

    pub fn is_failure(&self) -> bool {
        matches!(self.outcome, Outcome::Failed { .. })
    }

    /// One line for people: `refreshed /a (64.0 MiB in 0.31 s)`.
    pub fn human_line(&self) -> String {
        let p = crate::pathtext::text(&self.path);
        let extra = self.exclusion_note();
        match &self.outcome {
            Outcome::Refreshed => {
                let mbps = if self.elapsed_s > 0.0 {
                    self.bytes_refreshed as f64 / self.elapsed_s
                } else {
                    0.0
                };
                format!(
                    "refreshed   {p} ({} in {:.2} s, {}/s{}{extra}){}",
                    format_size(self.bytes_refreshed),
                    self.elapsed_s,
                    format_size(mbps as u64),
                    if self.verified { ", verified" } else { "" },
                    self.times_left
                        .as_ref()
                        .map_or(String::new(), |t| format!("; {t}")),
                )
            }
            Outcome::WouldRefresh => {
                format!(
                    "would refresh {p} ({}{extra})",
                    format_size(self.bytes_planned)
                )
            }
            Outcome::Skipped { reason, detail } => {
                format!("skipped     {p}: {}: {detail}", reason.as_str())
            }
            Outcome::Interrupted { offset, reason, .. } => format!(
                "interrupted {p} at offset {offset}: {reason} ({} refreshed)",
                format_size(self.bytes_refreshed)
            ),
            Outcome::Failed { reason, .. } => format!("failed      {p}: {reason}"),
        }
    }

    fn exclusion_note(&self) -> String {
        let e = &self.excluded;
        let mut parts = vec![];
        for (n, what) in [
            (e.unwritten, "unwritten"),
            (e.shared, "shared"),
            (e.inline, "inline"),
            (e.encoded, "compressed"),
            (e.delalloc, "delalloc"),
        ] {
            if n > 0 {
                parts.push(format!("{} {what}", format_size(n)));
            }
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("; left alone: {}", parts.join(", "))
        }
    }
}

/// Ranges of the executor's exposed writes, for the report.
pub fn ranges(v: &[std::ops::Range<u64>]) -> Vec<Range> {
    v.iter()
        .map(|r| Range {
            offset: r.start,
            len: r.end - r.start,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_that_could_forge_a_line_stays_on_its_own() {
        let r = FileReport::new(PathBuf::from("/srv/x\ny"), Outcome::Refreshed);
        assert_eq!(r.human_line().lines().count(), 1);
    }
}
