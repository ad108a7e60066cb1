//! The application's latency while refreshd works, on a matrix of device
//! models and readers, side by side in one run (see docs/benchmarks.md).
//!
//! Per cell (a device model × a reader), all in one run:
//! - `idle`: the reader alone: the baseline every ratio is against;
//! - `default`: a refresh at the daemon's defaults (`--rate 50MiB/s`,
//!   `--yield auto`, idle priority) beside the reader, run as root (its
//!   pacer times the drive's reads one by one where the kernel allows);
//! - `as unit`: the same with the shipped unit's capabilities only (its
//!   `CapabilityBoundingSet=`: no timed reads, the mean alone), as the
//!   daemon under systemd runs;
//! - each of `REFRESHD_BENCH_CANDIDATES` (below): another build at the
//!   defaults, as root;
//! - a sweep of fixed rates (`--yield off --rate R`, R in
//!   `REFRESHD_BENCH_RATES`, default 1,2,4,8,16,32 MiB/s): the best fixed
//!   rate is the highest whose mean and p99 stay within 1.2× idle — what an
//!   operator could only pick in hindsight.
//!
//! The target, every cell: `default` keeps the reader's mean and p99
//! within 1.2× idle and refreshes at least as fast as the best fixed rate
//! while the reader runs. Per device, with no reader: `default` against
//! `--yield off` (≥ 0.95×). Then the matrix as a Markdown table, how
//! many cells meet the target, and what the candidates (below) did.
//!
//! Beside each run's ratios, in brackets: the p99 and p99.9 of the
//! drive's reads over the run (the reader's at the block layer, ours left
//! out: `refreshd::io::block_reads`), against the idle run's; where reads
//! cannot be timed the brackets are left out, said once per device.
//!
//! Knobs: `REFRESHD_BENCH_ONLY` (device names, comma-separated: tb1, tb2,
//! tb4, tb8, tb-link, tb-fade, loop-none, loop-mq-deadline, loop-bfq),
//! `REFRESHD_BENCH_READERS` (qd1, qd8, mmap, bursty),
//! `REFRESHD_BENCH_LATENCY_SECS` (per run, default 8),
//! `REFRESHD_BENCH_REPEATS` (rounds, default 1: each round runs the idle
//! case and then every other case of a cell once, in an order that
//! changes from cell to cell and round to round (`judge::round_order`),
//! and each ratio is the median over the rounds of a run against the
//! idle run of its round; each round's p99 is shown),
//! `REFRESHD_BENCH_LATENCY_MIB` (aged data, default 256),
//! `REFRESHD_BENCH_LAT_LOG` (a directory: fio's readers log every read's
//! latency there), `REFRESHD_BENCH_CANDIDATES` (`name=path`,
//! comma-separated: other builds of refreshd, each run as root at the
//! defaults as another case of every cell, after `as unit`, and judged
//! on the reader as the default is; a change to the pacer against the
//! law it would replace, in the same rounds. Not run as the unit, nor
//! with no reader). The lines after the matrix pair each law (the
//! default, as the unit, each candidate) with each other over every
//! cell and round (`judge::Paired`: the geometric mean of a's p99, mean
//! and MiB/s over b's, with a 95 % interval over the cells). Root
//! needed.
#![allow(clippy::unwrap_used)]

#[path = "latency/beds.rs"]
mod beds;
#[path = "../tests/helpers/mod.rs"]
mod helpers;
#[path = "latency/judge.rs"]
mod judge;
#[path = "latency/readers.rs"]
mod readers;
#[path = "latency/runs.rs"]
mod runs;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use beds::{Bed, FILE_MIB};
use judge::{Paired, RoundRatios};
use readers::Reader;
use runs::{medians, rounds, Case, Ratios};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_list(name: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The floor the default run keeps (the daemon's default, 4 MiB/s).
const FLOOR_MIB: u64 = refreshd::engine::pacing::pace::DEFAULT_FLOOR >> 20;

/// The best fixed rate: the highest within 1.2× idle, and what that run
/// refreshed while the reader ran (measured as the default's is: the
/// refresh's own time, its start included, so a fixed 4 MiB/s reads
/// 3.9–4.0 on the testbed; less where the scheduler starves it).
#[derive(Clone, Copy)]
struct BestFixed {
    rate: u64,
    measured: f64,
}

/// A cell's verdict.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Met,
    Missed,
    /// Missed on the latency, and in this run no fixed rate at or above
    /// the floor kept the reader within 1.2× either (as good as the rates
    /// swept and one run of each: see `REFRESHD_BENCH_REPEATS`).
    OutOfReach,
}

impl Verdict {
    fn show(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::Missed => "missed",
            Verdict::OutOfReach => "missed (out of reach at the floor)",
        }
    }
}

/// A default run's result against idle, and its verdict.
#[derive(Clone, Copy)]
struct DefaultRun {
    mean: f64,
    p99: f64,
    rate: f64,
    verdict: Verdict,
}

impl DefaultRun {
    fn judge(r: &Ratios, best_fixed: Option<BestFixed>, reachable: bool) -> Self {
        let fast_enough = best_fixed.is_none_or(|b| r.mib_per_s >= b.measured);
        let verdict = match (r.within(), fast_enough, reachable) {
            (true, true, _) => Verdict::Met,
            (false, _, false) => Verdict::OutOfReach,
            _ => Verdict::Missed,
        };
        DefaultRun {
            mean: r.mean,
            p99: r.p99,
            rate: r.mib_per_s,
            verdict,
        }
    }
}

/// One cell's result, for the summary table: the default as root (its
/// reads timed one by one where the kernel allows) and as the shipped
/// unit runs it.
struct Cell {
    bed: String,
    reader: &'static str,
    root: DefaultRun,
    unit: DefaultRun,
    /// Each of `REFRESHD_BENCH_CANDIDATES`' runs, in its order.
    candidates: Vec<DefaultRun>,
    /// The laws' rounds, each against its round's idle run: the default
    /// (as root), as the unit, then each candidate: what they are paired
    /// on.
    laws: Vec<Vec<RoundRatios>>,
    best_fixed: Option<BestFixed>,
}

/// How long each run is, how many runs of each case (medians), and the
/// candidate builds run beside the default.
struct Runs {
    secs: u64,
    repeats: usize,
    candidates: Vec<Candidate>,
}

/// Another build of refreshd, run at the defaults beside this one's in
/// the same rounds: a change to the pacer judged on the whole matrix
/// against the law it would replace, not against a run made hours
/// before.
struct Candidate {
    name: String,
    path: String,
}

impl Candidate {
    /// `REFRESHD_BENCH_CANDIDATES`: `name=path`, comma-separated; each
    /// name once, each path an executable file (made absolute: a bare
    /// name would be looked up in `$PATH`, not here).
    fn from_env() -> Vec<Candidate> {
        let mut all: Vec<Candidate> = vec![];
        for c in env_list("REFRESHD_BENCH_CANDIDATES") {
            let bad = |why: &str| -> ! { panic!("REFRESHD_BENCH_CANDIDATES: {c:?}: {why}") };
            let Some((name, path)) = c.split_once('=') else {
                bad("not name=path")
            };
            let (name, path) = (name.trim(), path.trim());
            if name.is_empty() || all.iter().any(|a| a.name == name) {
                bad("each candidate needs a name of its own");
            }
            let path = std::fs::canonicalize(path).unwrap_or_else(|e| bad(&e.to_string()));
            let executable = std::fs::metadata(&path)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
            if !executable {
                bad("not an executable file");
            }
            all.push(Candidate {
                name: name.to_string(),
                path: path.display().to_string(),
            });
        }
        all
    }
}

/// One cell's cases in rounds; `turn`, the cell's number in the run,
/// picks their order (`runs::rounds`).
fn cell(bed: &Bed<'_>, reader: Reader, runs: &Runs, rates: &[u64], turn: usize) -> Cell {
    let mut cases = vec![Case::Idle, Case::Default, Case::AsTheUnit];
    cases.extend(
        runs.candidates
            .iter()
            .map(|c| Case::Candidate(c.path.clone())),
    );
    cases.extend(rates.iter().map(|&r| Case::Fixed(r)));
    let all = rounds(bed, reader, &cases, runs.secs, runs.repeats, turn);
    let idle = medians(&all[0]);
    let idle_block = idle.block.map_or(String::new(), |b| {
        format!(
            "; the drive's reads p99 {:.3} ms, p99.9 {:.3} ms",
            b.p99_ms, b.p999_ms
        )
    });
    println!(
        "\n{} · {}: idle {:.0} IOPS, mean {:.3} ms, p99 {:.3} ms{idle_block}",
        bed.name,
        reader.about(),
        idle.iops,
        idle.mean_ms,
        idle.p99_ms
    );
    let ratios: Vec<Ratios> = all[1..].iter().map(|c| Ratios::of(c, &all[0])).collect();
    show("default", &ratios[0]);
    show("as unit", &ratios[1]);
    let (candidates, fixed) = ratios[2..].split_at(runs.candidates.len());
    for (c, r) in runs.candidates.iter().zip(candidates) {
        show(&c.name, r);
    }
    let mut best_fixed = None;
    let mut reachable = false;
    for (&r, fixed) in rates.iter().zip(fixed) {
        show(&format!("{r}MiB/s"), fixed);
        if fixed.within() {
            best_fixed = Some(BestFixed {
                rate: r,
                measured: fixed.mib_per_s,
            });
            reachable |= r >= FLOOR_MIB;
        }
    }
    let root = DefaultRun::judge(&ratios[0], best_fixed, reachable);
    let unit = DefaultRun::judge(&ratios[1], best_fixed, reachable);
    let says = |v: Verdict| match v {
        Verdict::Met => "meets the target",
        Verdict::Missed => "MISSES the target",
        Verdict::OutOfReach => "MISSES the target (no fixed rate at or above the floor kept 1.2×)",
    };
    println!(
        "  best fixed rate within 1.2×: {}; default {}; as the unit {}",
        best_fixed.map_or("none".into(), |b| format!(
            "{} MiB/s ({:.1} measured)",
            b.rate, b.measured
        )),
        says(root.verdict),
        says(unit.verdict),
    );
    let candidates: Vec<DefaultRun> = candidates
        .iter()
        .map(|r| DefaultRun::judge(r, best_fixed, reachable))
        .collect();
    for (c, run) in runs.candidates.iter().zip(&candidates) {
        println!("  candidate {}: {}", c.name, says(run.verdict));
    }
    let laws = ratios[..2 + runs.candidates.len()]
        .iter()
        .map(|r| r.each.clone())
        .collect();
    Cell {
        bed: bed.name.clone(),
        reader: reader.name(),
        root,
        unit,
        candidates,
        laws,
        best_fixed,
    }
}

/// A case's line: its ratios against idle, the drive's reads' in
/// brackets, and with more than one round each round's p99.
fn show(name: &str, r: &Ratios) {
    let spread = if r.each.len() > 1 {
        let p99s: Vec<String> = r.each.iter().map(|e| format!("{:.2}", e.p99)).collect();
        format!("  (p99 of each round: {})", p99s.join(", "))
    } else {
        String::new()
    };
    let block = r.block.map_or(String::new(), |(p99, p999)| {
        format!("  [drive's reads: p99 {p99:.2}× p99.9 {p999:.2}×]")
    });
    println!(
        "  {name:<10} mean {:>5.2}×  p99 {:>5.2}×  refresh {:>6.1} MiB/s while the reader ran{}{block}{spread}",
        r.mean,
        r.p99,
        r.mib_per_s,
        if r.within() { "" } else { "  (over 1.2×)" }
    );
}

/// No reader: the default against `--yield off` at the same rate.
fn alone(bed: &Bed<'_>, data_mib: u64) -> f64 {
    let off = runs::time_alone(bed, &Case::Fixed(50));
    let on = runs::time_alone(bed, &Case::Default);
    let ratio = off.as_secs_f64() / on.as_secs_f64();
    println!(
        "  no reader: default {:.1} MiB/s vs --yield off {:.1} MiB/s: {ratio:.3}×",
        data_mib as f64 / on.as_secs_f64(),
        data_mib as f64 / off.as_secs_f64(),
    );
    ratio
}

fn main() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED latency benchmark: needs root");
        return;
    }
    if Command::new("fio").arg("--version").output().is_err() {
        eprintln!("SKIPPED latency benchmark: fio is not installed (apt-get install fio)");
        return;
    }
    let runs = Runs {
        secs: env_u64("REFRESHD_BENCH_LATENCY_SECS", 8),
        repeats: env_u64("REFRESHD_BENCH_REPEATS", 1).max(1) as usize,
        candidates: Candidate::from_env(),
    };
    let data_mib = env_u64("REFRESHD_BENCH_LATENCY_MIB", 256) / FILE_MIB * FILE_MIB;
    let rates: Vec<u64> = env_list("REFRESHD_BENCH_RATES")
        .iter()
        .filter_map(|r| r.parse().ok())
        .collect();
    let rates = if rates.is_empty() {
        vec![1, 2, 4, 8, 16, 32]
    } else {
        rates
    };
    let only = env_list("REFRESHD_BENCH_ONLY");
    let readers: Vec<Reader> = Reader::ALL
        .into_iter()
        .filter(|r| {
            let want = env_list("REFRESHD_BENCH_READERS");
            want.is_empty() || want.iter().any(|w| w == r.name())
        })
        .collect();
    let mut cells = vec![];
    let mut alones = vec![];
    let mut skipped = vec![];
    for name in beds::NAMES {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
        let device = match beds::device(name, tmp.path(), data_mib) {
            Ok(d) => d,
            Err(why) => {
                println!("\n{name}: skipped: {why}");
                skipped.push((name, why));
                continue;
            }
        };
        let bed = beds::bed(name, &device, data_mib);
        for &reader in &readers {
            cells.push(cell(&bed, reader, &runs, &rates, cells.len()));
        }
        alones.push((name, alone(&bed, data_mib)));
    }
    println!(
        "\n| device | reader | mean | p99 | refresh MiB/s | target | as the unit: mean, p99, MiB/s | target | best fixed (measured) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for c in &cells {
        let (d, u) = (c.root, c.unit);
        println!(
            "| {} | {} | {:.2}× | {:.2}× | {:.1} | {} | {:.2}×, {:.2}×, {:.1} | {} | {} |",
            c.bed,
            c.reader,
            d.mean,
            d.p99,
            d.rate,
            d.verdict.show(),
            u.mean,
            u.p99,
            u.rate,
            u.verdict.show(),
            c.best_fixed
                .map_or("none".into(), |b| format!("{} ({:.1})", b.rate, b.measured)),
        );
    }
    println!("\n| device | no reader: default / --yield off |\n|---|---|");
    for (name, r) in alones {
        println!("| {name} | {r:.3}× |");
    }
    for (who, pick) in [
        (
            "default",
            (|c: &Cell| c.root.verdict) as fn(&Cell) -> Verdict,
        ),
        ("as the unit", |c: &Cell| c.unit.verdict),
    ] {
        let count = |v: Verdict| cells.iter().filter(|c| pick(c) == v).count();
        let (met, out) = (count(Verdict::Met), count(Verdict::OutOfReach));
        println!(
            "\n{who}: {met} of {} cells meet the target; {out} missed are out of reach at the {FLOOR_MIB} MiB/s floor; {met} of the other {} meet it",
            cells.len(),
            cells.len() - out
        );
    }
    for (i, c) in runs.candidates.iter().enumerate() {
        let count = |v: Verdict| {
            cells
                .iter()
                .filter(|cell| cell.candidates[i].verdict == v)
                .count()
        };
        println!(
            "candidate {}: {} of {} cells meet the target ({} out of reach); cells where it and the default differ:",
            c.name,
            count(Verdict::Met),
            cells.len(),
            count(Verdict::OutOfReach),
        );
        for cell in cells
            .iter()
            .filter(|cell| cell.candidates[i].verdict != cell.root.verdict)
        {
            let (d, k) = (cell.root, cell.candidates[i]);
            println!(
                "  {} · {}: default {:.2}×, {:.2}×, {:.1} MiB/s {}; {} {:.2}×, {:.2}×, {:.1} MiB/s {}",
                cell.bed, cell.reader, d.mean, d.p99, d.rate, d.verdict.show(),
                c.name, k.mean, k.p99, k.rate, k.verdict.show(),
            );
        }
    }
    paired(&cells, &runs.candidates);
    for (name, why) in skipped {
        println!("{name}: not run: {why}");
    }
}

/// Each law against each other (the default, as the unit, each
/// candidate), paired over the same cells and rounds (`judge::Paired`).
fn paired(cells: &[Cell], candidates: &[Candidate]) {
    let names: Vec<&str> = ["default", "as the unit"]
        .into_iter()
        .chain(candidates.iter().map(|c| c.name.as_str()))
        .collect();
    println!(
        "\npaired over the same cells and rounds: a against b, the geometric mean over the cells of a's over b's (each cell's rounds averaged), its 95 % interval over the cells:"
    );
    let laws: Vec<Vec<Vec<RoundRatios>>> = (0..names.len())
        .map(|k| cells.iter().map(|c| c.laws[k].clone()).collect())
        .collect();
    for j in 1..names.len() {
        for i in 0..j {
            let Some(p) = Paired::of(&laws[j], &laws[i]) else {
                continue;
            };
            let marked = |iv: &judge::Interval| {
                let mark = if iv.excludes_one() { ", 1 outside" } else { "" };
                format!("{} ({} cells{mark})", iv.show(), iv.cells)
            };
            println!(
                "  {} against {}: p99 {}, mean {}, MiB/s {}; p99 lower in {} cells, higher in {}",
                names[j],
                names[i],
                marked(&p.p99),
                marked(&p.mean),
                p.mib_per_s
                    .as_ref()
                    .map_or("– (no cell refreshed in both)".into(), marked),
                p.p99_lower,
                p.p99_higher,
            );
        }
    }
}
