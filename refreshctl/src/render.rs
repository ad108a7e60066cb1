//! The daemon's answers as tables: status (a row per drive, notes under
//! it), the fleet, drives, plans, samples and what `now --wait` did.

use refreshd_protocol::health::HealthState;
use refreshd_protocol::replies::{
    CoordinationReply, DriveEntry, DriveStatusReply, NowAccepted, PlanReply, SampleRecord,
    SlotReply, StatusReply, SurveyReply,
};
use refreshd_protocol::state::{SlotState, Waiting};
use refreshd_protocol::units::format_size;

fn mbps(b: Option<f64>) -> String {
    b.map_or("-".into(), |b| format!("{:.0} MB/s", b / 1e6))
}

fn ago(t: Option<i64>) -> String {
    let Some(t) = t else {
        return "never".into();
    };
    let d = now_secs() - t;
    match d {
        i64::MIN..=59 => format!("{}s ago", d.max(0)),
        60..=3599 => format!("{}m ago", d / 60),
        3600..=86_399 => format!("{}h ago", d / 3600),
        _ => format!("{}d ago", d / 86_400),
    }
}

fn eta(s: Option<f64>) -> String {
    s.map_or("estimating".into(), |s| {
        let s = s as u64;
        if s >= 3600 {
            format!("{}h{:02}m", s / 3600, s % 3600 / 60)
        } else {
            format!("{}m{:02}s", s / 60, s % 60)
        }
    })
}

/// `status` as a table; columns as wide as their widest cell.
pub fn render_status(v: &StatusReply) -> String {
    let mut rows = vec![[
        "DEVICE".to_string(),
        "STATE".into(),
        "STALE".into(),
        "LAST SAMPLE (stale data)".into(),
        "REFRESH".into(),
    ]];
    rows.extend(v.drives.iter().map(status_row));
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
    let w: Vec<usize> = (0..4).map(width).collect();
    let mut out = String::new();
    for r in &rows {
        out.push_str(&format!(
            "{:<w0$}  {:<w1$}  {:>w2$}  {:<w3$}  {}\n",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3]
        ));
    }
    let pad = " ".repeat(w[0] + 2);
    for d in &v.drives {
        drive_notes(&mut out, d, &pad);
    }
    for u in &v.unwatched {
        out.push_str(&format!("not watched: {}\n", u.reason));
    }
    if let Some(c) = &v.coordination {
        out.push_str(&render_fleet(c));
    }
    if v.drives.is_empty() {
        out.push_str("no configured tree can be watched: nothing is refreshed\n");
    }
    out
}

/// One drive's row: device, state, stale bytes, last sample, refresh.
fn status_row(d: &DriveStatusReply) -> [String; 5] {
    let mut state = d.state.name().to_string();
    if let Some(w) = d.waiting {
        state.push_str(&format!(" ({})", w.word()));
    } else if d.paused {
        state.push_str(" (paused)");
    }
    let sample = match &d.last_sample {
        Some(s) if s.stale_bps.is_none() => format!("no stale data ({})", ago(Some(s.at))),
        Some(s) => format!(
            "{}{} ({})",
            mbps(s.stale_bps),
            s.ratio
                .map_or(String::new(), |r| format!(" = {r:.2}x fresh")),
            ago(Some(s.at))
        ),
        None => "not yet".into(),
    };
    [
        d.device.clone(),
        state,
        format_size(d.stale_bytes),
        sample,
        refresh_cell(d),
    ]
}

/// The refresh column: progress, a round that stopped part way, or idle.
fn refresh_cell(d: &DriveStatusReply) -> String {
    match &d.refresh {
        Some(p) => format!(
            "{}/{} files, {} of {}, ETA {}",
            p.files_done,
            p.files_total,
            format_size(p.bytes_done),
            format_size(p.bytes_total),
            eta(p.eta_seconds)
        ),
        None => match d.last_round.as_ref().filter(|r| !r.finished) {
            // A round that stopped part way (paused, window, slot…).
            Some(r) => format!(
                "stopped ({}) after {}/{} files, {} of {}",
                r.stopped.as_deref().unwrap_or("?"),
                r.refreshed + r.skipped + r.failed,
                r.planned,
                format_size(r.bytes),
                format_size(r.planned_bytes)
            ),
            None => format!("idle, last {}", ago(d.last_refresh)),
        },
    }
}

/// The lines under the table about one drive: why it waits, errors, its
/// fleet slot, a round that did not do all it planned, yielding, a slow
/// or unjudged drive, the forecast.
fn drive_notes(out: &mut String, d: &DriveStatusReply, pad: &str) {
    let mut note = |what: String| out.push_str(&format!("{pad}{}: {what}\n", d.device));
    if let Some(w) = d.waiting {
        note(w.sentence().to_string());
    }
    if let Some(e) = &d.error {
        note(format!("note: {e}"));
    }
    if let Some(slot) = &d.slot {
        note(slot_line(slot));
    }
    // A last round that did not do all it planned says so, as does one
    // that rewrote nothing (its counts say why: skipped, in use, …).
    let rewrote_nothing = d.waiting == Some(Waiting::NothingLeft);
    if let Some(r) = d.last_round.as_ref().filter(|r| {
        d.refresh.is_none() && (!r.finished || r.failed + r.interrupted > 0 || rewrote_nothing)
    }) {
        let end = match (&r.stopped, r.finished) {
            (Some(why), false) => format!(", stopped ({why})"),
            _ => String::new(),
        };
        note(format!(
            "last round ({}): {} of {} planned file(s) done: {}, {}{end}",
            ago(Some(r.ended)),
            r.refreshed + r.skipped + r.failed,
            r.planned,
            r.counts(),
            format_size(r.bytes)
        ));
        for f in &r.failures {
            note(format!("  failed {}: {}", f.path, f.reason));
        }
    }
    if let Some(y) = &d.yielding {
        note(format!(
            "yielding since {}: {}",
            ago(Some(y.since)),
            y.reason
        ));
    }
    if let Some(s) = &d.last_sample {
        if let Some(why) = &s.slow {
            note(format!("slow: {why}"));
            for f in &d.diagnosis {
                note(format!("  {f}"));
            }
        }
        if let Some(why) = &s.unjudged {
            note(format!("cannot judge: {why}"));
        }
        // The drive's future: worth a line while it is not degraded.
        if let Some(f) = s.forecast.filter(|_| {
            !matches!(
                d.state,
                HealthState::Degraded | HealthState::Slow | HealthState::NotRecovering
            )
        }) {
            note(format!("forecast: {} ({})", f.words(), f.basis()));
        }
    }
}

/// A drive's fleet slot, in one line.
pub(crate) fn slot_line(s: &SlotReply) -> String {
    let waited = eta(Some(s.waited_seconds.max(0.0)));
    match s.state {
        SlotState::Held => format!("fleet slot held since {}", ago(s.held_since)),
        SlotState::Waiting => format!(
            "waiting for a fleet slot for {waited}, {} ahead",
            s.ahead.unwrap_or(0)
        ),
        _ => format!(
            "no fleet slot for {waited}: {}",
            s.reason.as_deref().unwrap_or("etcd cannot be reached")
        ),
    }
}

/// The fleet groups: who holds their slots, whether etcd is reachable.
pub fn render_fleet(c: &CoordinationReply) -> String {
    let mut out = format!(
        "fleet: this daemon is {:?}, at most {} drive(s) of a group at once: {}\n",
        c.name,
        c.max_concurrent,
        if c.connected {
            "connected"
        } else {
            "NOT connected"
        }
    );
    if let Some(e) = &c.error {
        out.push_str(&format!("  {e}\n"));
    }
    for g in &c.groups {
        if let Some(e) = &g.error {
            out.push_str(&format!("  group {}: {e}\n", g.group));
        } else if c.connected {
            let holders: Vec<String> = g
                .holders
                .iter()
                .map(|h| format!("{}/{} (queued {})", h.name, h.device, ago(Some(h.since))))
                .collect();
            out.push_str(&format!(
                "  group {}: slots held by: {}; {} waiting\n",
                g.group,
                if holders.is_empty() {
                    "nobody".to_string()
                } else {
                    holders.join(", ")
                },
                g.waiting
            ));
        }
    }
    if let Some(h) = &c.health {
        out.push_str(&format!("  health gate says no: {h}\n"));
    }
    out
}

/// `drives` as a list.
pub fn render_drives(v: &[DriveEntry]) -> String {
    let mut out = String::new();
    for d in v {
        let paths: Vec<String> = d
            .paths
            .iter()
            .map(|p| refreshd_protocol::pathtext::text(p))
            .collect();
        if let Some(why) = &d.error {
            out.push_str(&format!("not watched: {}\n  {why}\n", paths.join(", ")));
            continue;
        }
        let members: Vec<String> = d
            .drives
            .iter()
            .map(|m| {
                format!(
                    "{} ({}{})",
                    m.name,
                    m.model
                        .as_deref()
                        .map_or(String::new(), |s| format!("{s}, ")),
                    m.id
                )
            })
            .collect();
        out.push_str(&format!(
            "{}: {}\n  paths: {}\n",
            d.device,
            members.join(", "),
            paths.join(", ")
        ));
        if let Some(c) = &d.controller {
            out.push_str(&format!("  controller: {c}\n"));
        }
        if let Some(g) = &d.group {
            out.push_str(&format!("  fleet group: {g}\n"));
        }
    }
    out
}

/// `plan` as a table.
pub fn render_plan(v: &[PlanReply]) -> String {
    let mut out = String::new();
    for d in v {
        let p = &d.plan;
        out.push_str(&format!(
            "{}: {} files, {} (skipped as recently refreshed: {}, left for the daily budget: {})\n",
            d.device,
            p.files.len(),
            format_size(p.bytes),
            p.skipped_recent,
            p.deferred_budget
        ));
        for f in p.files.iter().take(20) {
            out.push_str(&format!(
                "  {:>10}  {:>6.0} days  {}\n",
                format_size(f.size),
                f.age_days,
                refreshd_protocol::pathtext::text(&f.path)
            ));
        }
        if p.files.len() > 20 {
            out.push_str(&format!(
                "  … and {} more (--json for all)\n",
                p.files.len() - 20
            ));
        }
    }
    out
}

fn render_sample(out: &mut String, s: &SampleRecord) {
    refreshd_protocol::show::sample_table(out, &s.sample);
    let j = &s.judgement;
    out.push_str(&format!(
        "  sampled {}: stale {}{}{}\n\n",
        ago(Some(s.at)),
        mbps(j.stale_bps),
        j.ratio
            .map_or(String::new(), |r| format!(" = {r:.2}x fresh")),
        if j.reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", j.reasons.join("; "))
        }
    ));
}

/// `survey`: the latest sample per drive, as `refreshd survey` shows it.
pub fn render_survey(v: &[SurveyReply]) -> String {
    let mut out = String::new();
    for d in v {
        out.push_str(&format!("{} ({})\n", d.device, d.state.name()));
        match &d.sample {
            Some(s) => render_sample(&mut out, s),
            None => out.push_str("  not sampled yet\n\n"),
        }
    }
    out
}

/// After `now --wait`: what each request did, then the status table.
pub fn render_now_done(requested: &[NowAccepted], st: &StatusReply) -> String {
    let mut out = String::new();
    for r in requested {
        let d = st.drives.iter().find(|d| d.device == r.device);
        if let Some(what) = d.and_then(|d| d.last_request.as_deref()) {
            out.push_str(&format!("{}: {what}\n", r.device));
        }
    }
    out.push_str(&render_status(st));
    out
}

/// Whether a file failed in the rounds the answered requests ran.
pub fn requests_failed(requested: &[NowAccepted], st: &StatusReply) -> bool {
    requested.iter().any(|r| {
        st.drives
            .iter()
            .find(|d| d.device == r.device)
            .and_then(|d| d.last_request_round.as_ref())
            .is_some_and(|sm| sm.failed > 0)
    })
}

/// Seconds since the epoch, now.
fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
