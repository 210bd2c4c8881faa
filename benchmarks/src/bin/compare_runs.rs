//! Finished runs side by side: one row per run directory (`train --out`, or a paper
//! table's job directories) with its final metric and the difference to the first run,
//! the bytes it sent and its compression ratios, and its time; and the run directory's
//! four charts with one series per run (`metric_by_epoch`, `metric_by_bytes`,
//! `loss_by_epoch`, `loss_by_bytes`, as PNG and SVG). Writes `compare.csv`,
//! `compare.json` and the charts into `--out`.
//!
//! The runs must report one metric (accuracy, perplexity or word error rate); anything
//! else may differ (methods, models, worker counts), and the table says what each was.

use anyhow::{bail, Context, Result};
use benchmarks::table::{self, Job};
use clap::Parser;
use serde_json::{json, Value};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    about = "Finished training runs side by side: final metric and its difference to the first run, bytes sent, compression ratios, time; learning curves against epoch and bytes sent, one series per run"
)]
struct Args {
    /// Run directories (what `train --out` names; the first is the reference of the
    /// difference column).
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// The runs' names in the table and the charts, comma-separated, one per run
    /// (default: the directories' names).
    #[arg(long, value_delimiter = ',')]
    labels: Vec<String>,
    /// Also give the ratios over the steps after this epoch (DGC's ratio once its
    /// sparsity warm-up is over).
    #[arg(long)]
    after_epoch: Option<f64>,
    /// Where compare.csv, compare.json and the charts go.
    #[arg(long, default_value = "runs/compare")]
    out: PathBuf,
    /// Print the rows as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// The CSV's columns, in order.
const COLUMNS: [&str; 17] = [
    "run",
    "dir",
    "method",
    "model",
    "dataset",
    "workers",
    "steps",
    "metric_name",
    "metric",
    "diff",
    "bytes_sent",
    "compression_ratio",
    "message_compression_ratio",
    "compression_ratio_after",
    "message_compression_ratio_after",
    "wall_seconds",
    "mean_step_seconds",
];

fn main() {
    benchmarks::exit_on_error(run());
}

fn run() -> Result<()> {
    let args = Args::parse();
    if !args.labels.is_empty() && args.labels.len() != args.runs.len() {
        bail!(
            "--labels names {} runs, but {} run directories were given",
            args.labels.len(),
            args.runs.len()
        );
    }
    if let Some(e) = args.after_epoch {
        if !(e.is_finite() && e >= 0.0) {
            bail!("--after-epoch must be a number of epochs, at least 0");
        }
    }
    let jobs: Vec<Job> = args
        .runs
        .iter()
        .map(|d| Job::read(d))
        .collect::<Result<_>>()?;
    let metric = |j: &Job| j.summary["metric_name"].as_str().unwrap_or("").to_string();
    let name = metric(&jobs[0]);
    if let Some((i, other)) = jobs.iter().enumerate().find(|(_, j)| metric(j) != name) {
        bail!(
            "{} reports {name} but {} reports {}: compare runs of one task",
            args.runs[0].display(),
            args.runs[i].display(),
            metric(other)
        );
    }
    let labels: Vec<String> = if args.labels.is_empty() {
        args.runs
            .iter()
            .map(|d| {
                d.file_name()
                    .map_or_else(|| d.display().to_string(), |n| n.to_string_lossy().into())
            })
            .collect()
    } else {
        args.labels.clone()
    };
    // Two rows or chart series of one name could not be told apart.
    for (i, l) in labels.iter().enumerate() {
        if let Some(j) = labels[..i].iter().position(|m| m == l) {
            bail!(
                "{} and {} are both named {l:?}: name the runs with --labels",
                args.runs[j].display(),
                args.runs[i].display()
            );
        }
    }
    let reference = jobs[0].final_metric();
    let rows: Vec<Value> = jobs
        .iter()
        .zip(&labels)
        .map(|(j, label)| {
            let s = &j.summary;
            let m = j.final_metric();
            json!({
                "run": label,
                "dir": j.dir.display().to_string(),
                "method": s["method"],
                "method_config": s["method_config"],
                "model": s["model"],
                "dataset": s["dataset"],
                "workers": s["workers"],
                "steps": s["steps"],
                "metric_name": name,
                "metric": m,
                "diff": m.zip(reference).map(|(a, b)| a - b),
                "bytes_sent": s["bytes_sent"],
                "compression_ratio": s["compression_ratio"],
                "message_compression_ratio": s["message_compression_ratio"],
                "compression_ratio_after": args.after_epoch.and_then(|e| j.ratio_after(e)),
                "message_compression_ratio_after":
                    args.after_epoch.and_then(|e| j.message_ratio_after(e)),
                "wall_seconds": s["wall_seconds"],
                "mean_step_seconds": s["mean_step_seconds"],
            })
        })
        .collect();
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    table::write_rows(&args.out, "compare", &rows, &COLUMNS)?;
    let runs: Vec<(Option<&str>, &[Value])> = labels
        .iter()
        .zip(&jobs)
        .map(|(l, j)| (Some(l.as_str()), j.records.as_slice()))
        .collect();
    train::plot::learning_charts(&args.out, &name, &runs)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print_table(&rows, &name, args.after_epoch);
        println!("\nwritten: {}", args.out.display());
    }
    Ok(())
}

/// A column of the printed table: its header and its cell of a row.
type Column<'a> = (String, Box<dyn Fn(&Value) -> String + 'a>);

fn print_table(rows: &[Value], metric: &str, after: Option<f64>) {
    let num = |k: &'static str, d: usize| -> Box<dyn Fn(&Value) -> String> {
        Box::new(move |r| table::cell(r[k].as_f64(), d))
    };
    let text = |k: &'static str| -> Box<dyn Fn(&Value) -> String> {
        Box::new(move |r| r[k].as_str().unwrap_or("-").to_string())
    };
    // Accuracy and word error rate are fractions; perplexity is in the tens and hundreds.
    let decimals = if metric == "perplexity" { 2 } else { 4 };
    let mut columns: Vec<Column> = vec![
        ("run".into(), text("run")),
        ("method".into(), text("method")),
        ("model".into(), text("model")),
        ("workers".into(), num("workers", 0)),
        ("steps".into(), num("steps", 0)),
        (metric.into(), num("metric", decimals)),
        ("diff".into(), num("diff", decimals)),
        (
            "MB sent".into(),
            Box::new(|r: &Value| table::cell(r["bytes_sent"].as_f64().map(|b| b / 1e6), 2)),
        ),
        ("ratio".into(), num("compression_ratio", 1)),
        ("message ratio".into(), num("message_compression_ratio", 1)),
    ];
    if let Some(e) = after {
        columns.push((
            format!("ratio after epoch {e}"),
            num("compression_ratio_after", 1),
        ));
        columns.push((
            format!("message ratio after epoch {e}"),
            num("message_compression_ratio_after", 1),
        ));
    }
    columns.push(("wall s".into(), num("wall_seconds", 1)));
    let header: Vec<String> = columns.iter().map(|(h, _)| h.clone()).collect();
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| columns.iter().map(|(_, cell)| cell(r)).collect())
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            lines
                .iter()
                .map(|l| l[c].chars().count())
                .chain([header[c].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let show = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                if i < 3 {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    show(&header);
    for l in &lines {
        show(l);
    }
}
