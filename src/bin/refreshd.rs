//! `refreshd`: the daemon and its one-shot subcommands. Thin: parse, run,
//! map the result to an exit code (0 ok, 1 a file failed, 2 usage/config).

use std::process::ExitCode;

use clap::Parser;
use refreshd::cli::{Cli, Command, SurveyArgs};
use refreshd::engine::PaceSettings;
use refreshd::oneshot::{self, RefreshOptions};

/// Every problem of the file and of its trees on this machine, in one
/// pass; exit 1 if there is any.
fn check_config(path: &std::path::Path) -> i32 {
    let (cfg, mut problems) = refreshd::config::load_partial(path);
    if let Some(c) = &cfg {
        let syntax_or_keys = problems.len();
        problems.extend(refreshd::daemon::placement::check(c));
        problems[syntax_or_keys..].sort_by_key(|q| q.at);
    }
    for p in &problems {
        eprintln!("{p}");
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!(
            "note: not run as root: whether the daemon (root) can write state_dir was not checked"
        );
    }
    match cfg {
        Some(c) if problems.is_empty() => check_config_ok(path, &c),
        _ => 1,
    }
}

/// What `check-config` says of a good config.
fn check_config_ok(path: &std::path::Path, c: &refreshd::config::Config) -> i32 {
    println!(
        "{}: ok ({} path(s), state in {})",
        path.display(),
        c.paths.len(),
        c.state_dir.display()
    );
    if let Some(k) = &c.coordination {
        println!(
            "fleet: group {} as {:?}, at most {} at once, etcd reachable",
            k.group, k.name, k.max_concurrent
        );
    }
    0
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The daemon logs what it does at `info` by default (start, state
    // changes, each file's outcome: one escaped line each, for the
    // journal); the one-shot commands print their own lines and log only
    // warnings unless asked.
    let base: i8 = if matches!(cli.command, Command::Run { .. }) {
        1
    } else {
        0
    };
    refreshd::init_logging(if cli.quiet {
        -1
    } else {
        base + cli.verbose as i8
    });
    if matches!(
        cli.command,
        Command::Run { .. } | Command::Refresh(_) | Command::Survey(_)
    ) {
        // Before any thread starts: which way names are resolved here (a
        // seccomp filter may refuse openat2), said once in the log.
        refreshd::io::resolve::probe();
    }
    let code = match cli.command {
        Command::Survey(a) => survey(a),
        Command::Run { config } => match refreshd::daemon::run_file(&config) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("refreshd run: {e:#}");
                2
            }
        },
        Command::CheckConfig { config } => check_config(&config),
        Command::Refresh(a) => {
            let opts = RefreshOptions {
                paths: a.paths,
                strategy: a.strategy,
                dry_run: a.dry_run,
                json: a.json,
                verify: a.verify,
                chunk: a.chunk.0,
                depth: a.queue_depth,
                backend: a.io_backend,
                include_shared: a.include_shared,
                min_free: a.min_free,
                progress: !a.no_progress,
                relocate_chunk: a.relocate_chunk.0,
                state_dir: a.state_dir,
                stale_after: a.stale_after.map(|d| d.0),
                pace: PaceSettings {
                    rate: a.rate,
                    mode: a.yield_mode,
                    priority: a.io_priority,
                    floor: a.yield_floor,
                },
            };
            let cancel = oneshot::install_cancel_handler();
            match oneshot::run(&opts, cancel) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("refreshd refresh: {:#}", anyhow::Error::from(e));
                    2
                }
            }
        }
    };
    ExitCode::from(code as u8)
}

fn survey(a: SurveyArgs) -> i32 {
    use refreshd::survey;
    if !(0.0..=1.0).contains(&a.min_ratio) {
        eprintln!("refreshd survey: --min-ratio must be between 0 and 1");
        return 2;
    }
    let opts = survey::SurveyOptions {
        paths: a.paths,
        stale_after: a.stale_after.0,
        sample_bytes: a.sample_bytes,
        thresholds: refreshd::policy::Thresholds {
            min_throughput: a.min_throughput,
            min_ratio: a.min_ratio,
        },
        min_free: a.min_free,
        seed: a.seed,
        state_dir: a
            .state_dir
            .unwrap_or_else(|| refreshd::config::DEFAULT_STATE_DIR.into()),
    };
    let reports = match survey::run(&opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("refreshd survey: {:#}", anyhow::Error::from(e));
            return 2;
        }
    };
    if a.json {
        let doc = serde_json::json!({ "drives": reports });
        println!("{doc}");
    } else {
        print!("{}", survey::render(&reports, &opts));
    }
    if let Some(path) = a.svg {
        if let Err(e) = survey::write_svg(&path, &reports) {
            eprintln!("refreshd survey: writing {}: {e}", path.display());
            return 1;
        }
    }
    0
}
