//! The engine's vocabulary: the choices an operator makes about a refresh
//! (strategy, yielding, I/O priority) and their defaults. The config, the
//! command line and the daemon speak these types; the engine defines them.

use serde::{Deserialize, Serialize};

use crate::units::Rate;

/// Default chunk: large enough for full device bandwidth, small enough to
/// stop quickly on a lease break.
pub const DEFAULT_CHUNK: u64 = 1 << 20;
/// At a rate, a chunk is at most this much of its time (the throttle
/// holds within ±0.5 % over 10 s), and a request while the pacer shares
/// the drive at least this much (no more requests than a fixed rate).
pub const CHUNK_TIME: std::time::Duration = std::time::Duration::from_millis(50);
/// The largest chunk that keeps the throttle within ±0.5 % over 10 s:
/// one chunk is at most [`CHUNK_TIME`] of the rate, rounded down to
/// `align`.
pub fn chunk_for_rate(chunk: u64, rate: Option<u64>, align: u64) -> u64 {
    match rate {
        Some(r) => {
            let of_rate = (u128::from(r) * CHUNK_TIME.as_millis() / 1000) as u64;
            (of_rate / align * align).clamp(align, chunk.max(align))
        }
        None => chunk,
    }
}

/// Default number of chunks in flight.
pub const DEFAULT_DEPTH: usize = 8;

/// Default largest relocation unit.
pub const DEFAULT_RELOCATE_CHUNK: u64 = 64 << 20;
/// Default rate of the daemon's refreshes, per drive.
pub const DEFAULT_RATE: Rate = Rate(50 << 20);
/// Default floor: the refresh never goes slower than this while it yields.
pub const DEFAULT_FLOOR: u64 = 4 << 20;

/// How files are refreshed (`strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// In place under an exclusive lease when nobody else has the file
    /// open; relocation when someone does and the filesystem supports it.
    Auto,
    /// In place only; files in use are skipped.
    Inplace,
    /// Kernel-mediated relocation only.
    Relocate,
}

/// Whether the refresh yields to other I/O on its drive (`yield`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum YieldMode {
    /// Watch the drive: while an application reads it, hold its latency
    /// within 1.2× its latency alone (never below the floor); the
    /// configured rate when it does not read (`engine::pacing::pace`).
    Auto,
    /// Always the configured rate and depth.
    Off,
}

/// The I/O priority of refresh requests (`io_priority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum IoPriority {
    /// Reads in the idle class, writes (which must finish inside a lease
    /// break) best-effort at the lowest level, per request.
    Idle,
    /// The process's own priority (e.g. set by `ionice` or the unit).
    Inherit,
}

/// How an engine paces itself: the one struct that carries the pacing
/// settings from the configuration file (or the command line) to the
/// pacer, in their own units.
#[derive(Debug, Clone, Copy)]
pub struct PaceSettings {
    /// Bytes per second at most (`None`: unthrottled).
    pub rate: Option<Rate>,
    /// Yield to other I/O on the drive, or keep `rate` always.
    pub mode: YieldMode,
    pub priority: IoPriority,
    /// The rate never drops below this while yielding.
    pub floor: Rate,
}

impl Default for PaceSettings {
    fn default() -> Self {
        PaceSettings {
            rate: None,
            mode: YieldMode::Auto,
            priority: IoPriority::Idle,
            floor: Rate(DEFAULT_FLOOR),
        }
    }
}

/// Declares the test-only switches: in a test build (`cfg(test)` or the
/// `test-switches` feature, which only the tests' dev-dependency turns
/// on) a struct of booleans a test sets; in any other build a unit struct
/// whose every switch is the constant `false`, so the guards cannot be
/// turned off and the code that would do so compiles away.
macro_rules! switches {
    ($( $(#[doc = $doc:literal])* $name:ident, )*) => {
        /// Test-only switches that turn single guards off, so that tests
        /// can show what each guard protects. Never set by the command
        /// line or the config; absent from release builds.
        #[cfg(any(test, feature = "test-switches"))]
        #[doc(hidden)]
        #[derive(Debug, Clone, Copy, Default)]
        pub struct UnsafeSwitches {
            $( $(#[doc = $doc])* pub $name: bool, )*
        }

        #[cfg(any(test, feature = "test-switches"))]
        impl UnsafeSwitches {
            $( #[inline] pub fn $name(&self) -> bool { self.$name } )*
        }

        /// No switch: every guard is on.
        #[cfg(not(any(test, feature = "test-switches")))]
        #[doc(hidden)]
        #[derive(Debug, Clone, Copy, Default)]
        pub struct UnsafeSwitches;

        #[cfg(not(any(test, feature = "test-switches")))]
        impl UnsafeSwitches {
            $( #[inline] pub const fn $name(&self) -> bool { false } )*
        }
    };
}

switches! {
    /// Do not take the write lease: concurrent writes can be lost.
    no_lease,
    /// Write holes and unwritten extents too: allocation changes.
    write_holes,
    /// Write the unaligned tail as a full direct block: the file grows.
    direct_tail,
    /// Do not restore atime/mtime.
    no_time_restore,
    /// Do not check free space on copy-on-write filesystems.
    no_space_check,
    /// Write buffers whose read failed.
    write_failed_reads,
    /// No bound on the bytes of writes in flight under a lease.
    unbounded_writes,
    /// Relocation: no layout re-check before FIDEDUPERANGE (a hole punched
    /// meanwhile is filled with allocated zeros).
    no_layout_recheck,
    /// Write files in place even when the kernel would strip their setuid
    /// bit or file capabilities.
    strip_privileges,
    /// Put the saved times back even when another process changed the
    /// file's times or attributes meanwhile.
    ignore_others_times,
    /// Put the saved atime back too where refreshd's reads cannot have
    /// moved it (`O_NOATIME`): another process's atime is lost.
    put_back_atime,
}
