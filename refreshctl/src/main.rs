//! `refreshctl`: the operator's client for the refreshd daemon. Thin:
//! parse, call, render, exit code (0 ok, 1 the request failed or the daemon
//! is unreachable, 2 usage).

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use refreshctl::cli::{Cli, Cmd};
use refreshctl::client::{self, Client, ClientError};
use refreshd_protocol::ask;
use serde_json::Value;

fn main() -> ExitCode {
    let cli = Cli::parse();
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
        let (req, _) = c.ask(ask::Now {
            drive,
            path: path.map(|p| refreshd_protocol::pathtext::text(&p)),
            force,
        })?;
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
            let (st, v) = c.ask(ask::Status)?;
            (client::render_status(&st), v)
        }
        Cmd::Drives => {
            let (d, v) = c.ask(ask::Drives)?;
            (client::render_drives(&d), v)
        }
        Cmd::Plan => {
            let (p, v) = c.ask(ask::Plan)?;
            (client::render_plan(&p), v)
        }
        Cmd::Survey => {
            let (s, v) = c.ask(ask::Survey)?;
            (client::render_survey(&s), v)
        }
        Cmd::Now {
            drive, path, force, ..
        } => {
            let (req, v) = c.ask(ask::Now {
                drive,
                path: path.map(|p| refreshd_protocol::pathtext::text(&p)),
                force,
            })?;
            let devs: Vec<&str> = req.iter().map(|r| r.device.as_str()).collect();
            (format!("requested on {}\n", devs.join(", ")), v)
        }
        Cmd::Pause { drive } => {
            let (_, v) = c.ask(ask::Pause { drive, on: true })?;
            ("paused\n".to_string(), v)
        }
        Cmd::Resume { drive } => {
            let (_, v) = c.ask(ask::Pause { drive, on: false })?;
            ("resumed\n".to_string(), v)
        }
    })
}
