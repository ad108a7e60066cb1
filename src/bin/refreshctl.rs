//! `refreshctl`: the operator's client for the refreshd daemon. Thin:
//! parse, call, render, exit code (0 ok, 1 the request failed or the daemon
//! is unreachable, 2 usage).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use refreshd::client::{self, Client, ClientError, DEFAULT_SOCKET};
use refreshd::protocol::replies::{
    DriveEntry, NowAccepted, PauseReply, PlanReply, StatusReply, SurveyReply,
};
use refreshd::protocol::Verb;
use serde_json::Value;

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
        Err(e) => return fail(cli.json, &e),
    };
    match run(&mut c, cli.command, cli.json) {
        Ok((text, v, failed)) => {
            if cli.json {
                println!("{v}");
            } else {
                print!("{text}");
            }
            if failed {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => fail(cli.json, &e),
    }
}

/// An error: a line on stderr, or with `--json` a JSON object on stdout
/// (`{"ok": false, "error": …}`, as the daemon's own refusals look).
fn fail(json: bool, e: &ClientError) -> ExitCode {
    if json {
        println!(
            "{}",
            serde_json::json!({"ok": false, "error": e.to_string()})
        );
    } else {
        eprintln!("refreshctl: {e}");
    }
    ExitCode::from(1)
}

/// Runs one command: the text to show, the daemon's answer as it came,
/// and whether what was asked failed (`now --wait`: a file failed).
fn run(c: &mut Client, cmd: Cmd, json: bool) -> Result<(String, Value, bool), ClientError> {
    if let Cmd::Now {
        drive,
        path,
        force,
        wait: true,
    } = cmd
    {
        let verb = Verb::Now {
            drive,
            path: path.map(|p| refreshd::pathtext::text(&p)),
            force,
        };
        let (req, _) = c.call_as::<Vec<NowAccepted>>(verb)?;
        let bar = !json && std::io::stderr().is_terminal();
        let (st, raw) = client::wait(c, &req, bar)?;
        let failed = client::requests_failed(&req, &st);
        return Ok((client::render_now_done(&req, &st), raw, failed));
    }
    let (text, v) = run_plain(c, cmd)?;
    Ok((text, v, false))
}

fn run_plain(c: &mut Client, cmd: Cmd) -> Result<(String, Value), ClientError> {
    Ok(match cmd {
        Cmd::Status => {
            let (st, v) = c.call_as::<StatusReply>(Verb::Status {})?;
            (client::render_status(&st), v)
        }
        Cmd::Drives => {
            let (d, v) = c.call_as::<Vec<DriveEntry>>(Verb::Drives {})?;
            (client::render_drives(&d), v)
        }
        Cmd::Plan => {
            let (p, v) = c.call_as::<Vec<PlanReply>>(Verb::Plan {})?;
            (client::render_plan(&p), v)
        }
        Cmd::Survey => {
            let (s, v) = c.call_as::<Vec<SurveyReply>>(Verb::Survey {})?;
            (client::render_survey(&s), v)
        }
        Cmd::Now {
            drive, path, force, ..
        } => {
            let verb = Verb::Now {
                drive,
                path: path.map(|p| refreshd::pathtext::text(&p)),
                force,
            };
            let (req, v) = c.call_as::<Vec<NowAccepted>>(verb)?;
            let devs: Vec<&str> = req.iter().map(|r| r.device.as_str()).collect();
            (format!("requested on {}\n", devs.join(", ")), v)
        }
        Cmd::Pause { drive } => {
            let (_, v) = c.call_as::<Vec<PauseReply>>(Verb::Pause { drive })?;
            ("paused\n".to_string(), v)
        }
        Cmd::Resume { drive } => {
            let (_, v) = c.call_as::<Vec<PauseReply>>(Verb::Resume { drive })?;
            ("resumed\n".to_string(), v)
        }
        Cmd::Assets { .. } => unreachable!("handled before connecting"),
    })
}
