//! Line charts as SVG, written without a plotting dependency: a run's loss and metric
//! against epoch and against bytes sent, and the paper tables' learning curves. SVG
//! opens in any browser and diffs as text.

use anyhow::{Context, Result};
use std::path::Path;

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    (0..=4).map(|k| lo + (hi - lo) * k as f64 / 4.0).collect()
}

fn label(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// Writes one chart of `series` to `path`.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<()> {
    let (w, h, m) = (640.0, 400.0, 60.0);
    let pts = || {
        series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|p| p.0.is_finite() && p.1.is_finite())
    };
    let (x0, x1) = pts().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (y0, y1) = pts().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let (x0, x1) = if x0 < x1 {
        (x0, x1)
    } else {
        (x0.min(0.0), x0.max(0.0) + 1.0)
    };
    let pad = ((y1 - y0) * 0.05).max(1e-9);
    let (y0, y1) = if y0 < y1 {
        (y0 - pad, y1 + pad)
    } else {
        (y0 - 1.0, y0 + 1.0)
    };
    let x = |v: f64| m + (w - 2.0 * m) * (v - x0) / (x1 - x0);
    let y = |v: f64| h - m - (h - 2.0 * m) * (v - y0) / (y1 - y0);
    let mut s = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n<text x='{}' y='20' text-anchor='middle' font-size='14'>{title}</text>\n",
        w / 2.0
    );
    s += &format!("<line x1='{m}' y1='{b}' x2='{r}' y2='{b}' stroke='black'/><line x1='{m}' y1='{m}' x2='{m}' y2='{b}' stroke='black'/>\n", b = h - m, r = w - m);
    s += &format!(
        "<text x='{}' y='{}' text-anchor='middle'>{x_label}</text>\n",
        w / 2.0,
        h - 15.0
    );
    s += &format!("<text x='15' y='{c}' transform='rotate(-90 15 {c})' text-anchor='middle'>{y_label}</text>\n", c = h / 2.0);
    for t in ticks(y0, y1) {
        s += &format!(
            "<text x='{}' y='{}' text-anchor='end'>{}</text>\n",
            m - 5.0,
            y(t) + 4.0,
            label(t)
        );
    }
    for t in ticks(x0, x1) {
        s += &format!(
            "<text x='{}' y='{}' text-anchor='middle'>{}</text>\n",
            x(t),
            h - m + 16.0,
            label(t)
        );
    }
    for (i, se) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let d: Vec<String> = se
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .map(|(a, b)| format!("{:.1},{:.1}", x(*a), y(*b)))
            .collect();
        s += &format!(
            "<polyline fill='none' stroke='{c}' stroke-width='2' points='{}'/>\n",
            d.join(" ")
        );
        s += &format!(
            "<text x='{}' y='{}' fill='{c}'>{}</text>\n",
            w - m - 160.0,
            m + 16.0 * i as f64,
            se.name
        );
    }
    s += "</svg>\n";
    crate::metrics::write_atomic(path, s.as_bytes())
        .with_context(|| format!("plotting {}", path.display()))
}

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
    let one = |name: &str, pts| {
        vec![Series {
            name: name.to_string(),
            points: pts,
        }]
    };
    line_chart(
        &dir.join("loss_by_epoch.svg"),
        "training loss",
        "epoch",
        "loss",
        &one("loss", get("step", "epoch", "loss")),
    )?;
    line_chart(
        &dir.join("loss_by_bytes.svg"),
        "training loss",
        "bytes sent (this rank)",
        "loss",
        &one("loss", get("step", "bytes_sent", "loss")),
    )?;
    line_chart(
        &dir.join("metric_by_epoch.svg"),
        metric_name,
        "epoch",
        metric_name,
        &one(metric_name, get("eval", "epoch", "metric")),
    )?;
    line_chart(
        &dir.join("metric_by_bytes.svg"),
        metric_name,
        "bytes sent (this rank)",
        metric_name,
        &one(metric_name, get("eval", "bytes_sent", "metric")),
    )?;
    Ok(())
}
