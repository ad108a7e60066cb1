//! `refreshctl`'s command line (also what its man pages and completions
//! are generated from).

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use refreshd_protocol::DEFAULT_SOCKET;

#[derive(Parser, Debug)]
#[command(
    name = "refreshctl",
    version,
    about = "Control and inspect the refreshd daemon",
    // `--help` and `<verb> --help`; no `help` verb (its man page would
    // not exist).
    disable_help_subcommand = true
)]
pub struct Cli {
    /// The daemon's control socket.
    #[arg(long, global = true, env = "REFRESHCTL_SOCKET", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Print the daemon's JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Per drive: state, stale bytes, last sample, refresh progress and ETA.
    Status,
    /// The drives and the configured trees on them.
    Drives,
    /// What a refresh would rewrite, per drive.
    Plan,
    /// The latest sample per drive: speed and latency by data age.
    Survey,
    /// Sample now and refresh if degraded (or anyway, with --force).
    Now {
        /// Only this drive (e.g. sda, nvme0n1).
        #[arg(long, value_name = "DEV")]
        drive: Option<String>,
        /// Only files under this path (inside a configured tree).
        #[arg(long, value_name = "PATH")]
        path: Option<PathBuf>,
        /// Refresh the stale files even if the drive looks healthy.
        #[arg(long)]
        force: bool,
        /// Follow the progress until done.
        #[arg(long)]
        wait: bool,
    },
    /// Pause refreshing (the file in flight stops after its I/O and is checkpointed).
    Pause {
        #[arg(long, value_name = "DEV")]
        drive: Option<String>,
    },
    /// Resume refreshing.
    Resume {
        #[arg(long, value_name = "DEV")]
        drive: Option<String>,
    },
}

/// The command line as clap sees it (man pages, completions).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}
