//! refreshd keeps data on drift-prone SSDs fast: it finds stale files and
//! rewrites their data in place, with the same bytes, safely and throttled.
//!
//! - [`config`]: the daemon's TOML, one table per section, validated,
//!   problems at file:line:col.
//! - [`inventory`]: file records in SQLite, incremental scans.
//! - [`drive`]: file to physical drive (sysfs), identity, disk stats.
//! - [`sampler`]: per-drive O_DIRECT sampling by data age, percentiles.
//! - [`policy`]: degraded or not (confirmed, with hysteresis), the plan.
//! - [`engine`]: the refresh engine: in place (io_uring, O_DIRECT, leases)
//!   or kernel relocation (MOVE_EXT, FIDEDUPERANGE) for files in use;
//!   [`io`]: the kernel below it (rings, buffers, syscalls, resolution).
//! - [`daemon`]: `refreshd run`: workers, control socket, metrics, systemd.
//! - [`coordination`]: fleet slots in etcd, the health gate.
//! - [`protocol`]: the control protocol (its own crate, which `refreshctl`
//!   is built from).
//! - [`walk`], [`oneshot`], [`survey`]: `refreshd refresh` and `survey`.
//! - [`units`], [`pathtext`], [`clock`]: sizes, rates and durations for
//!   people, paths as text, time.
//! - [`cli`]: the command line.

// Offsets and lengths are u64 and used as usize for buffers: 64-bit only.
#[cfg(not(target_pointer_width = "64"))]
compile_error!("refreshd supports 64-bit Linux only");

pub mod cli;
pub mod clock;
pub mod config;
pub mod coordination;
pub mod daemon;
pub mod diagnose;
pub mod drive;
pub mod engine;
pub mod inventory;
pub mod io;
pub mod oneshot;
pub mod policy;
pub mod sampler;
pub mod survey;
pub mod walk;

// The protocol crate's modules, where they always were.
pub use refreshd_protocol as protocol;
pub use refreshd_protocol::{pathtext, units};

/// Sets up logging: `-v`/`-q` pick the default level, `RUST_LOG` overrides.
/// Plain lines to stderr; under systemd journald adds the timestamps.
pub fn init_logging(verbosity: i8) {
    use tracing_subscriber::EnvFilter;
    let level = match verbosity {
        i8::MIN..=-1 => "error",
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("refreshd={level}")));
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = if journald {
        builder.without_time().with_ansi(false).try_init()
    } else {
        builder.with_ansi(ansi).try_init()
    };
}
