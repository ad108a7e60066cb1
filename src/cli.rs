//! `refreshd`'s command line: the daemon and its one-shot subcommands
//! (also what its man pages and completions are generated from). Its
//! defaults are the config's: one table, `config::Settings`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::{IoPriority, Settings, YieldMode};
use crate::engine::types::{Strategy, DEFAULT_RELOCATE_CHUNK};
use crate::engine::{BackendChoice, DEFAULT_CHUNK, DEFAULT_DEPTH};
use crate::units::{ByteSize, HumanDuration, Rate};

/// The command line's defaults are the config's (one table).
static DEFAULTS: std::sync::LazyLock<Settings> = std::sync::LazyLock::new(Settings::default);

#[derive(Parser, Debug)]
#[command(
    name = "refreshd",
    version,
    about = "Keeps data on drift-prone SSDs fast by rewriting stale files in place, safely",
    // `--help` and `<verb> --help`; no `help` verb (its man page would
    // not exist).
    disable_help_subcommand = true
)]
pub struct Cli {
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Less log output.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Rewrite files (or directory trees, one filesystem) in place, safely:
    /// the same bytes, O_DIRECT, throttled, under an exclusive lease.
    Refresh(RefreshArgs),
    /// Measure read speed and latency by data age, per drive, against a
    /// fresh reference; say whether each drive is degraded and what a
    /// refresh would rewrite. Reads only (plus a small temporary canary).
    Survey(SurveyArgs),
    /// Run the daemon in the foreground (systemd: Type=notify).
    Run {
        /// Configuration file.
        #[arg(long, value_name = "PATH", default_value = crate::config::DEFAULT_PATH)]
        config: PathBuf,
    },
    /// Validate a configuration: every problem with file:line:col; exit 0/1.
    CheckConfig {
        /// Configuration file.
        #[arg(long, value_name = "PATH", default_value = crate::config::DEFAULT_PATH)]
        config: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
pub struct SurveyArgs {
    /// Directory trees (one filesystem each, symlinks never followed).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// One JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write a chart of speed and latency by data age (SVG).
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Data older than this is stale.
    #[arg(long, value_name = "DURATION", default_value_t = HumanDuration(DEFAULTS.stale_after))]
    pub stale_after: HumanDuration,
    /// Read budget per drive.
    #[arg(long, value_name = "SIZE", default_value_t = DEFAULTS.sample_bytes)]
    pub sample_bytes: ByteSize,
    /// Stale-data read floor.
    #[arg(long, value_name = "BYTES/s", default_value_t = DEFAULTS.min_throughput)]
    pub min_throughput: Rate,
    /// Stale/fresh throughput ratio floor.
    #[arg(long, value_name = "RATIO", default_value_t = DEFAULTS.min_ratio)]
    pub min_ratio: f64,
    /// Free space that must remain after writing the canary.
    #[arg(long, value_name = "SIZE", default_value_t = DEFAULTS.min_free)]
    pub min_free: ByteSize,
    /// Seed for choosing what to read (same seed, same choices).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The daemon's state directory: the files it refreshed are aged from
    /// its record (read only), as the daemon would (default
    /// /var/lib/refreshd).
    #[arg(long, value_name = "DIR", env = "REFRESHD_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct RefreshArgs {
    /// Files or directories (recursive, one filesystem, symlinks never followed).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Only files whose data is at least this old (since the later of
    /// the mtime and the daemon's last refresh of it, when --state-dir or
    /// /var/lib/refreshd holds its record). Applies to the files found in
    /// directories; files named on the command line are always refreshed.
    #[arg(long, value_name = "DURATION")]
    pub stale_after: Option<HumanDuration>,
    /// Throttle, e.g. "50MiB/s" (default: unthrottled).
    #[arg(long, value_name = "BYTES/s")]
    pub rate: Option<Rate>,
    /// auto: in place under an exclusive lease, kernel relocation for files
    /// other processes have open; inplace: in place only (files in use are
    /// skipped); relocate: relocation only.
    #[arg(long, value_enum, default_value_t = DEFAULTS.strategy)]
    pub strategy: Strategy,
    /// Check and plan every file, write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// One JSON object per file, then a summary object.
    #[arg(long)]
    pub json: bool,
    /// Read every written chunk back and compare checksums.
    #[arg(long)]
    pub verify: bool,
    /// Largest I/O size (a power of two, at least 4KiB).
    #[arg(long, value_name = "SIZE", default_value_t = ByteSize(DEFAULT_CHUNK))]
    pub chunk: ByteSize,
    /// Chunks in flight.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_DEPTH)]
    pub queue_depth: usize,
    /// I/O backend.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub io_backend: BackendChoice,
    /// Also rewrite shared (reflinked/snapshotted) extents; this unshares
    /// them and costs space.
    #[arg(long)]
    pub include_shared: bool,
    /// Free space to keep on copy-on-write filesystems (default 5% of the filesystem).
    #[arg(long, value_name = "SIZE")]
    pub min_free: Option<ByteSize>,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Largest unit the kernel relocates at once (the free space it needs).
    #[arg(long, value_name = "SIZE", default_value_t = ByteSize(DEFAULT_RELOCATE_CHUNK))]
    pub relocate_chunk: ByteSize,
    /// Where the crash-recovery journal lives (default: the daemon's
    /// /var/lib/refreshd when it is writable; without one, a killed run
    /// leaves the mtime of the file it was writing moved).
    #[arg(long, value_name = "DIR", env = "REFRESHD_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// auto: while an application reads the drive, keep its read latency
    /// within 1.2× its latency alone (learned with the refresh silent) and
    /// take what that leaves, never below --yield-floor; --rate when it
    /// does not read; off: always --rate and --queue-depth.
    #[arg(long = "yield", value_enum, default_value_t = DEFAULTS.yield_mode)]
    pub yield_mode: YieldMode,
    /// The rate never drops below this while sharing the drive.
    #[arg(long, value_name = "BYTES/s", default_value_t = DEFAULTS.yield_floor)]
    pub yield_floor: Rate,
    /// idle: reads in the idle I/O class and writes at best-effort 7, per
    /// request; inherit: the process's own priority (ionice).
    #[arg(long, value_enum, default_value_t = DEFAULTS.io_priority)]
    pub io_priority: IoPriority,
}

/// The command line as clap sees it (man pages, completions).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}
