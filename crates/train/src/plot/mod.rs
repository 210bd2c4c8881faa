//! Line charts of a run: loss and metric against epoch and against bytes sent (on a log
//! axis when runs charted together sent bytes orders of magnitude apart), and the paper
//! tables' learning curves. Every chart is written twice: as PNG (plotters' bitmap
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

/// Series colours shared by both formats (matplotlib's first six, then the rest of its
/// ten: `time_to_accuracy` charts nine rows together).
pub(crate) const COLORS: [(u8, u8, u8); 10] = [
    (0x1f, 0x77, 0xb4),
    (0xd6, 0x27, 0x28),
    (0x2c, 0xa0, 0x2c),
    (0x94, 0x67, 0xbd),
    (0xff, 0x7f, 0x0e),
    (0x8c, 0x56, 0x4b),
    (0xe3, 0x77, 0xc2),
    (0x7f, 0x7f, 0x7f),
    (0xbc, 0xbd, 0x22),
    (0x17, 0xbe, 0xcf),
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

/// How the x axis maps values to positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// log₁₀: points at x ≤ 0 are left out; ticks are labelled with the values.
    Log,
}

impl Scale {
    /// The label of the tick at plotted position `v`, ticks `step` apart in that space.
    pub(crate) fn label(self, v: f64, step: f64) -> String {
        match self {
            Scale::Linear => label(v, step),
            // Two significant digits of the value: 10^7.25 is "18M".
            Scale::Log => {
                let x = 10f64.powf(v);
                label(x, x / 10.0)
            }
        }
    }
}

/// The files a chart of `stem` is written to: `stem.png` and `stem.svg` (any extension on
/// `stem` replaced).
pub fn chart_files(stem: &Path) -> [std::path::PathBuf; 2] {
    [stem.with_extension("png"), stem.with_extension("svg")]
}

/// Writes one chart of `series` as its [`chart_files`].
pub fn line_chart(
    stem: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<()> {
    line_chart_scaled(stem, title, x_label, y_label, series, Scale::Linear)
}

/// [`line_chart`] with the x axis on `x_scale`; a log axis says so in its label.
pub fn line_chart_scaled(
    stem: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    x_scale: Scale,
) -> Result<()> {
    let logged: Vec<Series>;
    let log_label;
    let (series, x_label) = match x_scale {
        Scale::Linear => (series, x_label),
        Scale::Log => {
            logged = series
                .iter()
                .map(|s| Series {
                    name: s.name.clone(),
                    points: s
                        .points
                        .iter()
                        .filter(|p| p.0 > 0.0)
                        .map(|&(x, y)| (x.log10(), y))
                        .collect(),
                })
                .collect();
            log_label = format!("{x_label}, log scale");
            (&logged[..], log_label.as_str())
        }
    };
    let [png_path, svg_path] = chart_files(stem);
    let text = svg::render(title, x_label, y_label, series, x_scale);
    crate::metrics::write_atomic(&svg_path, text.as_bytes())
        .with_context(|| format!("plotting {}", svg_path.display()))?;
    let bytes = png::render(title, x_label, y_label, series, x_scale, font::family())
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

/// The x key of the bytes charts. Their axis is logarithmic when the runs charted
/// together end [`LOG_APART`]× or more apart (a dense run beside a compressed one),
/// linear otherwise.
const BYTES_X: &str = "bytes_sent";

/// The ratio of the runs' largest x values from which a bytes chart draws its x axis on
/// a log scale: at 100× (DGC beside dense) a linear axis squeezes the compressed runs
/// into the first percent of the width.
pub const LOG_APART: f64 = 20.0;

/// The x scale for `series` charted together: [`Scale::Log`] when their largest x values
/// are positive and [`LOG_APART`]× or more apart.
pub fn scale_for(series: &[Series]) -> Scale {
    let ends: Vec<f64> = series
        .iter()
        .filter_map(|s| {
            s.points
                .iter()
                .map(|p| p.0)
                .filter(|x| x.is_finite())
                .reduce(f64::max)
        })
        .collect();
    let lo = ends.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ends.iter().copied().fold(0.0, f64::max);
    if lo > 0.0 && hi / lo >= LOG_APART {
        Scale::Log
    } else {
        Scale::Linear
    }
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
        x: BYTES_X,
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
        x: BYTES_X,
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
        let scale = if c.x == BYTES_X {
            scale_for(&series)
        } else {
            Scale::Linear
        };
        line_chart_scaled(
            &dir.join(c.stem),
            title,
            c.x_label,
            quantity,
            &series,
            scale,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{label, line_chart_scaled, scale_for, Scale, Series};

    fn run(name: &str, last_x: f64) -> Series {
        Series {
            name: name.into(),
            points: (1..=10)
                .map(|i| (last_x * i as f64 / 10.0, 1.0 / i as f64))
                .collect(),
        }
    }

    #[test]
    fn bytes_axes_turn_logarithmic_only_for_runs_far_apart() {
        // One run alone: its bytes grow linearly with the steps.
        assert_eq!(scale_for(&[run("dense", 5e9)]), Scale::Linear);
        assert_eq!(
            scale_for(&[run("dense", 5e9), run("topk", 1e9)]),
            Scale::Linear
        );
        assert_eq!(scale_for(&[run("dense", 5e9), run("dgc", 2e7)]), Scale::Log);
        // A run that sent nothing (one worker) keeps the axis linear.
        assert_eq!(
            scale_for(&[run("dense", 5e9), run("alone", 0.0)]),
            Scale::Linear
        );
        assert_eq!(scale_for(&[]), Scale::Linear);
    }

    #[test]
    fn log_ticks_are_labelled_with_values() {
        assert_eq!(Scale::Log.label(7.0, 0.5), "10M");
        assert_eq!(Scale::Log.label(7.25, 0.5), "18M");
        assert_eq!(Scale::Log.label(9.5, 0.5), "3.2G");
        assert_eq!(Scale::Linear.label(3e6, 1e6), "3M");
    }

    #[test]
    fn a_log_chart_leaves_out_points_at_zero_and_spans_both_runs() {
        let dir = std::env::temp_dir().join(format!("plot-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut dgc = run("dgc", 2e7);
        dgc.points.insert(0, (0.0, 2.0));
        let series = [run("dense", 5e9), dgc];
        line_chart_scaled(&dir.join("c"), "loss", "bytes", "loss", &series, Scale::Log)
            .expect("chart");
        let svg = std::fs::read_to_string(dir.join("c.svg")).expect("svg");
        std::fs::remove_dir_all(&dir).ok();
        // The axis runs from dgc's first point (2M) to dense's last (5G): its end ticks.
        assert!(svg.contains(">2.0M<") && svg.contains(">5.0G<"), "{svg}");
        assert!(svg.contains(">bytes, log scale<"), "{svg}");
        // Ten points per run drawn, the one at x = 0 left out.
        assert_eq!(svg.matches("<circle").count(), 20);
    }

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
