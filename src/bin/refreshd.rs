//! `refreshd`: the daemon and its one-shot subcommands. Thin: parse, run,
//! map the result to an exit code (0 ok, 1 a file failed, 2 usage/config).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use refreshd::engine::{BackendChoice, DEFAULT_CHUNK, DEFAULT_DEPTH};
use refreshd::oneshot::{self, RefreshOptions, Strategy};
use refreshd::units::{ByteSize, Rate};

#[derive(Parser, Debug)]
#[command(
    name = "refreshd",
    version,
    about = "Keeps data on drift-prone SSDs fast by rewriting stale files in place, safely"
)]
struct Cli {
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Less log output.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Rewrite files (or directory trees, one filesystem) in place, safely:
    /// the same bytes, O_DIRECT, throttled, under an exclusive lease.
    Refresh(RefreshArgs),
}

#[derive(clap::Args, Debug)]
struct RefreshArgs {
    /// Files or directories (recursive, one filesystem, symlinks never followed).
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Throttle, e.g. "50MiB/s" (default: unthrottled).
    #[arg(long, value_name = "BYTES/s")]
    rate: Option<Rate>,
    /// auto: in place, files in use are skipped; inplace: the same, explicitly.
    #[arg(long, value_enum, default_value_t = Strategy::Auto)]
    strategy: Strategy,
    /// Check and plan every file, write nothing.
    #[arg(long)]
    dry_run: bool,
    /// One JSON object per file, then a summary object.
    #[arg(long)]
    json: bool,
    /// Read every written chunk back and compare checksums.
    #[arg(long)]
    verify: bool,
    /// Largest I/O size (a power of two, at least 4KiB).
    #[arg(long, value_name = "SIZE", default_value_t = ByteSize(DEFAULT_CHUNK))]
    chunk: ByteSize,
    /// Chunks in flight.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_DEPTH)]
    queue_depth: usize,
    /// I/O backend.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    io_backend: BackendChoice,
    /// Also rewrite shared (reflinked/snapshotted) extents; this unshares
    /// them and costs space.
    #[arg(long)]
    include_shared: bool,
    /// Free space to keep on copy-on-write filesystems (default 5% of the filesystem).
    #[arg(long, value_name = "SIZE")]
    min_free: Option<ByteSize>,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    refreshd::init_logging(if cli.quiet { -1 } else { cli.verbose as i8 });
    let code = match cli.command {
        Command::Refresh(a) => {
            let opts = RefreshOptions {
                paths: a.paths,
                rate: a.rate.map(|r| r.0),
                strategy: a.strategy,
                dry_run: a.dry_run,
                json: a.json,
                verify: a.verify,
                chunk: a.chunk.0,
                depth: a.queue_depth,
                backend: a.io_backend,
                include_shared: a.include_shared,
                min_free: a.min_free.map(|s| s.0),
                progress: !a.no_progress,
            };
            let cancel = oneshot::install_cancel_handler();
            match oneshot::run(&opts, cancel) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("refreshd refresh: {:#}", anyhow::Error::from(e));
                    2
                }
            }
        }
    };
    ExitCode::from(code as u8)
}
