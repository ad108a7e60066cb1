//! Replies as text for people: the tables `refreshd survey` and
//! `refreshctl` print alike.

use std::fmt::Write as _;

use crate::sample::{DriveSample, Measurement, Percentiles};
use crate::units::format_size;

fn row(out: &mut String, label: &str, files: &str, bytes: &str, m: &Measurement) {
    let mbps = m
        .median_bps()
        .map_or("-".into(), |b| format!("{:.1}", b / 1e6));
    let l = m.latency_ms;
    let ms = |f: fn(&Percentiles) -> f64| l.as_ref().map_or("-".into(), |p| format!("{:.2}", f(p)));
    let _ = writeln!(
        out,
        "  {label:<18} {files:>7} {bytes:>11} {mbps:>10} {:>8} {:>8} {:>8} {:>8} {:>8}",
        ms(|p| p.p25),
        ms(|p| p.p50),
        ms(|p| p.p75),
        ms(|p| p.p95),
        ms(|p| p.mean),
    );
}

/// A drive's sample as a table: one row per age bucket, then the fresh
/// reference (`refreshd survey` and `refreshctl survey`).
pub fn sample_table(out: &mut String, sample: &DriveSample) {
    let _ = writeln!(
        out,
        "  {:<18} {:>7} {:>11} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "data age (months)",
        "files",
        "bytes",
        "read MB/s",
        "p25 ms",
        "p50 ms",
        "p75 ms",
        "p95 ms",
        "mean ms"
    );
    for b in &sample.buckets {
        let label = if b.stale {
            format!("{} stale", b.label)
        } else {
            b.label.clone()
        };
        let bytes = format_size(b.bytes);
        row(out, &label, &b.files.to_string(), &bytes, &b.measured);
    }
    match (&sample.fresh, &sample.fresh_missing) {
        (Some(f), _) => row(
            out,
            "fresh reference",
            "canary",
            &format_size(sample.canary_bytes),
            f,
        ),
        (None, why) => {
            let _ = writeln!(
                out,
                "  fresh reference: none ({})",
                why.as_deref().unwrap_or("unknown")
            );
        }
    }
}
