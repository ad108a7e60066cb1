//! `refreshctl`: the operator's client for the refreshd daemon. Thin:
//! parse, call, render, exit code (0 ok, 1 the request failed or the daemon
//! is unreachable, 2 usage).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use refreshd::client::{self, Client, DEFAULT_SOCKET};
use refreshd::protocol::Verb;

#[derive(Parser, Debug)]
#[command(
    name = "refreshctl",
    version,
    about = "Control and inspect the refreshd daemon"
)]
struct Cli {
    /// The daemon's control socket.
    #[arg(long, global = true, env = "REFRESHCTL_SOCKET", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Print the daemon's JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
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
    /// Write man pages and shell completions into DIR (packaging).
    #[command(name = "__assets", hide = true)]
    Assets { dir: PathBuf },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Cmd::Assets { dir } = &cli.command {
        return match refreshd::assets::write(Cli::command(), dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("refreshctl __assets {}: {e}", dir.display());
                ExitCode::FAILURE
            }
        };
    }
    let mut c = match Client::connect(&cli.socket) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("refreshctl: {e}");
            return ExitCode::from(1);
        }
    };
    let result = match cli.command {
        Cmd::Status => c
            .call(Verb::Status {})
            .map(|v| (client::render_status(&v), v)),
        Cmd::Drives => c
            .call(Verb::Drives {})
            .map(|v| (client::render_drives(&v), v)),
        Cmd::Plan => c.call(Verb::Plan {}).map(|v| (client::render_plan(&v), v)),
        Cmd::Survey => c
            .call(Verb::Survey {})
            .map(|v| (client::render_survey(&v), v)),
        Cmd::Now {
            drive,
            path,
            force,
            wait,
        } => {
            let verb = Verb::Now {
                drive,
                path: path.map(|p| p.to_string_lossy().into_owned()),
                force,
            };
            c.call(verb).and_then(|v| {
                if wait {
                    let bar = !cli.json && std::io::stderr().is_terminal();
                    client::wait(&mut c, &v, bar).map(|st| (client::render_now_done(&v, &st), st))
                } else {
                    let devs: Vec<String> = v
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|d| d["device"].as_str().map(str::to_string))
                        .collect();
                    Ok((format!("requested on {}\n", devs.join(", ")), v))
                }
            })
        }
        Cmd::Pause { drive } => c
            .call(Verb::Pause { drive })
            .map(|v| ("paused\n".to_string(), v)),
        Cmd::Resume { drive } => c
            .call(Verb::Resume { drive })
            .map(|v| ("resumed\n".to_string(), v)),
        Cmd::Assets { .. } => unreachable!("handled before connecting"),
    };
    match result {
        Ok((text, v)) => {
            if cli.json {
                println!("{v}");
            } else {
                print!("{text}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("refreshctl: {e}");
            ExitCode::from(1)
        }
    }
}
