//! The control socket: newline-delimited JSON (see `protocol`), one handler
//! per verb, every request authorised by the peer's credentials (root for
//! everything; members of `control_group` for the read-only verbs). A bad
//! or hostile request gets an error line and changes nothing.

use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use super::shared::{DriveCell, NowRequest};
use super::Shared;
use crate::config::Config;
use crate::protocol::{self, Response, Verb, MAX_LINE};

/// Binds the socket: its directory is created (0755) if missing, a stale
/// socket file is replaced, a live one is an error; mode 0600 (0660 and
/// the configured group with `control_group`).
pub fn bind(cfg: &Config) -> Result<UnixListener> {
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
    let l = UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
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

pub async fn serve(listener: UnixListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let s = shared.clone();
                tokio::spawn(async move {
                    if let Err(e) = connection(stream, s).await {
                        tracing::debug!("control connection: {e}");
                    }
                });
            }
            Err(e) => {
                tracing::warn!("control socket accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
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
        let n = (&mut r)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
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
            return Response::err(e);
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
    let resp = match &verb {
        Verb::Status {} => Ok(status(shared)),
        Verb::Drives {} => Ok(drives(shared)),
        Verb::Plan {} => Ok(plan(shared)),
        Verb::Survey {} => Ok(survey(shared)),
        Verb::Now { drive, path, force } => {
            now(shared, &cfg, drive.as_deref(), path.as_deref(), *force)
        }
        Verb::Pause { drive } => pause(shared, drive.as_deref(), true),
        Verb::Resume { drive } => pause(shared, drive.as_deref(), false),
    };
    match resp {
        Ok(v) => {
            count(shared, verb.name(), "ok");
            Response::ok(v)
        }
        Err(e) => {
            count(shared, verb.name(), "error");
            Response::err(e)
        }
    }
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

fn status(shared: &Shared) -> Value {
    let drives: Vec<Value> = shared
        .drives
        .iter()
        .map(|c| {
            let st = c.lock();
            json!({
                "device": c.label,
                "state": st.health.state.name(),
                "waiting": st.waiting,
                "diagnosis": st.diagnosis,
                "paused": c.paused.load(Ordering::Relaxed),
                "files": st.files,
                "stale_files": st.stale_files,
                "stale_bytes": st.stale_bytes,
                "last_scan": st.last_scan,
                "last_sample": st.last_sample.as_ref().map(|s| json!({
                    "at": s.at,
                    "stale_bps": s.judgement.stale_bps,
                    "fresh_bps": s.judgement.fresh_bps,
                    "ratio": s.judgement.ratio,
                    "reasons": s.judgement.reasons,
                    "reference": s.judgement.reference,
                    "unjudged": s.judgement.unjudged,
                    "slow": s.judgement.slow,
                })),
                "refresh": st.refresh,
                "yielding": c.pace.yielding().map(|y| json!({
                    "since": y.since,
                    "reason": y.reason,
                })),
                "yielded_seconds": c.pace.yielded().as_secs_f64(),
                "last_refresh": st.last_refresh,
                "requests": st.requests,
                "completed": st.completed,
                "last_request": st.last_request,
                "error": st.error,
            })
        })
        .collect();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": shared.started.elapsed().as_secs(),
        "drives": drives,
        "unwatched": unwatched(shared),
    })
}

fn unwatched(shared: &Shared) -> Vec<Value> {
    shared
        .unwatched
        .iter()
        .map(|(p, why)| json!({"path": p, "reason": why}))
        .collect()
}

/// One entry per drive; a tree that cannot be watched is an entry of its
/// own with `"device": "unwatched"` and the reason.
fn drives(shared: &Shared) -> Value {
    let watched = shared
        .drives
        .iter()
        .map(|c| json!({"device": c.label, "drives": c.drives, "paths": c.roots}));
    let unwatched = shared
        .unwatched
        .iter()
        .map(|(p, why)| json!({"device": "unwatched", "drives": [], "paths": [p], "error": why}));
    Value::Array(watched.chain(unwatched).collect())
}

fn plan(shared: &Shared) -> Value {
    Value::Array(
        shared
            .drives
            .iter()
            .map(|c| {
                let st = c.lock();
                json!({"device": c.label, "plan": st.plan})
            })
            .collect(),
    )
}

fn survey(shared: &Shared) -> Value {
    Value::Array(
        shared
            .drives
            .iter()
            .map(|c| {
                let st = c.lock();
                json!({
                    "device": c.label,
                    "drives": c.drives,
                    "paths": c.roots,
                    "state": st.health.state.name(),
                    "sample": st.last_sample,
                })
            })
            .collect(),
    )
}

/// A path from a request: absolute, no NUL, no `..`, under a configured tree.
fn check_path(cfg: &Config, p: &str) -> Result<PathBuf, String> {
    if p.contains('\0') {
        return Err("bad path: contains a NUL byte".into());
    }
    let path = Path::new(p);
    if !path.is_absolute() {
        return Err(format!("bad path {p:?}: must be absolute"));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(format!("bad path {p:?}: must not contain '..'"));
    }
    if !cfg.paths.iter().any(|t| path.starts_with(&t.path)) {
        return Err(format!("{p} is not under a configured path"));
    }
    Ok(path.to_path_buf())
}

fn now(
    shared: &Shared,
    cfg: &Config,
    drive: Option<&str>,
    path: Option<&str>,
    force: bool,
) -> Result<Value, String> {
    let path = path.map(|p| check_path(cfg, p)).transpose()?;
    let cells: Vec<_> = match (drive, &path) {
        (Some(_), _) => cells_for(shared, drive)?,
        (None, Some(p)) => shared
            .drives
            .iter()
            .filter(|c| c.roots.iter().any(|r| p.starts_with(r)))
            .cloned()
            .collect(),
        (None, None) => shared.drives.clone(),
    };
    if cells.is_empty() {
        return Err("no drive matches".into());
    }
    let mut out = vec![];
    for c in cells {
        let mut st = c.lock();
        st.requests += 1;
        let prev = st.pending.take().unwrap_or_default();
        st.pending = Some(NowRequest {
            force: force || prev.force,
            path: path.clone().or(prev.path),
        });
        out.push(json!({"device": c.label, "request": st.requests}));
        drop(st);
        c.poke();
    }
    Ok(Value::Array(out))
}

/// The drive a request names, or all of them.
fn cells_for(shared: &Shared, drive: Option<&str>) -> Result<Vec<Arc<DriveCell>>, String> {
    match drive {
        Some(d) => shared
            .find_drive(d)
            .map(|c| vec![c.clone()])
            .ok_or_else(|| format!("no such drive: {d}")),
        None => Ok(shared.drives.clone()),
    }
}

fn pause(shared: &Shared, drive: Option<&str>, on: bool) -> Result<Value, String> {
    let mut out = vec![];
    for c in cells_for(shared, drive)? {
        c.paused.store(on, Ordering::Relaxed);
        if on {
            // Stops the file in flight after its I/O; it is checkpointed.
            c.cancel.store(true, Ordering::Relaxed);
        }
        c.poke();
        out.push(json!({"device": c.label, "paused": on}));
    }
    Ok(Value::Array(out))
}
