//! The survey's human table: per drive its buckets, the stale data
//! against fresh, the verdict and why, the forecast and the plan.

use std::fmt::Write as _;

use super::report::{DriveReport, SurveyOptions};
use crate::units::format_size;

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
        heading(&mut out, r);
        crate::protocol::show::sample_table(&mut out, &r.sample);
        stale_line(&mut out, r, opts);
        let _ = writeln!(
            out,
            "  verdict: {} ({}; one round)",
            r.verdict,
            why(r, opts)
        );
        let _ = match &r.forecast {
            Some(f) => writeln!(out, "  forecast: {} ({})", f.words(), f.basis()),
            None => writeln!(
                out,
                "  forecast: none (it needs data of two ages reading measurably slower than fresh, and speeds that follow age more than they vary)"
            ),
        };
        plan_line(&mut out, r);
        sampled_line(&mut out, r);
    }
    out
}

fn heading(out: &mut String, r: &DriveReport) {
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
}

fn stale_line(out: &mut String, r: &DriveReport, opts: &SurveyOptions) {
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
}

/// Why the verdict is what it is.
fn why(r: &DriveReport, opts: &SurveyOptions) -> String {
    let j = &r.judgement;
    if let Some(w) = j.slow.as_ref().or(j.unjudged.as_ref()) {
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
    }
}

/// What `refreshd refresh` would rewrite; none on a slow drive (a
/// rewrite cannot help it).
fn plan_line(out: &mut String, r: &DriveReport) {
    if r.plan.files.is_empty() || r.verdict == "slow" {
        return;
    }
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

fn sampled_line(out: &mut String, r: &DriveReport) {
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
