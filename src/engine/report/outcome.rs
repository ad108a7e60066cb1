//! The vocabulary of a file's outcome: refreshed, skipped (and why),
//! failed (and of what kind), interrupted (and by what). The names are
//! stable: scripts, metrics labels and the JSON output use them.

use serde::Serialize;

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
