//! The daemon's answers, one method per verb (the protocol crate fixes
//! each one's reply type): status, drives, plan, survey, now and pause.

use std::path::{Component, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::super::shared::{DriveCell, NowRequest};
use super::super::Shared;
use crate::config::Config;
use crate::protocol::ask;
use crate::protocol::replies::{
    DriveEntry, DriveStatusReply, NowAccepted, PauseReply, PlanReply, SampleSummary, StatusReply,
    SurveyReply, UnwatchedTree, YieldingNow,
};

/// The daemon's answers, one method per verb (the protocol crate fixes
/// each one's reply type).
pub(super) struct Control<'a> {
    pub(super) shared: &'a Shared,
    pub(super) cfg: &'a Config,
}

impl ask::Answer for Control<'_> {
    fn status(&self) -> StatusReply {
        status(self.shared)
    }
    fn drives(&self) -> Vec<DriveEntry> {
        drives(self.shared)
    }
    fn plan(&self) -> Vec<PlanReply> {
        plan(self.shared)
    }
    fn survey(&self) -> Vec<SurveyReply> {
        survey(self.shared)
    }
    fn now(&self, a: ask::Now) -> Result<Vec<NowAccepted>, String> {
        now(
            self.shared,
            self.cfg,
            a.drive.as_deref(),
            a.path.as_deref(),
            a.force,
        )
    }
    fn pause(&self, a: ask::Pause) -> Result<Vec<PauseReply>, String> {
        pause(self.shared, a.drive.as_deref(), a.on)
    }
}

fn status(shared: &Shared) -> StatusReply {
    let drives = shared
        .drives
        .iter()
        .map(|c| {
            let st = c.lock();
            DriveStatusReply {
                device: c.label.clone(),
                state: st.health.state,
                waiting: st.waiting,
                diagnosis: st.diagnosis.clone(),
                paused: c.paused.load(Ordering::Relaxed),
                files: st.files,
                stale_files: st.stale_files,
                stale_bytes: st.stale_bytes,
                last_scan: st.last_scan,
                last_sample: st
                    .last_sample
                    .as_ref()
                    .map(|s| SampleSummary::of(s.at, &s.judgement, s.forecast)),
                refresh: st.refresh.clone(),
                yielding: c.pace.yielding().map(|y| YieldingNow {
                    since: y.since,
                    reason: y.reason,
                }),
                yielded_seconds: c.pace.yielded().as_secs_f64(),
                last_refresh: st.last_refresh,
                requests: st.requests,
                completed: st.completed,
                last_request: st.last_request.clone(),
                last_request_round: st.last_request_round.clone(),
                last_round: st.last_round.clone(),
                error: st.error.clone(),
                slot: c.slot_reply(),
            }
        })
        .collect();
    StatusReply {
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_seconds: shared.started.elapsed().as_secs(),
        drives,
        unwatched: shared
            .unwatched
            .iter()
            .map(|(p, why)| UnwatchedTree {
                path: p.clone(),
                reason: why.clone(),
            })
            .collect(),
        coordination: shared.fleet.as_ref().map(|f| f.reply()),
    }
}

/// One entry per drive; a tree that cannot be watched is an entry of its
/// own with `"device": "unwatched"` and the reason.
fn drives(shared: &Shared) -> Vec<DriveEntry> {
    let watched = shared.drives.iter().map(|c| DriveEntry {
        device: c.label.clone(),
        drives: c.drives.clone(),
        paths: c.roots.clone(),
        error: None,
        controller: Some(c.controller.clone()),
        group: c.group.clone(),
    });
    let unwatched = shared.unwatched.iter().map(|(p, why)| DriveEntry {
        device: "unwatched".into(),
        drives: vec![],
        paths: vec![p.clone()],
        error: Some(why.clone()),
        controller: None,
        group: None,
    });
    watched.chain(unwatched).collect()
}

fn plan(shared: &Shared) -> Vec<PlanReply> {
    shared
        .drives
        .iter()
        .map(|c| PlanReply {
            device: c.label.clone(),
            plan: c.lock().plan.clone(),
        })
        .collect()
}

fn survey(shared: &Shared) -> Vec<SurveyReply> {
    shared
        .drives
        .iter()
        .map(|c| {
            let st = c.lock();
            SurveyReply {
                device: c.label.clone(),
                drives: c.drives.clone(),
                paths: c.roots.clone(),
                state: st.health.state,
                sample: st.last_sample.clone(),
            }
        })
        .collect()
}

/// A path from a request: absolute, no NUL, no `..`, under a configured tree.
/// A request's path, in the text form of `pathtext` (any bytes).
fn check_path(cfg: &Config, p: &str) -> Result<PathBuf, String> {
    let Some(path) = crate::pathtext::parse(p) else {
        return Err(format!("bad path {p:?}: a malformed \\x escape"));
    };
    let shown = crate::pathtext::text(&path);
    if path.as_os_str().as_encoded_bytes().contains(&0) {
        return Err("bad path: contains a NUL byte".into());
    }
    if !path.is_absolute() {
        return Err(format!("bad path \"{shown}\": must be absolute"));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(format!("bad path \"{shown}\": must not contain '..'"));
    }
    if !cfg.paths.iter().any(|t| path.starts_with(&t.path)) {
        return Err(format!("{shown} is not under a configured path"));
    }
    Ok(path)
}

fn now(
    shared: &Shared,
    cfg: &Config,
    drive: Option<&str>,
    path: Option<&str>,
    force: bool,
) -> Result<Vec<NowAccepted>, String> {
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
        out.push(NowAccepted {
            device: c.label.clone(),
            request: st.requests,
        });
        drop(st);
        c.poke();
    }
    Ok(out)
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

fn pause(shared: &Shared, drive: Option<&str>, on: bool) -> Result<Vec<PauseReply>, String> {
    let mut out = vec![];
    for c in cells_for(shared, drive)? {
        c.paused.store(on, Ordering::Relaxed);
        if on {
            // Stops the file in flight after its I/O; it is checkpointed.
            c.cancel.store(true, Ordering::Relaxed);
        }
        c.poke();
        out.push(PauseReply {
            device: c.label.clone(),
            paused: on,
        });
    }
    Ok(out)
}
