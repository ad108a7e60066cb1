//! The survey's chart: per drive, read throughput (bars) and 4 KiB read
//! latency (p50 with the p25–p95 range) by data age, the fresh reference
//! as a dashed line.

use std::fmt::Write as _;
use std::path::Path;

use super::report::DriveReport;
use crate::sampler::BucketSample;

const W: f64 = 760.0;
const PANEL_H: f64 = 220.0;
const DRIVE_H: f64 = 290.0;

/// Which of a drive's two panels.
#[derive(Clone, Copy, PartialEq)]
enum Panel {
    Throughput,
    Latency,
}

impl Panel {
    fn title(self) -> &'static str {
        match self {
            Panel::Throughput => "read MB/s by data age (months)",
            Panel::Latency => "4 KiB read latency ms (p50, p25–p95)",
        }
    }

    /// A bucket's (low, middle, high) on this panel.
    fn value(self, b: &BucketSample) -> Option<(f64, f64, f64)> {
        match self {
            Panel::Throughput => b.measured.median_bps().map(|v| (v / 1e6, v / 1e6, v / 1e6)),
            Panel::Latency => b.measured.latency_ms.map(|p| (p.p25, p.p50, p.p95)),
        }
    }

    /// The fresh reference on this panel.
    fn reference(self, r: &DriveReport) -> Option<f64> {
        let fresh = r.sample.fresh.as_ref()?;
        match self {
            Panel::Throughput => fresh.median_bps().map(|b| b / 1e6),
            Panel::Latency => fresh.latency_ms.map(|p| p.p50),
        }
    }
}

/// The chart, one row of two panels per drive.
pub fn render_svg(reports: &[DriveReport]) -> String {
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
        for (i, panel) in [Panel::Throughput, Panel::Latency].into_iter().enumerate() {
            draw_panel(&mut s, r, panel, 50.0 + i as f64 * (W / 2.0), top + 20.0);
        }
    }
    s.push_str("</svg>\n");
    s
}

/// One panel with its top-left corner of the plot area at (x0, y0).
fn draw_panel(s: &mut String, r: &DriveReport, panel: Panel, x0: f64, y0: f64) {
    let pw = W / 2.0 - 70.0;
    let y1 = y0 + PANEL_H - 40.0;
    let _ = writeln!(
        s,
        r##"<text x="{x0}" y="{}" fill="#333">{}</text>"##,
        y0 - 4.0,
        panel.title()
    );
    let _ = writeln!(
        s,
        r##"<path d="M{x0} {y0} V{y1} H{}" stroke="#555" fill="none"/>"##,
        x0 + pw
    );
    let buckets = &r.sample.buckets;
    let values: Vec<_> = buckets.iter().map(|b| panel.value(b)).collect();
    let reference = panel.reference(r);
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
        r##"<text x="{}" y="{}" text-anchor="end">{:.1}</text><text x="{}" y="{y1}" text-anchor="end">0</text>"##,
        x0 - 4.0,
        y0 + 4.0,
        max,
        x0 - 4.0,
    );
    let slot = pw / buckets.len().max(1) as f64;
    for (i, (b, v)) in buckets.iter().zip(&values).enumerate() {
        let cx = x0 + slot * (i as f64 + 0.5);
        let color = if b.stale { "#d9534f" } else { "#5cb85c" };
        match (*v, panel) {
            (Some((_, mid, _)), Panel::Throughput) => {
                let _ = writeln!(
                    s,
                    r##"<rect x="{}" y="{}" width="{}" height="{}" fill="{color}"/>"##,
                    cx - slot * 0.35,
                    y(mid),
                    slot * 0.7,
                    y1 - y(mid)
                );
            }
            (Some((lo, mid, hi)), Panel::Latency) => {
                let _ = writeln!(
                    s,
                    r##"<path d="M{cx} {} V{}" stroke="{color}" stroke-width="2"/><circle cx="{cx}" cy="{}" r="4" fill="{color}"/>"##,
                    y(lo),
                    y(hi),
                    y(mid)
                );
            }
            (None, _) => {}
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

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Writes the chart to `path`.
pub fn write_svg(path: &Path, reports: &[DriveReport]) -> std::io::Result<()> {
    std::fs::write(path, render_svg(reports))
}
