//! `agingssd`: an emulated aging SSD. Thin: parse, call the library, map
//! errors to exit codes (0 ok, 1 failure, 2 usage).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use testbed::cli;
use testbed::{DriveOptions, Model};

#[derive(Parser, Debug)]
#[command(
    name = "agingssd",
    version,
    about = "An emulated aging SSD: FUSE image + loop device + real filesystem"
)]
struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(clap::Args, Debug, Clone)]
struct UpArgs {
    /// State directory: holds the image, the mount point D/mnt and the control socket.
    #[arg(long)]
    dir: PathBuf,
    /// Disk size, e.g. 2GiB.
    #[arg(long, default_value = "2GiB")]
    size: String,
    /// Filesystem on the drive.
    #[arg(long, default_value = "ext4", value_parser = ["ext4", "xfs", "btrfs"])]
    fs: String,
    /// Decay model.
    #[arg(long, default_value = "840evo", value_parser = Model::NAMES)]
    model: String,
    /// Requests served at once, like flash dies.
    #[arg(long, default_value_t = 8)]
    channels: u32,
    /// Fresh read/write bandwidth of the whole drive, MB/s (default: the model's, 400 for 840evo).
    #[arg(long, value_name = "MB/s")]
    bandwidth: Option<f64>,
    /// Latency of one fresh request, µs (default: the model's, 250 for 840evo).
    #[arg(long, value_name = "µs")]
    latency_us: Option<u64>,
    /// Real seconds per virtual month: the clock also moves by itself.
    #[arg(long)]
    month_seconds: Option<f64>,
    /// Stay in the foreground (Ctrl-C takes the drive down).
    #[arg(long)]
    foreground: bool,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Build and mount a drive at DIR/mnt; prints the loop device and mount point.
    Up(UpArgs),
    /// Age every written block by M virtual months (time travel).
    Age {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        months: f64,
    },
    /// Reads (--eio) or writes (--write-eio) touching device bytes
    /// [OFFSET, OFFSET+LEN) fail with EIO; a failed write changes nothing.
    #[command(group(clap::ArgGroup::new("kind").required(true).args(["eio", "write_eio"])))]
    Fault {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, num_args = 2, value_names = ["OFFSET", "LEN"])]
        eio: Option<Vec<String>>,
        #[arg(long, num_args = 2, value_names = ["OFFSET", "LEN"])]
        write_eio: Option<Vec<String>>,
    },
    /// Caps the link like a port negotiated down (all reads and writes);
    /// `--cap 0` lifts it.
    Link {
        #[arg(long)]
        dir: PathBuf,
        /// Bytes per second, e.g. 20MB/s or 20000000; 0 lifts the cap.
        #[arg(long)]
        cap: String,
    },
    /// Write-path fade ("SSD fade"): after AFTER bytes written since the
    /// last discard every request is FACTOR times slower, until a discard
    /// (fstrim). `--after 0` turns it off.
    Fade {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        after: String,
        #[arg(long, default_value_t = 10)]
        factor: u64,
    },
    /// Reads, writes, age histogram, faulty ranges and writes into them.
    Stats {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Unmount, detach, stop; idempotent; also cleans up after a crash.
    Down {
        #[arg(long)]
        dir: PathBuf,
    },
    /// The seed experiment: read speed and latency by data age, then refresh.
    Reproduce {
        /// Size of the measured file.
        #[arg(long, default_value_t = 128)]
        shard_mib: usize,
    },
    /// The end-to-end demo: an aged drive, `refreshd refresh`, fast again.
    Demo,
    /// (internal) Serve a drive in this process.
    #[command(hide = true)]
    Serve(UpArgs),
}

fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, mult) = match t.find(|c: char| !c.is_ascii_digit()) {
        None => (t, 1u64),
        Some(i) => (
            &t[..i],
            match &t[i..] {
                "K" | "KiB" => 1 << 10,
                "M" | "MiB" => 1 << 20,
                "G" | "GiB" => 1 << 30,
                "T" | "TiB" => 1 << 40,
                other => bail!("unknown size unit {other:?} in {s:?}: use e.g. 512MiB or 2GiB"),
            },
        ),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("invalid size {s:?}: use e.g. 512MiB or 2GiB"))?;
    n.checked_mul(mult)
        .ok_or_else(|| anyhow::anyhow!("size {s:?} is too large"))
}

fn options(a: &UpArgs) -> Result<DriveOptions> {
    let size = parse_size(&a.size)?;
    if size < 320 << 20 {
        bail!("--size must be at least 320MiB (XFS needs 300 MB)");
    }
    if a.channels == 0 || a.channels > 64 {
        bail!("--channels must be 1..=64");
    }
    if a.month_seconds.is_some_and(|s| s.is_nan() || s <= 0.0) {
        bail!("--month-seconds must be positive");
    }
    let mut model = Model::preset(&a.model).ok_or_else(|| anyhow::anyhow!("unknown model"))?;
    if let Some(bw) = a.bandwidth {
        if !(bw.is_finite() && (1.0..=100_000.0).contains(&bw)) {
            bail!("--bandwidth must be 1..=100000 MB/s");
        }
        model.fresh_bandwidth = bw * 1e6;
    }
    if let Some(us) = a.latency_us {
        model.fresh_latency = std::time::Duration::from_micros(us);
    }
    Ok(DriveOptions {
        size,
        fs: a.fs.clone(),
        model,
        channels: a.channels,
        month_seconds: a.month_seconds,
    })
}

fn up_args(a: &UpArgs) -> Vec<String> {
    let mut v = vec![
        "--size".into(),
        a.size.clone(),
        "--fs".into(),
        a.fs.clone(),
        "--model".into(),
        a.model.clone(),
    ];
    v.extend(["--channels".into(), a.channels.to_string()]);
    if let Some(s) = a.month_seconds {
        v.extend(["--month-seconds".into(), s.to_string()]);
    }
    if let Some(b) = a.bandwidth {
        v.extend(["--bandwidth".into(), b.to_string()]);
    }
    if let Some(l) = a.latency_us {
        v.extend(["--latency-us".into(), l.to_string()]);
    }
    v
}

fn run(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Up(a) => {
            let opts = options(&a)?;
            if a.foreground {
                cli::serve(&a.dir, &opts)
            } else {
                let st = cli::up_background(&a.dir, &up_args(&a))?;
                println!(
                    "loop device: {}\nmountpoint:  {}",
                    st.loop_dev,
                    st.mnt.display()
                );
                Ok(())
            }
        }
        Cmd::Serve(a) => cli::serve(&a.dir, &options(&a)?),
        Cmd::Age { dir, months } => {
            if !(months.is_finite() && months >= 0.0) {
                bail!("--months must be a non-negative number");
            }
            cli::age(&dir, months)
        }
        Cmd::Fault {
            dir,
            eio,
            write_eio,
        } => {
            let (range, write) = match (eio, write_eio) {
                (Some(r), _) => (r, false),
                (None, Some(r)) => (r, true),
                (None, None) => unreachable!("clap requires one of --eio, --write-eio"),
            };
            cli::fault(&dir, parse_size(&range[0])?, parse_size(&range[1])?, write)
        }
        Cmd::Link { dir, cap } => cli::link_cap(&dir, parse_size(cap.trim_end_matches("/s"))?),
        Cmd::Fade { dir, after, factor } => cli::fade(&dir, parse_size(&after)?, factor),
        Cmd::Stats { dir, json } => {
            let s = cli::stats(&dir)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print!("{}", s.render());
            }
            Ok(())
        }
        Cmd::Down { dir } => cli::down(&dir),
        Cmd::Reproduce { shard_mib } => testbed::scenarios::reproduce(shard_mib),
        Cmd::Demo => testbed::scenarios::demo(),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = run(args.command);
    // An interrupted scenario is being torn down by its signal thread,
    // which ends the process when done.
    while testbed::scenarios::interrupted() {
        std::thread::park();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agingssd: {e:#}");
            ExitCode::from(1)
        }
    }
}
