//! `refreshctl`'s calls: the control socket, a request and its typed
//! reply, and following `now --wait` (the tables are in [`crate::render`]).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::render::slot_line;

use refreshd_protocol::ask::{self, reply_of, Ask};
use refreshd_protocol::replies::{NowAccepted, StatusReply};
use refreshd_protocol::{Request, Response, Verb, VERSION};

pub use crate::render::{
    render_drives, render_fleet, render_now_done, render_plan, render_status, render_survey,
    requests_failed,
};
pub use refreshd_protocol::DEFAULT_SOCKET;

/// Why a command did not work.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("refreshd is not running: no control socket at {} ({})", .0.display(), not_running_hint(.0))]
    NotRunning(PathBuf),
    #[error("refreshd is not running: {0} exists but nobody listens (stale socket)")]
    Stale(PathBuf),
    #[error("cannot access {0}: permission denied (root, or membership in the configured control_group, is needed)")]
    Denied(PathBuf),
    #[error("talking to refreshd at {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("refreshd: {0}")]
    Refused(String),
}

/// What to do about a missing socket: the packaged daemon's is started by
/// systemd; another one may still be starting (it makes its socket once
/// it is ready), or run with another `control_socket`.
fn not_running_hint(path: &Path) -> &'static str {
    if path == Path::new(DEFAULT_SOCKET) {
        "start it with `systemctl start refreshd`; a daemon with another control_socket: --socket PATH"
    } else {
        "a daemon just started makes it when it is ready; check the path (its control_socket)"
    }
}

/// A connection to the daemon.
#[derive(Debug)]
pub struct Client {
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let s = UnixStream::connect(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ClientError::NotRunning(path.into()),
            std::io::ErrorKind::ConnectionRefused => ClientError::Stale(path.into()),
            std::io::ErrorKind::PermissionDenied => ClientError::Denied(path.into()),
            _ => ClientError::Io {
                path: path.into(),
                source: e,
            },
        })?;
        let io = |source| ClientError::Io {
            path: path.into(),
            source,
        };
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(io)?;
        let writer = s.try_clone().map_err(io)?;
        Ok(Client {
            path: path.into(),
            reader: BufReader::new(s),
            writer,
        })
    }

    /// Sends one request, returns the data of a successful response.
    pub fn call(&mut self, verb: Verb) -> Result<Value, ClientError> {
        let io = |source| ClientError::Io {
            path: self.path.clone(),
            source,
        };
        let mut line = Request { v: VERSION, verb }.encode();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).map_err(io)?;
        let mut resp = String::new();
        self.reader.read_line(&mut resp).map_err(io)?;
        if resp.is_empty() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the daemon closed the connection",
            )));
        }
        let r: Response = serde_json::from_str(&resp)
            .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        if r.ok {
            Ok(r.data.unwrap_or(Value::Null))
        } else {
            Err(ClientError::Refused(
                r.error.unwrap_or_else(|| "unknown error".into()),
            ))
        }
    }

    /// Sends one request; the answer typed, and as it came (for `--json`).
    pub fn ask<A: Ask>(&mut self, ask: A) -> Result<(A::Reply, Value), ClientError> {
        let v = self.call(ask.verb())?;
        let t = reply_of::<A>(v.clone()).map_err(|e| ClientError::Io {
            path: self.path.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("unexpected answer from the daemon (another version?): {e}"),
            ),
        })?;
        Ok((t, v))
    }
}

/// `now --wait`: follows the drives' progress until the requests are done.
/// Returns the last status, typed and as it came.
pub fn wait(
    client: &mut Client,
    requested: &[NowAccepted],
    show_bar: bool,
) -> Result<(StatusReply, Value), ClientError> {
    let bar = show_bar.then(|| {
        let pb = indicatif::ProgressBar::new(0);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        pb
    });
    loop {
        let (st, raw) = client.ask(ask::Status)?;
        let mut all_done = true;
        for r in requested {
            let Some(d) = st.drives.iter().find(|d| d.device == r.device) else {
                continue;
            };
            if d.completed < r.request {
                all_done = false;
            }
            match (&bar, &d.refresh, &d.waiting) {
                (Some(pb), Some(p), _) => {
                    pb.set_length(p.bytes_total);
                    pb.set_position(p.bytes_done);
                    pb.set_message(format!(
                        "{} {}/{} files",
                        r.device, p.files_done, p.files_total
                    ));
                }
                // Not started: say what it waits for (a fleet slot, …).
                (Some(pb), None, Some(w)) => {
                    let slot = d.slot.as_ref().map(slot_line);
                    pb.set_message(format!(
                        "{} waits ({}){}",
                        r.device,
                        w.word(),
                        slot.map_or(String::new(), |l| format!(": {l}"))
                    ));
                    pb.tick();
                }
                _ => {}
            }
        }
        if all_done {
            if let Some(pb) = bar {
                pb.finish_and_clear();
            }
            return Ok((st, raw));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}
