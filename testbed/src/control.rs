//! The control socket of a background drive (`D/control.sock`): one JSON
//! request per line, one JSON response per line. `agingssd age`, `fault`,
//! `stats` and `down` talk to the `serve` process through it.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::disk::{DiskState, Stats};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    Age {
        months: f64,
    },
    Fault {
        offset: u64,
        len: u64,
        /// Writes fail instead of reads.
        #[serde(default)]
        write: bool,
    },
    Stats,
    /// Caps the link (all reads and writes) at this many bytes/s; 0 lifts it.
    LinkCap {
        bytes_per_sec: u64,
    },
    /// Write-path fade: after `after_bytes` written since the last
    /// discard, requests are `factor` times slower; `after_bytes` 0: off.
    Fade {
        after_bytes: u64,
        factor: u64,
    },
    Shutdown,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    Ok,
    Stats(Box<Stats>),
    Error(String),
}

pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join("control.sock")
}

/// Set when a shutdown was requested.
#[derive(Debug, Default)]
pub struct StopFlag {
    stopped: Mutex<bool>,
    cv: Condvar,
}

impl StopFlag {
    pub fn stop(&self) {
        *self.stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_all();
    }

    pub fn wait(&self) {
        let mut s = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        while !*s {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }
}

const MAX_LINE: u64 = 64 * 1024;

fn handle(state: &DiskState, stop: &StopFlag, line: &str) -> Response {
    match serde_json::from_str::<Request>(line) {
        Ok(Request::Age { months }) if months.is_finite() && months >= 0.0 => {
            state.age(months);
            Response::Ok
        }
        Ok(Request::Age { months }) => Response::Error(format!(
            "months must be a non-negative number, not {months}"
        )),
        Ok(Request::Fault { offset, len, write }) if len > 0 && offset < state.size => {
            if write {
                state.add_write_fault(offset, len);
            } else {
                state.add_fault(offset, len);
            }
            Response::Ok
        }
        Ok(Request::Fault { offset, len, .. }) => Response::Error(format!(
            "fault {offset}+{len} is outside the {}-byte disk or empty",
            state.size
        )),
        Ok(Request::Stats) => Response::Stats(Box::new(state.stats())),
        Ok(Request::Fade {
            after_bytes,
            factor,
        }) => {
            state.set_fade(after_bytes, factor);
            Response::Ok
        }
        Ok(Request::LinkCap { bytes_per_sec }) => {
            state.set_link_cap(bytes_per_sec);
            Response::Ok
        }
        Ok(Request::Shutdown) => {
            stop.stop();
            Response::Ok
        }
        Err(e) => Response::Error(format!("bad request: {e}")),
    }
}

/// Serves the socket on a thread until the process ends.
pub fn serve(dir: &Path, state: Arc<DiskState>, stop: Arc<StopFlag>) -> Result<()> {
    let path = socket_path(dir);
    let _ = std::fs::remove_file(&path);
    let listener =
        UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
    std::thread::Builder::new()
        .name("agingssd-control".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                let mut reader = BufReader::new(conn.take(MAX_LINE));
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let resp = handle(&state, &stop, line.trim());
                let mut conn = reader.into_inner().into_inner();
                let _ = writeln!(conn, "{}", serde_json::to_string(&resp).unwrap_or_default());
            }
        })?;
    Ok(())
}

/// Sends one request to the drive in `dir`.
pub fn request(dir: &Path, req: &Request) -> Result<Response> {
    let path = socket_path(dir);
    let mut conn = UnixStream::connect(&path).with_context(|| {
        format!(
            "no drive is up in {} (start one with `agingssd up --dir {}`)",
            dir.display(),
            dir.display()
        )
    })?;
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    writeln!(conn, "{}", serde_json::to_string(req)?)?;
    let mut line = String::new();
    BufReader::new(conn).read_line(&mut line)?;
    let resp: Response =
        serde_json::from_str(line.trim()).context("bad response from the drive")?;
    if let Response::Error(e) = &resp {
        bail!("{e}");
    }
    Ok(resp)
}
