//! The control socket: newline-delimited JSON (see `protocol`), one handler
//! per verb, every request authorised by the peer's credentials (root for
//! everything; members of `control_group` for the read-only verbs). A bad
//! or hostile request gets an error line and changes nothing.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;

use super::Shared;
use crate::config::Config;
use crate::protocol::{self, ask, Response, MAX_LINE};

mod answer;
use answer::Control;

/// Binds the socket: its directory is created (0755) if missing, a stale
/// socket file is replaced, a live one is an error; mode 0600 (0660 and
/// the configured group with `control_group`).
pub fn bind(cfg: &Config) -> Result<std::os::unix::net::UnixListener> {
    let path = &cfg.control_socket;
    if let Some(dir) = path.parent() {
        if !dir.exists() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!("{} is in use by a running daemon", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
    }
    let l = std::os::unix::net::UnixListener::bind(path)
        .with_context(|| format!("binding {}", path.display()))?;
    l.set_nonblocking(true)?;
    let mode = if cfg.control_group.is_some() {
        0o660
    } else {
        0o600
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    if let Some(g) = &cfg.control_group {
        match nix::unistd::Group::from_name(g) {
            Ok(Some(group)) => {
                nix::unistd::chown(path.as_path(), None, Some(group.gid))
                    .with_context(|| format!("chown {} to group {g}", path.display()))?;
            }
            _ => tracing::warn!("control_group {g:?} does not exist: only root may connect"),
        }
    }
    Ok(l)
}

/// Connections open at once from peers other than root (members of
/// `control_group`): beyond, a connection is answered "too many" and
/// closed at once. Root is never turned away (its connections are bounded
/// by the idle timeout and the file limit alone).
pub const MAX_PEER_CONNECTIONS: usize = 64;
/// A connection must send its next request within this, or it is closed
/// (`refreshctl now --wait` asks every 300 ms).
pub const IDLE: Duration = Duration::from_secs(30);

pub async fn serve(listener: UnixListener, shared: Arc<Shared>) {
    let others = Arc::new(Semaphore::new(MAX_PEER_CONNECTIONS));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let root = stream.peer_cred().is_ok_and(|c| c.uid() == 0);
                let permit = if root {
                    None
                } else {
                    match others.clone().try_acquire_owned() {
                        Ok(p) => Some(p),
                        Err(_) => {
                            count(&shared, "connect", "too_many");
                            tokio::spawn(turn_away(stream));
                            continue;
                        }
                    }
                };
                let s = shared.clone();
                tokio::spawn(async move {
                    if let Err(e) = connection(stream, s).await {
                        tracing::debug!("control connection: {e}");
                    }
                    drop(permit);
                });
            }
            Err(e) => {
                // EMFILE and the like: the next accept after a pause.
                tracing::warn!("control socket accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One line saying why, then closed (never waiting on the peer long).
async fn turn_away(mut stream: UnixStream) {
    let resp = Response::err(format!(
        "too many connections from users other than root ({MAX_PEER_CONNECTIONS} open): try again"
    ));
    let mut s = serde_json::to_string(&resp).unwrap_or_default();
    s.push('\n');
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(s.as_bytes())).await;
}

/// Who is asking.
#[derive(Debug, Clone, Copy)]
struct Peer {
    uid: u32,
    gid: u32,
    pid: Option<i32>,
}

fn in_group(peer: Peer, group: &str) -> bool {
    let Ok(Some(g)) = nix::unistd::Group::from_name(group) else {
        return false;
    };
    let gid = g.gid.as_raw();
    if peer.gid == gid {
        return true;
    }
    // Supplementary groups, from /proc.
    peer.pid
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Groups:"))
                .map(|l| l.split_whitespace().skip(1).any(|x| x.parse() == Ok(gid)))
        })
        .unwrap_or(false)
}

async fn connection(stream: UnixStream, shared: Arc<Shared>) -> std::io::Result<()> {
    let cred = stream.peer_cred()?;
    let peer = Peer {
        uid: cred.uid(),
        gid: cred.gid(),
        pid: cred.pid(),
    };
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    loop {
        let mut line = Vec::new();
        let mut limited = (&mut r).take(MAX_LINE as u64 + 1);
        let read = limited.read_until(b'\n', &mut line);
        let Ok(n) = tokio::time::timeout(IDLE, read).await else {
            return Ok(()); // idle: closed
        };
        if n? == 0 {
            return Ok(());
        }
        if line.len() > MAX_LINE {
            let resp = Response::err(format!("request too long (limit {MAX_LINE} bytes)"));
            write(&mut w, &resp).await?;
            return Ok(()); // the rest of the line is not worth reading
        }
        let resp = match std::str::from_utf8(&line) {
            Err(_) => Response::err("bad request: not UTF-8"),
            Ok(text) if text.trim().is_empty() => continue,
            Ok(text) => handle(text.trim(), peer, &shared),
        };
        write(&mut w, &resp).await?;
    }
}

async fn write(w: &mut tokio::net::unix::OwnedWriteHalf, resp: &Response) -> std::io::Result<()> {
    let mut s = serde_json::to_string(resp).unwrap_or_else(|_| "{}".into());
    s.push('\n');
    w.write_all(s.as_bytes()).await
}

fn handle(text: &str, peer: Peer, shared: &Shared) -> Response {
    let req = match protocol::parse_request(text) {
        Ok(r) => r,
        Err(e) => {
            count(shared, "invalid", "error");
            return Response::err(e.to_string());
        }
    };
    let verb = req.verb;
    let cfg = shared.config();
    let allowed = peer.uid == 0
        || (verb.read_only()
            && cfg
                .control_group
                .as_deref()
                .is_some_and(|g| in_group(peer, g)));
    if !allowed {
        count(shared, verb.name(), "denied");
        return Response::err(format!(
            "permission denied: '{}' needs root{}",
            verb.name(),
            if verb.read_only() {
                " or membership in control_group"
            } else {
                ""
            }
        ));
    }
    let name = verb.name();
    let resp = ask::answer(verb, &Control { shared, cfg: &cfg });
    count(shared, name, if resp.ok { "ok" } else { "error" });
    resp
}

fn count(shared: &Shared, verb: &str, result: &str) {
    shared
        .metrics
        .requests
        .get_or_create(&super::metrics::Verb {
            verb: verb.into(),
            result: result.into(),
        })
        .inc();
}
