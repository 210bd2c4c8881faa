//! The table's rows, files, printed tables and verdicts: each cell's time to the target
//! beside DDP's fastest row at the same rate, and whether compression pays there.

use super::{rate_dir, Cell, Rate, Task};
use anyhow::Result;
use benchmarks::{table, verdict};
use serde_json::{json, Value};
use std::path::Path;

/// The CSV's columns, in order.
const COLUMNS: &[&str] = &[
    "task",
    "rate",
    "row",
    "system",
    "target",
    "reached_seconds",
    "vs_ddp_best",
    "ddp_best",
    "final_metric",
    "steps_per_second",
    "bytes_per_step",
    "compute_ms",
    "compress_ms",
    "comm_ms",
    "idle_ms",
    "skipped",
    "claim",
    "holds",
];

/// DDP's fastest row to the target at `rate`: (label, seconds).
fn ddp_best<'a>(cells: &'a [Cell], rate: &str) -> Option<(&'a str, f64)> {
    cells
        .iter()
        .filter(|c| c.rate == rate && c.system == "pytorch-ddp")
        .filter_map(|c| Some((c.row.as_str(), c.reached_seconds?)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// Our fastest compressed row (every row but dense f32) to the target at `rate`.
fn ours_best<'a>(cells: &'a [Cell], rate: &str) -> Option<(&'a str, f64)> {
    cells
        .iter()
        .filter(|c| c.rate == rate && c.system == "ours" && c.row != "dense")
        .filter_map(|c| Some((c.row.as_str(), c.reached_seconds?)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// The goal a row is judged against, if any: at 100 Mbit/s our fastest compressed row
/// within `pays` (0.5 for ResNet-20, 0.3 for the LSTM) of DDP's fastest; unshaped, our
/// dense f32 within 1.0x of DDP without a hook.
fn goal(task: &Task, cells: &[Cell], c: &Cell) -> verdict::Verdict {
    let pays = if task.name == "lstm" { 0.3 } else { 0.5 };
    if c.system == "ours"
        && c.rate == "100mbit"
        && ours_best(cells, &c.rate).is_some_and(|b| b.0 == c.row)
    {
        let best = ddp_best(cells, &c.rate);
        let holds = c.reached_seconds.zip(best).map(|(s, b)| s <= pays * b.1);
        return verdict::Verdict::of(
            format!("our best compressed row <= {pays}x DDP's best at 100 Mbit/s"),
            holds,
        );
    }
    if c.system == "ours" && c.row == "dense" && c.rate.starts_with("unshaped") {
        let ddp = cells
            .iter()
            .find(|d| d.rate == c.rate && d.row == "ddp")
            .and_then(|d| d.reached_seconds);
        let holds = c.reached_seconds.zip(ddp).map(|(s, d)| s <= d);
        return verdict::Verdict::of("unshaped, dense f32 <= 1.0x DDP's (no hook)", holds);
    }
    verdict::Verdict::none()
}

/// One JSON row per cell.
pub fn rows(task: &Task, cells: &[Cell], judge: bool) -> Vec<Value> {
    cells
        .iter()
        .map(|c| {
            let best = ddp_best(cells, &c.rate);
            let ms = |i: usize| c.split.map(|s| s[i] * 1e3);
            let mut row = json!({
                "task": task.name,
                "rate": c.rate,
                "row": c.row,
                "system": c.system,
                "target": task.target,
                "reached_seconds": c.reached_seconds,
                "vs_ddp_best": c.reached_seconds.zip(best).map(|(s, b)| s / b.1),
                "ddp_best": best.map(|b| b.0),
                "final_metric": c.final_metric,
                "steps_per_second": c.steps_per_second,
                "bytes_per_step": c.bytes_per_step,
                "compute_ms": ms(0),
                "compress_ms": ms(1),
                "comm_ms": ms(2),
                "idle_ms": ms(3),
                "skipped": c.skipped,
                "curve": c.curve,
            });
            goal(task, cells, c).judged_if(judge).put(&mut row);
            row
        })
        .collect()
}

/// `{task}.csv`, `{task}.json` and a chart per rate, `{task}-{rate}.png`/`.svg`: the
/// metric against training seconds, one line per row.
pub fn write(
    out: &Path,
    task: &Task,
    rates: &[Rate],
    delay: Option<&str>,
    cells: &[Cell],
    rows: &[Value],
) -> Result<()> {
    table::write_rows(out, task.name, rows, COLUMNS)?;
    let metric = if task.lower_is_better {
        "test perplexity"
    } else {
        "test accuracy"
    };
    for rate in rates {
        let series: Vec<train::plot::Series> = cells
            .iter()
            .filter(|c| c.rate == rate.label && !c.curve.is_empty())
            .map(|c| train::plot::Series {
                name: c.row.clone(),
                points: c.curve.clone(),
            })
            .collect();
        let stem = out.join(format!("{}-{}", task.name, rate_dir(rate, delay)));
        let title = format!(
            "{}: {metric} against training time, {}",
            task.name, rate.label
        );
        train::plot::line_chart(
            &stem,
            &title,
            "training seconds (evaluations excluded)",
            metric,
            &series,
        )?;
    }
    Ok(())
}

/// The verdict at one rate: whether our fastest compressed row beats DDP's fastest row.
pub fn verdict_line(cells: &[Cell], rate: &str) -> String {
    match (ours_best(cells, rate), ddp_best(cells, rate)) {
        (Some(o), Some(d)) => {
            let r = o.1 / d.1;
            let pays = if r < 1.0 { "pays" } else { "does not pay" };
            format!("at {rate} compression {pays}: {} {:.2}x DDP's best ({}, {:.0} s)", o.0, r, d.0, d.1)
        }
        (Some(o), None) => format!("at {rate}: {} reached the target in {:.0} s; no DDP row did (or none ran)", o.0, o.1),
        (None, Some(d)) => format!("at {rate} compression does not pay: no compressed row of ours reached the target; DDP's best {} {:.0} s", d.0, d.1),
        (None, None) => format!("at {rate}: no row reached the target"),
    }
}

/// Prints the task's table (rows: methods of both systems; columns: rates; each cell the
/// time to the target, its ratio to DDP's best there and the final metric), the steady
/// step rates, our rows' step split, and a verdict per rate.
pub fn print(task: &Task, rates: &[Rate], cells: &[Cell], smoke: bool) {
    let direction = if task.lower_is_better { "<=" } else { ">=" };
    println!(
        "\n{}: seconds of training (evaluations excluded) to test {} {direction} {}, x DDP's best at that rate, final metric",
        task.name,
        if task.lower_is_better { "perplexity" } else { "accuracy" },
        task.target
    );
    print!("{:<14}", "row");
    for r in rates {
        print!(" {:>28}", r.label);
    }
    println!();
    let mut labels: Vec<&str> = Vec::new();
    for c in cells {
        if !labels.contains(&c.row.as_str()) {
            labels.push(&c.row);
        }
    }
    for label in &labels {
        print!("{label:<14}");
        for r in rates {
            let c = cells.iter().find(|c| c.row == *label && c.rate == r.label);
            let text = match c {
                None => "-".to_string(),
                Some(c) if c.skipped.is_some() => "skipped".to_string(),
                Some(c) => {
                    let ratio = c
                        .reached_seconds
                        .zip(ddp_best(cells, &r.label))
                        .map(|(s, b)| s / b.1);
                    format!(
                        "{} {} {}",
                        c.reached_seconds
                            .map_or("not reached".into(), |s| format!("{s:.0} s")),
                        ratio.map_or("".into(), |x| format!("{x:.2}x")),
                        table::cell(c.final_metric, 3)
                    )
                }
            };
            print!(" {text:>28}");
        }
        println!();
    }
    println!(
        "\nsteps/s after step 20, and our step's split (compute / compress / comm / idle, ms):"
    );
    for c in cells.iter().filter(|c| c.skipped.is_none()) {
        let split = c.split.map_or(String::new(), |s| {
            format!(
                "  {:.0} / {:.1} / {:.0} / {:.0}",
                s[0] * 1e3,
                s[1] * 1e3,
                s[2] * 1e3,
                s[3] * 1e3
            )
        });
        println!(
            "  {:<14} {:<22} {:>6} steps/s, {:>10} bytes/step{split}",
            c.row,
            c.rate,
            table::cell(c.steps_per_second, 2),
            table::cell(c.bytes_per_step, 0)
        );
    }
    for c in cells
        .iter()
        .filter_map(|c| c.skipped.as_ref().map(|w| (c, w)))
    {
        println!("  {} at {}: skipped: {}", c.0.row, c.0.rate, c.1);
    }
    if smoke {
        println!("\n(smoke: the pipeline, not a verdict)");
        return;
    }
    println!();
    for r in rates {
        println!("{}", verdict_line(cells, &r.label));
    }
}
