//! `refreshd refresh`: the one-shot, safe replacement for
//! `dd if=f of=f conv=notrunc`. One line (or JSON object) per file, then a
//! summary; exit 0 when nothing failed, 1 when a file failed, 2 for usage.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::engine::safety::journal::{self, Journal, RecoveryOutcome};
use crate::engine::{BackendChoice, Engine, EngineConfig, FileReport, Outcome};
use crate::units::format_size;
use crate::walk;

pub use crate::config::Strategy;

/// Options of `refreshd refresh`.
#[derive(Debug, Clone)]
pub struct RefreshOptions {
    pub paths: Vec<PathBuf>,
    pub strategy: Strategy,
    pub dry_run: bool,
    pub json: bool,
    pub verify: bool,
    pub chunk: u64,
    pub depth: usize,
    pub backend: BackendChoice,
    pub include_shared: bool,
    pub min_free: Option<crate::units::ByteSize>,
    /// Show a progress bar (when stderr is a terminal).
    pub progress: bool,
    /// Largest relocation unit.
    pub relocate_chunk: u64,
    /// The crash-recovery journal's state directory (`None`: the daemon's
    /// default, when writable).
    pub state_dir: Option<PathBuf>,
    /// The rate, yielding to other I/O on the drive, request priorities.
    pub pace: crate::engine::PaceSettings,
    /// Leave files found in directories alone when their data is younger
    /// (`None`: every file).
    pub stale_after: Option<std::time::Duration>,
}

mod age;

pub use crate::config::DEFAULT_STATE_DIR;

/// Errors that stop the command before any file is touched.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error(transparent)]
    Path(#[from] walk::PathError),
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    #[error("--state-dir {path}: cannot keep the recovery journal there: {source}")]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Opens the recovery journal and puts back what a killed run moved. With
/// no `--state-dir` and the default unusable (not root, read-only), runs
/// without one and says so.
fn journal_for(opts: &RefreshOptions) -> Result<Option<Arc<Journal>>, UsageError> {
    if opts.dry_run {
        return Ok(None);
    }
    let journal = match &opts.state_dir {
        Some(dir) => Journal::open(dir).map_err(|source| UsageError::StateDir {
            path: dir.clone(),
            source,
        })?,
        None => match Journal::open(std::path::Path::new(DEFAULT_STATE_DIR)) {
            Ok(j) => j,
            Err(e) => {
                eprintln!(
                    "warning: no recovery journal ({DEFAULT_STATE_DIR}: {e}; choose one with \
                     --state-dir): if this run is killed, the mtime of the file it is writing \
                     stays moved"
                );
                return Ok(None);
            }
        },
    };
    match journal::recover(&journal) {
        Ok(done) => {
            for r in done {
                let what = match &r.outcome {
                    RecoveryOutcome::Restored => {
                        "put back the atime and mtime an interrupted run had moved".to_string()
                    }
                    RecoveryOutcome::Left(why) => {
                        format!("interrupted run: mtime left as it is ({why})")
                    }
                    RecoveryOutcome::Deferred(why) => {
                        format!("interrupted run: recovery deferred ({why})")
                    }
                };
                eprintln!("recovery: {}: {what}", crate::pathtext::text(&r.path));
            }
        }
        Err(e) => eprintln!("warning: reading the recovery journal: {e}"),
    }
    Ok(Some(Arc::new(journal)))
}

/// Totals over a run.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Summary {
    pub files: u64,
    pub refreshed: u64,
    pub would_refresh: u64,
    pub skipped: u64,
    pub interrupted: u64,
    pub failed: u64,
    pub bytes_refreshed: u64,
    pub bytes_planned: u64,
    pub read_errors: u64,
    pub elapsed_s: f64,
    pub bytes_per_second: f64,
    pub backend: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_note: Option<String>,
    /// Time spent yielding to other processes' I/O (`--yield auto`).
    pub yielded_seconds: f64,
    /// Files found in directories left alone as younger than
    /// `--stale-after`.
    pub younger: u64,
}

impl Summary {
    fn add(&mut self, r: &FileReport) {
        self.files += 1;
        self.bytes_refreshed += r.bytes_refreshed;
        self.bytes_planned += r.bytes_planned;
        self.read_errors += r.read_errors.len() as u64;
        match r.outcome {
            Outcome::Refreshed => self.refreshed += 1,
            Outcome::WouldRefresh => self.would_refresh += 1,
            Outcome::Skipped { .. } => self.skipped += 1,
            Outcome::Interrupted { .. } => self.interrupted += 1,
            Outcome::Failed { .. } => self.failed += 1,
        }
    }

    pub fn human(&self) -> String {
        let mut parts = vec![format!("{} refreshed", self.refreshed)];
        if self.would_refresh > 0 {
            parts = vec![format!(
                "{} would be refreshed ({})",
                self.would_refresh,
                format_size(self.bytes_planned)
            )];
        }
        for (n, what) in [
            (self.skipped, "skipped"),
            (self.interrupted, "interrupted"),
            (self.failed, "failed"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        let mut line = format!(
            "{} file(s): {}; {} in {:.2} s ({}/s) via {}",
            self.files,
            parts.join(", "),
            format_size(self.bytes_refreshed),
            self.elapsed_s,
            format_size(self.bytes_per_second as u64),
            self.backend
        );
        if self.younger > 0 {
            line.push_str(&format!(
                "; {} younger file(s) left alone (--stale-after)",
                self.younger
            ));
        }
        if self.yielded_seconds >= 0.05 {
            line.push_str(&format!(
                "; yielded to other I/O for {:.1} s",
                self.yielded_seconds
            ));
        }
        line
    }
}

/// Runs the command; returns the exit code (0 or 1) or a usage error (2).
pub fn run(opts: &RefreshOptions, cancel: Arc<AtomicBool>) -> Result<i32, UsageError> {
    let mut walked = walk::walk(&opts.paths)?;
    let younger = drop_young(opts, &mut walked.targets);
    let pace_status = Arc::new(crate::engine::pacing::pace::PaceStatus::default());
    let engine = Engine::start(engine_config(opts, &cancel, pace_status.clone())?)?;
    let start = Instant::now();
    let mut summary = Summary {
        younger,
        backend: engine.backend().name(),
        backend_note: engine.fallback_reason().map(str::to_string),
        ..Summary::default()
    };
    let total: u64 = walked.targets.iter().map(|f| f.size).sum();
    let bar = progress_bar(opts, total);
    let mut stdout = std::io::stdout().lock();
    let mut emit = |r: &FileReport, summary: &mut Summary| {
        summary.add(r);
        let line = if opts.json {
            serde_json::to_string(r).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        } else {
            r.human_line()
        };
        match &bar {
            Some(pb) => pb.suspend(|| {
                let _ = writeln!(stdout, "{line}");
            }),
            None => {
                let _ = writeln!(stdout, "{line}");
            }
        }
    };
    for r in &walked.reports {
        emit(r, &mut summary);
    }
    for walk::Found { target, size, .. } in walked.targets {
        if cancel.load(Ordering::Relaxed) {
            break;
        }
        if let Some(pb) = &bar {
            pb.set_message(crate::pathtext::text(&target.display));
        }
        let progress = bar
            .clone()
            .map(|pb| Box::new(move |n: u64| pb.inc(n)) as crate::engine::Progress);
        let before = bar.as_ref().map(|pb| pb.position());
        let report = engine.refresh(target, progress);
        if let (Some(pb), Some(before)) = (&bar, before) {
            // Skipped bytes count as handled for the bar.
            pb.set_position(before + size.max(report.bytes_refreshed));
        }
        emit(&report, &mut summary);
    }
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    summary.elapsed_s = start.elapsed().as_secs_f64();
    summary.yielded_seconds = pace_status.yielded().as_secs_f64();
    summary.bytes_per_second = if summary.elapsed_s > 0.0 {
        summary.bytes_refreshed as f64 / summary.elapsed_s
    } else {
        0.0
    };
    print_summary(&mut stdout, &summary, opts.json);
    let cancelled = cancel.load(Ordering::Relaxed);
    Ok(if summary.failed > 0 || cancelled {
        1
    } else {
        0
    })
}

/// With `--stale-after`: drops the files not due yet (by mtime and the
/// daemon's record), returning how many.
fn drop_young(opts: &RefreshOptions, targets: &mut Vec<walk::Found>) -> u64 {
    let Some(d) = opts.stale_after else {
        return 0;
    };
    let state = opts
        .state_dir
        .clone()
        .unwrap_or_else(|| DEFAULT_STATE_DIR.into());
    let filter = age::AgeFilter::new(d, &state);
    if let Some(note) = &filter.note {
        eprintln!("note: {note}");
    }
    let before = targets.len();
    targets.retain(|f| filter.due(f));
    (before - targets.len()) as u64
}

fn engine_config(
    opts: &RefreshOptions,
    cancel: &Arc<AtomicBool>,
    pace_status: Arc<crate::engine::pacing::pace::PaceStatus>,
) -> Result<EngineConfig, UsageError> {
    Ok(EngineConfig {
        chunk: opts.chunk,
        depth: opts.depth,
        backend: opts.backend,
        verify: opts.verify,
        dry_run: opts.dry_run,
        rewrite_shared: opts.include_shared,
        min_free: opts.min_free,
        cancel: cancel.clone(),
        strategy: opts.strategy,
        relocate_chunk: opts.relocate_chunk,
        journal: journal_for(opts)?,
        pace: opts.pace,
        pace_status,
        unsafe_switches: Default::default(),
    })
}

/// A progress bar on a terminal (none for `--dry-run`, `--no-progress`
/// or when stderr is not one).
fn progress_bar(opts: &RefreshOptions, total: u64) -> Option<ProgressBar> {
    if !(opts.progress && std::io::stderr().is_terminal() && !opts.dry_run) {
        return None;
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(
            "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {wide_msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    Some(pb)
}

fn print_summary(out: &mut impl Write, summary: &Summary, json: bool) {
    if json {
        let _ = writeln!(out, "{}", serde_json::json!({ "summary": summary }));
    } else {
        let _ = writeln!(out, "{}", summary.human());
        if let Some(note) = &summary.backend_note {
            let _ = writeln!(out, "note: {note}");
        }
    }
}

static CANCEL: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    if let Some(c) = CANCEL.get() {
        c.store(true, Ordering::SeqCst);
    }
}

/// The first SIGINT/SIGTERM asks the engine to stop after in-flight I/O
/// (timestamps restored, lease released); a second one kills at once.
pub fn install_cancel_handler() -> Arc<AtomicBool> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let flag = CANCEL
        .get_or_init(|| Arc::new(AtomicBool::new(false)))
        .clone();
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESETHAND,
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only performs an atomic store.
        if let Err(e) = unsafe { sigaction(sig, &action) } {
            tracing::warn!("installing the {sig} handler: {e}");
        }
    }
    flag
}
