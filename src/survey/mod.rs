//! `refreshd survey`: one measuring round per drive, without the daemon —
//! the age-vs-speed table of docs/DESIGN.md for your own drives, the fresh
//! reference, the verdict and the refresh plan.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::drive::{self, Drive};
use crate::inventory::{self, FileRecord, Store};
use crate::policy::{self, Judgement, PlanRules};
use crate::sampler::{self, DriveSample, SampleOptions};

mod report;
mod svg;
mod text;
pub use report::{DriveReport, SurveyOptions};
pub use svg::{render_svg, write_svg};
pub use text::render;

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

/// Per drive label: its drives, the trees on it, their files.
type Group = (Vec<Drive>, Vec<PathBuf>, Vec<FileRecord>);

/// Scans, samples and judges every drive under `opts.paths`.
pub fn run(opts: &SurveyOptions) -> Result<Vec<DriveReport>, SurveyError> {
    let mut groups = trees_by_drive(opts)?;
    let now = inventory::now_secs();
    let ages = with_daemon_record(&opts.state_dir, &mut groups);
    groups
        .into_iter()
        .map(|(device, group)| survey_drive(device, group, &ages, now, opts))
        .collect()
}

/// Scans each tree into memory and groups the trees by the drive(s)
/// under them.
fn trees_by_drive(opts: &SurveyOptions) -> Result<BTreeMap<String, Group>, SurveyError> {
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
    Ok(groups)
}

/// One round on one drive: the sample, its verdict, the forecast and
/// the plan.
fn survey_drive(
    device: String,
    (drives, paths, files): Group,
    ages: &str,
    now: i64,
    opts: &SurveyOptions,
) -> Result<DriveReport, SurveyError> {
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
    let judgement = policy::judge_sample(&sample, opts.thresholds, policy::Fallbacks::default());
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
    // files, whatever the verdict (the daemon refreshes only a degraded
    // drive: the verdict says whether it would).
    let plan = policy::plan(
        &files,
        PlanRules {
            now,
            stale_after: opts.stale_after,
            min_interval: Duration::ZERO,
            budget_left: None,
        },
    );
    Ok(DriveReport {
        device,
        drives,
        paths,
        files: files.len() as u64,
        bytes: files.iter().map(|f| f.size).sum(),
        sample,
        judgement,
        verdict,
        plan,
        ages: ages.to_string(),
        forecast,
    })
}

/// The forecast from one round: its age buckets are the points.
fn one_round_forecast(
    sample: &DriveSample,
    j: &Judgement,
    opts: &SurveyOptions,
) -> Option<policy::forecast::Forecast> {
    let fresh = j.fresh_bps.filter(|_| j.slow.is_none())?;
    let mut history = policy::forecast::History::default();
    history.add(sample, fresh, crate::inventory::now_secs());
    policy::forecast::forecast(&history, sample, j, opts.stale_after, opts.thresholds)
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
