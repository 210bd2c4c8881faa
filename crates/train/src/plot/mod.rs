//! Line charts of a run: loss and metric against epoch and against bytes sent, and the
//! paper tables' learning curves. Every chart is written twice: as PNG (plotters' bitmap
//! backend, for slides and image viewers) and as SVG (hand-written, diffs as text and
//! keeps its labels when no TrueType font is installed for the PNG's text).

mod font;
mod png;
mod svg;

use anyhow::{Context, Result};
use std::path::Path;

pub use font::FONT_ENV;

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Series colours shared by both formats (matplotlib's first six).
pub(crate) const COLORS: [(u8, u8, u8); 6] = [
    (0x1f, 0x77, 0xb4),
    (0xd6, 0x27, 0x28),
    (0x2c, 0xa0, 0x2c),
    (0x94, 0x67, 0xbd),
    (0xff, 0x7f, 0x0e),
    (0x8c, 0x56, 0x4b),
];

/// The plotted ranges: the finite points' extent, the y range padded by 5 % so lines do
/// not run along the frame, and a unit range around a single value.
pub(crate) fn bounds(series: &[Series]) -> ((f64, f64), (f64, f64)) {
    let pts = || {
        series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|p| p.0.is_finite() && p.1.is_finite())
    };
    let (x0, x1) = pts().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (y0, y1) = pts().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let x = if x0 < x1 {
        (x0, x1)
    } else if x0 <= x1 {
        (x0.min(0.0), x0.max(0.0) + 1.0)
    } else {
        (0.0, 1.0) // no finite point at all
    };
    let y = if y0 < y1 {
        let pad = ((y1 - y0) * 0.05).max(1e-9);
        (y0 - pad, y1 + pad)
    } else if y0 <= y1 {
        (y0 - 1.0, y0 + 1.0)
    } else {
        (0.0, 1.0)
    };
    (x, y)
}

/// Tick label text for `v` on an axis whose ticks are `step` apart: SI suffixes for
/// large values (bytes), and as many decimals as the step needs, so neighbouring ticks
/// never print the same text.
pub(crate) fn label(v: f64, step: f64) -> String {
    let (div, suffix) = match v.abs().max(step.abs()) {
        m if m >= 1e9 => (1e9, "G"),
        m if m >= 1e6 => (1e6, "M"),
        m if m >= 1e4 => (1e3, "k"),
        _ => (1.0, ""),
    };
    let s = step.abs() / div;
    let decimals = if s.is_nan() || s <= 0.0 || s >= 1.0 {
        0
    } else {
        ((-s.log10()).ceil() as usize).min(6)
    };
    format!("{:.*}{suffix}", decimals, v / div)
}

/// Series with at most this many points also get a marker at each point, so a curve of
/// one evaluation (a one-epoch run) still shows.
pub(crate) const MARKERS_UP_TO: usize = 30;

/// Writes one chart of `series` as `stem.png` and `stem.svg` (any extension on `stem` is
/// replaced).
pub fn line_chart(
    stem: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<()> {
    let svg_path = stem.with_extension("svg");
    let text = svg::render(title, x_label, y_label, series);
    crate::metrics::write_atomic(&svg_path, text.as_bytes())
        .with_context(|| format!("plotting {}", svg_path.display()))?;
    let png_path = stem.with_extension("png");
    let bytes = png::render(title, x_label, y_label, series, font::family())
        .with_context(|| format!("plotting {}", png_path.display()))?;
    crate::metrics::write_atomic(&png_path, &bytes)
        .with_context(|| format!("plotting {}", png_path.display()))
}

/// The stems of the run directory's charts (each written as `.png` and `.svg`).
pub const RUN_CHARTS: [&str; 4] = [
    "loss_by_epoch",
    "loss_by_bytes",
    "metric_by_epoch",
    "metric_by_bytes",
];

/// The run directory's charts from its `metrics.jsonl`: loss and metric against epoch
/// and against bytes sent.
pub fn run_charts(dir: &Path, metric_name: &str) -> Result<()> {
    let text =
        std::fs::read_to_string(dir.join("metrics.jsonl")).context("reading metrics.jsonl")?;
    let recs: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let get = |kind: &str, x: &str, y: &str| -> Vec<(f64, f64)> {
        recs.iter()
            .filter(|r| r["kind"] == kind)
            .filter_map(|r| Some((r[x].as_f64()?, r[y].as_f64()?)))
            .collect()
    };
    let bytes = "bytes sent (this rank)";
    // (file stem, record kind, x key, x label, y key, series name and y label)
    let charts = [
        (RUN_CHARTS[0], "step", "epoch", "epoch", "loss", "loss"),
        (RUN_CHARTS[1], "step", "bytes_sent", bytes, "loss", "loss"),
        (
            RUN_CHARTS[2],
            "eval",
            "epoch",
            "epoch",
            "metric",
            metric_name,
        ),
        (
            RUN_CHARTS[3],
            "eval",
            "bytes_sent",
            bytes,
            "metric",
            metric_name,
        ),
    ];
    for (stem, kind, x, x_label, y, name) in charts {
        let title = if y == "loss" { "training loss" } else { name };
        let series = [Series {
            name: name.to_string(),
            points: get(kind, x, y),
        }];
        line_chart(&dir.join(stem), title, x_label, name, &series)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::label;

    #[test]
    fn labels_have_the_precision_of_their_step() {
        assert_eq!(label(131.6, 0.2), "131.6");
        assert_eq!(label(7.0, 0.5), "7.0");
        assert_eq!(label(0.126, 0.025), "0.13");
        assert_eq!(label(2.5e9, 5e8), "2.5G");
        assert_eq!(label(3e6, 1e6), "3M");
        assert_eq!(label(12000.0, 2000.0), "12k");
        assert_eq!(label(40.0, 10.0), "40");
        assert_eq!(label(0.0, 0.0), "0");
    }
}
