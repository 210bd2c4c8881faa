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

/// One of a run directory's charts (written as `{stem}.png` and `{stem}.svg`): the
/// records of `kind` (`step` or `eval`) in `metrics.jsonl`, their `y` key against `x`.
pub struct RunChart {
    pub stem: &'static str,
    pub kind: &'static str,
    pub x: &'static str,
    pub x_label: &'static str,
    /// `loss` (training loss) or `metric` (the evaluation metric).
    pub y: &'static str,
}

const BYTES_LABEL: &str = "bytes sent (this rank)";

/// The run directory's charts: loss and metric against epoch and against bytes sent.
pub const RUN_CHARTS: [RunChart; 4] = [
    RunChart {
        stem: "loss_by_epoch",
        kind: "step",
        x: "epoch",
        x_label: "epoch",
        y: "loss",
    },
    RunChart {
        stem: "loss_by_bytes",
        kind: "step",
        x: "bytes_sent",
        x_label: BYTES_LABEL,
        y: "loss",
    },
    RunChart {
        stem: "metric_by_epoch",
        kind: "eval",
        x: "epoch",
        x_label: "epoch",
        y: "metric",
    },
    RunChart {
        stem: "metric_by_bytes",
        kind: "eval",
        x: "bytes_sent",
        x_label: BYTES_LABEL,
        y: "metric",
    },
];

/// The (x, y) points of the `records` of `kind` (`metrics.jsonl` lines) that hold both
/// keys as numbers.
pub fn points(records: &[serde_json::Value], kind: &str, x: &str, y: &str) -> Vec<(f64, f64)> {
    records
        .iter()
        .filter(|r| r["kind"] == kind)
        .filter_map(|r| Some((r[x].as_f64()?, r[y].as_f64()?)))
        .collect()
}

/// The run directory's charts from its `metrics.jsonl`.
pub fn run_charts(dir: &Path, metric_name: &str) -> Result<()> {
    let text =
        std::fs::read_to_string(dir.join("metrics.jsonl")).context("reading metrics.jsonl")?;
    let recs: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    learning_charts(dir, metric_name, &[(None, &recs)])
}

/// [`RUN_CHARTS`] drawn into `dir`, one series per run: its name (None: the quantity
/// drawn, for a run charted alone) and its `metrics.jsonl` records.
pub fn learning_charts(
    dir: &Path,
    metric_name: &str,
    runs: &[(Option<&str>, &[serde_json::Value])],
) -> Result<()> {
    for c in &RUN_CHARTS {
        let (quantity, title) = if c.y == "loss" {
            ("loss", "training loss")
        } else {
            (metric_name, metric_name)
        };
        let series: Vec<Series> = runs
            .iter()
            .map(|(name, recs)| Series {
                name: name.unwrap_or(quantity).to_string(),
                points: points(recs, c.kind, c.x, c.y),
            })
            .collect();
        line_chart(&dir.join(c.stem), title, c.x_label, quantity, &series)?;
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
