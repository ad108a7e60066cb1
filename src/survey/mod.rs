//! `refreshd survey`: one measuring round per drive, without the daemon —
//! the age-vs-speed table of docs/DESIGN.md for your own drives, the fresh
//! reference, the verdict and the refresh plan.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::drive::{self, Drive};
use crate::inventory::{self, FileRecord, Store};
use crate::policy::{self, Judgement, Plan, PlanRules, Thresholds};
use crate::sampler::{self, DriveSample, SampleOptions};
use crate::units::format_size;

/// Options of `refreshd survey`.
#[derive(Debug, Clone)]
pub struct SurveyOptions {
    pub paths: Vec<PathBuf>,
    pub stale_after: Duration,
    pub sample_bytes: crate::units::ByteSize,
    pub thresholds: Thresholds,
    pub min_free: crate::units::ByteSize,
    pub seed: u64,
    /// Where the daemon keeps its record (last refresh per file): ages
    /// are what the daemon would say when it can be read.
    pub state_dir: PathBuf,
}

/// A survey problem that stops it before anything is measured.
#[derive(Debug, thiserror::Error)]
pub enum SurveyError {
    #[error("{}: {reason}", crate::pathtext::text(path))]
    Path { path: PathBuf, reason: String },
    #[error(transparent)]
    Drive(#[from] drive::DriveError),
    #[error(transparent)]
    Store(#[from] inventory::StoreError),
    #[error("sampling {device}: {source}")]
    Sample {
        device: String,
        source: std::io::Error,
    },
}

/// One drive's result.
#[derive(Debug, Clone, Serialize)]
pub struct DriveReport {
    /// The drive name(s), `+`-joined for multi-device filesystems.
    pub device: String,
    pub drives: Vec<Drive>,
    #[serde(with = "crate::pathtext::json_vec")]
    pub paths: Vec<PathBuf>,
    pub files: u64,
    pub bytes: u64,
    pub sample: DriveSample,
    pub judgement: Judgement,
    /// healthy, degraded or unknown (one round: unconfirmed).
    pub verdict: String,
    pub plan: Plan,
    /// Where the data's ages come from (the daemon's record, or mtimes
    /// only, and why).
    pub ages: String,
    /// When the stale data will read below a floor, from this round's
    /// ages (`None`: fewer than two ages read measurably slower than fresh).
    pub forecast: Option<policy::forecast::Forecast>,
}

/// Per drive label: its drives, the trees on it, their files.
type Group = (Vec<Drive>, Vec<PathBuf>, Vec<FileRecord>);

/// Scans, samples and judges every drive under `opts.paths`.
pub fn run(opts: &SurveyOptions) -> Result<Vec<DriveReport>, SurveyError> {
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut store = Store::memory()?;
    for p in &opts.paths {
        let bad = |reason: String| SurveyError::Path {
            path: p.clone(),
            reason,
        };
        let md = std::fs::symlink_metadata(p).map_err(|e| bad(e.to_string()))?;
        if !md.is_dir() {
            return Err(bad("not a directory (survey takes directory trees)".into()));
        }
        let abs = std::fs::canonicalize(p).map_err(|e| bad(e.to_string()))?;
        let drives = drive::drives_of(&abs)?;
        let device = drives
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join("+");
        let stats = store.scan(&abs)?;
        for problem in &stats.problems {
            tracing::warn!("{problem}");
        }
        let files = store.files(&abs)?;
        let g = groups
            .entry(device)
            .or_insert_with(|| (drives, vec![], vec![]));
        g.1.push(abs);
        g.2.extend(files);
    }
    let now = inventory::now_secs();
    let ages = with_daemon_record(&opts.state_dir, &mut groups);
    let mut out = vec![];
    for (device, (drives, paths, files)) in groups {
        let sopts = SampleOptions {
            budget: opts.sample_bytes,
            stale_after: opts.stale_after,
            canary_dir: paths.first().cloned(),
            canary_reserve: opts.min_free,
            seed: opts.seed,
            now,
        };
        let sample = sampler::sample(&files, &sopts).map_err(|source| SurveyError::Sample {
            device: device.clone(),
            source,
        })?;
        let judgement =
            policy::judge_sample(&sample, opts.thresholds, policy::Fallbacks::default());
        let verdict = match judgement.score {
            None if judgement.slow.is_some() => "slow",
            None if judgement.unjudged.is_some() => "unjudged",
            None => "unknown",
            Some(_) if judgement.below() => "degraded",
            Some(_) => "healthy",
        }
        .to_string();
        let forecast = one_round_forecast(&sample, &judgement, opts);
        // What `refreshd refresh` of these trees would rewrite: the stale
        // files, whatever the verdict (the daemon refreshes only a
        // degraded drive: the verdict says whether it would).
        let plan = policy::plan(
            &files,
            PlanRules {
                now,
                stale_after: opts.stale_after,
                min_interval: Duration::ZERO,
                budget_left: None,
            },
        );
        out.push(DriveReport {
            device,
            drives,
            paths,
            files: files.len() as u64,
            bytes: files.iter().map(|f| f.size).sum(),
            sample,
            judgement,
            verdict,
            plan,
            ages: ages.clone(),
            forecast,
        });
    }
    Ok(out)
}

/// The forecast from one round: its age buckets are the points.
fn one_round_forecast(
    sample: &DriveSample,
    j: &Judgement,
    opts: &SurveyOptions,
) -> Option<policy::forecast::Forecast> {
    let fresh = j.fresh_bps.filter(|_| j.slow.is_none())?;
    let mut history = policy::forecast::History::default();
    history.add(policy::forecast::points_of(sample, fresh));
    policy::forecast::forecast(&history, sample, fresh, opts.stale_after, opts.thresholds)
}

/// Ages the files as the daemon does: their last refresh from its record
/// (read-only), when it can be read. Says where the ages come from.
fn with_daemon_record(state_dir: &Path, groups: &mut BTreeMap<String, Group>) -> String {
    let shown = crate::pathtext::text(state_dir);
    if !state_dir.join("state.db").exists() {
        return format!("by mtime (no daemon record in {shown})");
    }
    let record = match Store::open_read_only(state_dir) {
        Ok(s) => s,
        Err(e) => return format!("by mtime (the daemon's record cannot be read: {e})"),
    };
    let mut found = 0u64;
    for (_, (_, _, files)) in groups.iter_mut() {
        for f in files.iter_mut() {
            if let Ok(Some(t)) = record.last_refresh(f.key()) {
                f.last_refresh = Some(t);
                found += 1;
            }
        }
    }
    format!("by mtime and the daemon's record in {shown} ({found} file(s) refreshed by it)")
}

/// What the fresh figure is, in words.
fn reference_words(r: Option<crate::policy::Reference>) -> &'static str {
    use crate::policy::Reference;
    match r {
        Some(Reference::Canary) => "fresh: this round's canary",
        Some(Reference::Baseline) => "fresh: the drive's recorded baseline",
        Some(Reference::FreshestData) => "fresh: its freshest data, no canary could be written",
        Some(Reference::Expected) => "fresh: expected_throughput",
        None => "no fresh reference",
    }
}

/// The human table.
pub fn render(reports: &[DriveReport], opts: &SurveyOptions) -> String {
    let mut out = String::new();
    for r in reports {
        let ids: Vec<String> = r.drives.iter().map(|d| d.id.clone()).collect();
        let roots: Vec<String> = r.paths.iter().map(|p| crate::pathtext::text(p)).collect();
        let _ = writeln!(
            out,
            "{} ({}; {} files, {} under {})",
            r.device,
            ids.join(", "),
            r.files,
            format_size(r.bytes),
            roots.join(", ")
        );
        crate::protocol::show::sample_table(&mut out, &r.sample);
        let j = &r.judgement;
        let _ = writeln!(
            out,
            "  stale data (>= {}, ages {}): {} files, {}; read {}{}",
            crate::units::HumanDuration(opts.stale_after),
            r.ages,
            r.sample.stale_files,
            format_size(r.sample.stale_bytes),
            j.stale_bps
                .map_or("not measured".into(), |b| format!("{:.1} MB/s", b / 1e6)),
            j.ratio.map_or(String::new(), |x| format!(
                " = {x:.2} x fresh ({})",
                reference_words(j.reference)
            )),
        );
        let why = if let Some(w) = j.slow.as_ref().or(j.unjudged.as_ref()) {
            w.clone()
        } else if j.reasons.is_empty() {
            match j.score {
                None => "no stale data to measure".to_string(),
                Some(_) => format!(
                    "stale data >= {:.0} MB/s and >= {} x fresh",
                    opts.thresholds.min_throughput.0 as f64 / 1e6,
                    opts.thresholds.min_ratio
                ),
            }
        } else {
            j.reasons.join("; ")
        };
        let _ = writeln!(out, "  verdict: {} ({why}; one round)", r.verdict);
        let _ = match &r.forecast {
            Some(f) => writeln!(out, "  forecast: {} ({})", f.words(), f.basis()),
            None => writeln!(
                out,
                "  forecast: none yet (it needs data of two ages reading measurably slower than fresh)"
            ),
        };
        // A slow drive: a rewrite cannot help, so no plan is shown.
        if !r.plan.files.is_empty() && r.verdict != "slow" {
            let _ = writeln!(
                out,
                "  plan: {} files, {}, oldest data {:.0} days{}",
                r.plan.files.len(),
                format_size(r.plan.bytes),
                r.plan.files[0].age_days,
                if r.verdict == "degraded" {
                    ""
                } else {
                    " (what `refreshd refresh` would rewrite; the daemon refreshes a degraded drive)"
                }
            );
        }
        let errors: u64 = r
            .sample
            .buckets
            .iter()
            .map(|b| b.measured.errors)
            .sum::<u64>()
            + r.sample.fresh.as_ref().map_or(0, |f| f.errors);
        let _ = writeln!(
            out,
            "  sampled {} in {:.1} s{}\n",
            format_size(r.sample.bytes_read),
            r.sample.seconds,
            if errors > 0 {
                format!(", {errors} reads FAILED (see dmesg)")
            } else {
                String::new()
            }
        );
    }
    out
}

/// A chart per drive: read throughput (bars) and latency p50 with the
/// p25–p95 range, by data age; the fresh reference as a dashed line.
pub fn render_svg(reports: &[DriveReport]) -> String {
    const W: f64 = 760.0;
    const PANEL_H: f64 = 220.0;
    const DRIVE_H: f64 = 290.0;
    let height = DRIVE_H * reports.len().max(1) as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" font-family="sans-serif" font-size="11">"##
    );
    let _ = writeln!(s, r##"<rect width="100%" height="100%" fill="white"/>"##);
    for (k, r) in reports.iter().enumerate() {
        let top = k as f64 * DRIVE_H + 20.0;
        let _ = writeln!(
            s,
            r##"<text x="10" y="{top}" font-size="14" font-weight="bold">{} — {}</text>"##,
            xml(&r.device),
            xml(&r.verdict)
        );
        let buckets: Vec<&sampler::BucketSample> = r.sample.buckets.iter().collect();
        let n = buckets.len().max(1) as f64;
        let fresh_bps = r.sample.fresh.as_ref().and_then(|f| f.median_bps());
        let fresh_lat = r
            .sample
            .fresh
            .as_ref()
            .and_then(|f| f.latency_ms)
            .map(|p| p.p50);
        for (panel, title) in [
            (0, "read MB/s by data age (months)"),
            (1, "4 KiB read latency ms (p50, p25–p95)"),
        ] {
            let x0 = 50.0 + panel as f64 * (W / 2.0);
            let pw = W / 2.0 - 70.0;
            let y0 = top + 20.0;
            let y1 = y0 + PANEL_H - 40.0;
            let _ = writeln!(
                s,
                r##"<text x="{x0}" y="{}" fill="#333">{title}</text>"##,
                y0 - 4.0
            );
            let _ = writeln!(
                s,
                r##"<path d="M{x0} {y0} V{y1} H{}" stroke="#555" fill="none"/>"##,
                x0 + pw
            );
            let values: Vec<Option<(f64, f64, f64)>> = buckets
                .iter()
                .map(|b| {
                    if panel == 0 {
                        b.measured.median_bps().map(|v| (v / 1e6, v / 1e6, v / 1e6))
                    } else {
                        b.measured.latency_ms.map(|p| (p.p25, p.p50, p.p95))
                    }
                })
                .collect();
            let reference = if panel == 0 {
                fresh_bps.map(|b| b / 1e6)
            } else {
                fresh_lat
            };
            let max = values
                .iter()
                .flatten()
                .map(|v| v.2)
                .chain(reference)
                .fold(1e-9, f64::max)
                * 1.1;
            let y = |v: f64| y1 - (v / max) * (y1 - y0);
            let _ = writeln!(
                s,
                r##"<text x="{}" y="{}" text-anchor="end">{:.1}</text>"##,
                x0 - 4.0,
                y0 + 4.0,
                max
            );
            let _ = writeln!(
                s,
                r##"<text x="{}" y="{}" text-anchor="end">0</text>"##,
                x0 - 4.0,
                y1
            );
            let slot = pw / n;
            for (i, (b, v)) in buckets.iter().zip(&values).enumerate() {
                let cx = x0 + slot * (i as f64 + 0.5);
                let color = if b.stale { "#d9534f" } else { "#5cb85c" };
                if let Some((lo, mid, hi)) = *v {
                    if panel == 0 {
                        let _ = writeln!(
                            s,
                            r##"<rect x="{}" y="{}" width="{}" height="{}" fill="{color}"/>"##,
                            cx - slot * 0.35,
                            y(mid),
                            slot * 0.7,
                            y1 - y(mid)
                        );
                    } else {
                        let _ = writeln!(
                            s,
                            r##"<path d="M{cx} {} V{}" stroke="{color}" stroke-width="2"/><circle cx="{cx}" cy="{}" r="4" fill="{color}"/>"##,
                            y(lo),
                            y(hi),
                            y(mid)
                        );
                    }
                }
                let _ = writeln!(
                    s,
                    r##"<text x="{cx}" y="{}" text-anchor="middle">{}</text>"##,
                    y1 + 14.0,
                    xml(&b.label)
                );
            }
            if let Some(rv) = reference {
                let _ = writeln!(
                    s,
                    r##"<path d="M{x0} {} H{}" stroke="#337ab7" stroke-dasharray="5,4"/><text x="{}" y="{}" fill="#337ab7" text-anchor="end">fresh {:.1}</text>"##,
                    y(rv),
                    x0 + pw,
                    x0 + pw,
                    y(rv) - 3.0,
                    rv
                );
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Writes the chart to `path`.
pub fn write_svg(path: &Path, reports: &[DriveReport]) -> std::io::Result<()> {
    std::fs::write(path, render_svg(reports))
}
