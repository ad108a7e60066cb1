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

mod outcome;
pub use outcome::{FailKind, Interruption, Outcome, SkipReason};

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
