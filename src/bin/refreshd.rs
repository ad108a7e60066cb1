//! `refreshd`: the daemon and its one-shot subcommands. Thin: parse, run,
//! map the result to an exit code (0 ok, 1 a file failed, 2 usage/config).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use refreshd::config::{IoPriority, Settings, YieldMode};
use refreshd::engine::types::DEFAULT_RELOCATE_CHUNK;
use refreshd::engine::{BackendChoice, PaceSettings, DEFAULT_CHUNK, DEFAULT_DEPTH};
use refreshd::oneshot::{self, RefreshOptions, Strategy};
use refreshd::units::{ByteSize, HumanDuration, Rate};

/// The command line's defaults are the config's (one table).
static DEFAULTS: std::sync::LazyLock<Settings> = std::sync::LazyLock::new(Settings::default);

#[derive(Parser, Debug)]
#[command(
    name = "refreshd",
    version,
    about = "Keeps data on drift-prone SSDs fast by rewriting stale files in place, safely"
)]
struct Cli {
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Less log output.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Rewrite files (or directory trees, one filesystem) in place, safely:
    /// the same bytes, O_DIRECT, throttled, under an exclusive lease.
    Refresh(RefreshArgs),
    /// Measure read speed and latency by data age, per drive, against a
    /// fresh reference; say whether each drive is degraded and what a
    /// refresh would rewrite. Reads only (plus a small temporary canary).
    Survey(SurveyArgs),
    /// Run the daemon in the foreground (systemd: Type=notify).
    Run {
        /// Configuration file.
        #[arg(long, value_name = "PATH", default_value = refreshd::config::DEFAULT_PATH)]
        config: PathBuf,
    },
    /// Validate a configuration: every problem with file:line:col; exit 0/1.
    CheckConfig {
        /// Configuration file.
        #[arg(long, value_name = "PATH", default_value = refreshd::config::DEFAULT_PATH)]
        config: PathBuf,
    },
    /// Write man pages and shell completions into DIR (packaging).
    #[command(name = "__assets", hide = true)]
    Assets { dir: PathBuf },
}

#[derive(clap::Args, Debug)]
struct SurveyArgs {
    /// Directory trees (one filesystem each, symlinks never followed).
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// One JSON document instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write a chart of speed and latency by data age (SVG).
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Data older than this is stale.
    #[arg(long, value_name = "DURATION", default_value_t = HumanDuration(DEFAULTS.stale_after))]
    stale_after: HumanDuration,
    /// Read budget per drive.
    #[arg(long, value_name = "SIZE", default_value_t = DEFAULTS.sample_bytes)]
    sample_bytes: ByteSize,
    /// Stale-data read floor.
    #[arg(long, value_name = "BYTES/s", default_value_t = DEFAULTS.min_throughput)]
    min_throughput: Rate,
    /// Stale/fresh throughput ratio floor.
    #[arg(long, value_name = "RATIO", default_value_t = DEFAULTS.min_ratio)]
    min_ratio: f64,
    /// Free space that must remain after writing the canary.
    #[arg(long, value_name = "SIZE", default_value_t = DEFAULTS.min_free)]
    min_free: ByteSize,
    /// Seed for choosing what to read (same seed, same choices).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(clap::Args, Debug)]
struct RefreshArgs {
    /// Files or directories (recursive, one filesystem, symlinks never followed).
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Throttle, e.g. "50MiB/s" (default: unthrottled).
    #[arg(long, value_name = "BYTES/s")]
    rate: Option<Rate>,
    /// auto: in place under an exclusive lease, kernel relocation for files
    /// other processes have open; inplace: in place only (files in use are
    /// skipped); relocate: relocation only.
    #[arg(long, value_enum, default_value_t = DEFAULTS.strategy)]
    strategy: Strategy,
    /// Check and plan every file, write nothing.
    #[arg(long)]
    dry_run: bool,
    /// One JSON object per file, then a summary object.
    #[arg(long)]
    json: bool,
    /// Read every written chunk back and compare checksums.
    #[arg(long)]
    verify: bool,
    /// Largest I/O size (a power of two, at least 4KiB).
    #[arg(long, value_name = "SIZE", default_value_t = ByteSize(DEFAULT_CHUNK))]
    chunk: ByteSize,
    /// Chunks in flight.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_DEPTH)]
    queue_depth: usize,
    /// I/O backend.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    io_backend: BackendChoice,
    /// Also rewrite shared (reflinked/snapshotted) extents; this unshares
    /// them and costs space.
    #[arg(long)]
    include_shared: bool,
    /// Free space to keep on copy-on-write filesystems (default 5% of the filesystem).
    #[arg(long, value_name = "SIZE")]
    min_free: Option<ByteSize>,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Largest unit the kernel relocates at once (the free space it needs).
    #[arg(long, value_name = "SIZE", default_value_t = ByteSize(DEFAULT_RELOCATE_CHUNK))]
    relocate_chunk: ByteSize,
    /// Where the crash-recovery journal lives (default: the daemon's
    /// /var/lib/refreshd when it is writable; without one, a killed run
    /// leaves the mtime of the file it was writing moved).
    #[arg(long, value_name = "DIR", env = "REFRESHD_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// auto: while other processes use the drive, one small request at a
    /// time at the --yield-floor rate, back to --rate when the drive is
    /// quiet; off: always --rate and --queue-depth.
    #[arg(long = "yield", value_enum, default_value_t = DEFAULTS.yield_mode)]
    yield_mode: YieldMode,
    /// The rate never drops below this while yielding.
    #[arg(long, value_name = "BYTES/s", default_value_t = DEFAULTS.yield_floor)]
    yield_floor: Rate,
    /// idle: reads in the idle I/O class and writes at best-effort 7, per
    /// request; inherit: the process's own priority (ionice).
    #[arg(long, value_enum, default_value_t = DEFAULTS.io_priority)]
    io_priority: IoPriority,
}

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
        Command::Assets { dir } => match refreshd::assets::write(Cli::command(), &dir) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("refreshd __assets {}: {e}", dir.display());
                1
            }
        },
        Command::CheckConfig { config } => check_config(&config),
        Command::Refresh(a) => {
            let opts = RefreshOptions {
                paths: a.paths,
                rate: a.rate,
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
                pace: PaceSettings {
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
