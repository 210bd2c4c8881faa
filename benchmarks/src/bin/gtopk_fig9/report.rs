//! Figure 9's report: the rows of both panels from the paper's model, this machine's
//! fitted one and the measurements, the claims judged on them, the charts, and the
//! printed tables.

use super::{pairs, predict, Args, Measured, SPARSE};
use anyhow::{Context, Result};
use benchmarks::{table, verdict};
use comm::AlphaBeta;
use serde_json::{json, Value};

/// The measured time (and that job's model) of `collective` at (`panel`, `bytes`) in the
/// job of `world` workers, if one ran.
fn lookup<'a>(
    measured: &'a [Measured],
    world: usize,
    panel: &str,
    collective: &str,
    bytes: usize,
) -> Option<&'a Value> {
    measured
        .iter()
        .find(|m| m.world == world)?
        .rows
        .iter()
        .find(|r| r["panel"] == panel && r["collective"] == collective && r["bytes"] == bytes)
}

/// `key` of the report row at (`panel`, `world`, `bytes`, `collective`).
fn point_value(
    rows: &[Value],
    panel: &str,
    world: usize,
    bytes: usize,
    collective: &str,
    key: &str,
) -> Option<f64> {
    rows.iter()
        .find(|r| {
            r["panel"] == panel
                && r["world"] == world
                && r["bytes"] == bytes
                && r["collective"] == collective
        })
        .and_then(|r| r[key].as_f64())
}

fn ms(v: Option<f64>) -> String {
    table::cell(v.map(|s| s * 1e3), 2)
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? / b?)
}

/// The paper's claims (Fig. 9 and §VI-C: TopKAllReduce is "slightly faster" with few
/// workers, gTopKAllReduce "much more efficient" with many and with large messages), on
/// three gTopK rows: the left panel at `--right-world` workers (the paper's model gives
/// 2.6x there), judged by this machine's fitted model; the left panel at the largest
/// measured world, judged by the measurement; the right panel's largest message, judged
/// by the fitted model against its smallest. Other rows claim nothing.
fn claim(r: &Value, rows: &[Value], args: &Args, fit_world: usize) -> verdict::Verdict {
    if r["collective"] != SPARSE[1] {
        return verdict::Verdict::none();
    }
    let t_over_g = |panel: &str, w: usize, bytes: usize, key: &str| {
        ratio(
            point_value(rows, panel, w, bytes, SPARSE[0], key),
            point_value(rows, panel, w, bytes, SPARSE[1], key),
        )
    };
    let (world, bytes) = (r["world"].as_u64().map(|w| w as usize), r["bytes"].as_u64());
    let (smallest, largest) = (args.sizes.iter().min(), args.sizes.iter().max());
    match (r["panel"].as_str(), world) {
        (Some("left"), Some(w)) if w == args.right_world => verdict::Verdict::of(
            format!("gTopKAllReduce at least 2x faster than TopKAllReduce at {w} workers (Fig. 9 left; the paper's model: 2.6x), in this machine's model"),
            t_over_g("left", w, args.size, "our_model_s").map(|x| x >= 2.0),
        ),
        (Some("left"), Some(w)) if w == fit_world => verdict::Verdict::of(
            format!("gTopKAllReduce no slower than TopKAllReduce at {w} local workers, measured"),
            t_over_g("left", w, args.size, "measured_s").map(|x| x >= 1.0),
        ),
        (Some("right"), Some(w))
            if w == args.right_world && bytes == largest.map(|&b| b as u64) =>
        {
            let (Some(&lo), Some(&hi)) = (smallest, largest) else {
                return verdict::Verdict::none();
            };
            verdict::Verdict::of(
                format!("gTopKAllReduce's lead over TopKAllReduce grows with the message at {w} workers (Fig. 9 right), in this machine's model"),
                t_over_g("right", w, hi, "our_model_s")
                    .zip(t_over_g("right", w, lo, "our_model_s"))
                    .map(|(h, l)| h > l),
            )
        }
        _ => verdict::Verdict::none(),
    }
}

/// What the printed tables need besides the rows: both models, the fitted model's
/// world and the left panel's worlds.
struct Models {
    paper: AlphaBeta,
    ours: AlphaBeta,
    fit_world: usize,
    worlds: Vec<usize>,
}

/// Writes the rows (`fig9.csv`, `fig9.json`) and the charts, and prints the rows as JSON
/// or the two panels' tables with the claims.
pub(super) fn report(args: &Args, measured: &[Measured]) -> Result<()> {
    let (rows, cx) = rows(args, measured)?;
    write_charts(args, &cx.worlds, cx.fit_world, &rows)?;
    if args.json {
        println!("{}", Value::Array(rows));
        return Ok(());
    }
    print_left(args, &rows, &cx);
    print_right(args, &rows, &cx);
    println!();
    verdict::print_claims(&rows, |r| {
        format!(
            "{} panel, {} workers, {} bytes",
            r["panel"].as_str().unwrap_or(""),
            r["world"],
            r["bytes"]
        )
    });
    println!(
        "\nwrote {} (fig9.csv, fig9.json, fig9_{{left,right}}_{{paper,here}}.png/.svg)",
        args.out.display()
    );
    Ok(())
}

/// Every (panel, world, size, collective) point with both models and, where a job ran,
/// its measurement, each with its claim; written to `fig9.csv` and `fig9.json`.
fn rows(args: &Args, measured: &[Measured]) -> Result<(Vec<Value>, Models)> {
    let paper = AlphaBeta {
        alpha: args.paper_alpha,
        beta: args.paper_beta,
    };
    let here = measured
        .iter()
        .max_by_key(|m| m.world)
        .context("nothing was measured")?;
    let (ours, fit_world) = (here.fit, here.world);
    let mut worlds: Vec<usize> = args
        .model_worlds
        .iter()
        .chain(measured.iter().map(|m| &m.world))
        .copied()
        .collect();
    worlds.sort_unstable();
    worlds.dedup();

    let mut rows: Vec<Value> = Vec::new();
    let mut point = |panel: &str, world: usize, bytes: usize, collective: &str| {
        let k = pairs(bytes, args.density);
        let m = lookup(measured, world, panel, collective, bytes);
        rows.push(json!({
            "panel": panel, "world": world, "bytes": bytes,
            "k": if collective == "allreduce" { None } else { Some(k) },
            "collective": collective,
            "paper_model_s": predict(&paper, collective, world, bytes, k),
            "our_model_s": predict(&ours, collective, world, bytes, k),
            "measured_s": m.map(|r| r["measured_s"].clone()),
            "measured_job_model_s": m.map(|r| r["model_s"].clone()),
        }));
    };
    for &w in &worlds {
        for c in ["allreduce", SPARSE[0], SPARSE[1]] {
            point("left", w, args.size, c);
        }
    }
    let mut right_worlds = vec![args.right_world, fit_world];
    right_worlds.dedup();
    for &w in &right_worlds {
        for &bytes in &args.sizes {
            for c in SPARSE {
                point("right", w, bytes, c);
            }
        }
    }
    let verdicts: Vec<verdict::Verdict> = rows
        .iter()
        .map(|r| claim(r, &rows, args, fit_world))
        .collect();
    for (r, v) in rows.iter_mut().zip(verdicts) {
        v.judged_if(!args.smoke).put(r);
    }
    table::write_rows(
        &args.out,
        "fig9",
        &rows,
        &[
            "panel",
            "world",
            "bytes",
            "k",
            "collective",
            "paper_model_s",
            "our_model_s",
            "measured_s",
            "measured_job_model_s",
            "claim",
            "holds",
        ],
    )?;
    let cx = Models {
        paper,
        ours,
        fit_world,
        worlds,
    };
    Ok((rows, cx))
}

/// The left panel: the time of each collective against the workers, at `--size`.
fn print_left(args: &Args, rows: &[Value], cx: &Models) {
    let Models {
        paper,
        ours,
        fit_world,
        worlds,
    } = cx;
    let get = |panel: &str, w: usize, bytes: usize, c: &str, key: &str| {
        point_value(rows, panel, w, bytes, c, key)
    };
    let m = args.size;
    println!(
        "gTop-k, Figure 9 (left): {:.1} MB of gradient, density {} (k = {} pairs per worker); times in ms",
        m as f64 / 1e6,
        args.density,
        pairs(m, args.density)
    );
    let describe = |ab: &AlphaBeta| {
        format!(
            "alpha = {:.3} ms, beta = {:.3} ns/byte ({:.2} Gbit/s)",
            ab.alpha * 1e3,
            ab.beta * 1e9,
            8.0 / ab.beta.max(f64::MIN_POSITIVE) / 1e9
        )
    };
    println!("the paper's 1 GbE model: {}", describe(paper));
    println!(
        "fitted here ({fit_world} workers, all pairs at once): {}",
        describe(ours)
    );
    println!(
        "\n{:>7} | {:^33} | {:^33} | {:^33} | {:^13}",
        "", "the paper's model", "this machine's model", "measured here", "meas./model"
    );
    println!(
        "{:>7} | {:>9} {:>8} {:>8} {:>5} | {:>9} {:>8} {:>8} {:>5} | {:>9} {:>8} {:>8} {:>5} | {:>6} {:>6}",
        "workers", "dense", "TopK", "gTopK", "T/g", "dense", "TopK", "gTopK", "T/g", "dense", "TopK", "gTopK", "T/g", "TopK", "gTopK"
    );
    for &w in worlds {
        let g = |c: &str, key: &str| get("left", w, m, c, key);
        let trio = |key: &str| {
            let (t, gt) = (g(SPARSE[0], key), g(SPARSE[1], key));
            format!(
                "{:>9} {:>8} {:>8} {:>5}",
                ms(g("allreduce", key)),
                ms(t),
                ms(gt),
                table::cell(ratio(t, gt), 2)
            )
        };
        let vs = |c: &str| table::cell(ratio(g(c, "measured_s"), g(c, "measured_job_model_s")), 2);
        println!(
            "{w:>7} | {} | {} | {} | {:>6} {:>6}",
            trio("paper_model_s"),
            trio("our_model_s"),
            trio("measured_s"),
            vs(SPARSE[0]),
            vs(SPARSE[1])
        );
    }
    for (name, key) in [
        ("the paper's model", "paper_model_s"),
        ("this machine's model", "our_model_s"),
    ] {
        let t_over_g = |w: usize| {
            ratio(
                get("left", w, m, SPARSE[0], key),
                get("left", w, m, SPARSE[1], key),
            )
        };
        let crossover = worlds
            .iter()
            .find(|&&w| t_over_g(w).is_some_and(|r| r > 1.0))
            .map_or("never, up to these worlds".to_string(), |w| {
                format!("from {w} workers")
            });
        println!(
            "{name}: gTopK faster than TopK {crossover}; TopK / gTopK at 32 workers = {}",
            table::cell(t_over_g(32), 2)
        );
    }
    println!(
        "(paper 002: 'when the number of workers is small, TopKAllReduce is slightly faster than gTopKAllReduce; when the number of workers scales to 32, TopKAllReduce becomes much worse')"
    );
}

/// The right panel: the time of each sparse collective against the message size.
fn print_right(args: &Args, rows: &[Value], cx: &Models) {
    let fit_world = cx.fit_world;
    let get = |panel: &str, w: usize, bytes: usize, c: &str, key: &str| {
        point_value(rows, panel, w, bytes, c, key)
    };
    println!(
        "\ngTop-k, Figure 9 (right): the message size; the model with {} workers, measured with {fit_world}; times in ms",
        args.right_world
    );
    let rw = args.right_world;
    println!(
        "{:>9} {:>8} | {:^23} | {:^23} | {:^23} | {:^17}",
        "",
        "",
        format!("paper's model, {rw}"),
        format!("our model, {rw}"),
        format!("measured, {fit_world}"),
        format!("our model, {fit_world}")
    );
    println!(
        "{:>9} {:>8} | {:>8} {:>8} {:>5} | {:>8} {:>8} {:>5} | {:>8} {:>8} {:>5} | {:>8} {:>8}",
        "MB",
        "k",
        "TopK",
        "gTopK",
        "T/g",
        "TopK",
        "gTopK",
        "T/g",
        "TopK",
        "gTopK",
        "T/g",
        "TopK",
        "gTopK"
    );
    for &bytes in &args.sizes {
        let g = |w: usize, c: &str, key: &str| get("right", w, bytes, c, key);
        let pair = |w: usize, key: &str| {
            let (t, gt) = (g(w, SPARSE[0], key), g(w, SPARSE[1], key));
            format!(
                "{:>8} {:>8} {:>5}",
                ms(t),
                ms(gt),
                table::cell(ratio(t, gt), 2)
            )
        };
        println!(
            "{:>9.1} {:>8} | {} | {} | {} | {:>8} {:>8}",
            bytes as f64 / 1e6,
            pairs(bytes, args.density),
            pair(rw, "paper_model_s"),
            pair(rw, "our_model_s"),
            pair(fit_world, "measured_s"),
            ms(g(fit_world, SPARSE[0], "measured_job_model_s")),
            ms(g(fit_world, SPARSE[1], "measured_job_model_s")),
        );
    }
}

/// The four charts: each panel once from the paper's model (the figure as published) and
/// once from this machine (its fitted model and the measurements), in milliseconds.
fn write_charts(args: &Args, worlds: &[usize], fit_world: usize, rows: &[Value]) -> Result<()> {
    let get = |panel: &str, w: usize, bytes: usize, c: &str, key: &str| {
        point_value(rows, panel, w, bytes, c, key)
    };
    use train::plot::{line_chart, Series};
    let series = |name: String, points: Vec<(f64, Option<f64>)>| Series {
        name,
        points: points
            .into_iter()
            .filter_map(|(x, y)| Some((x, y? * 1e3)))
            .collect(),
    };
    let left = |c: &str, key: &str| {
        series(
            format!(
                "{} ({})",
                if c == SPARSE[0] { "TopK" } else { "gTopK" },
                match key {
                    "paper_model_s" => "paper's model",
                    "our_model_s" => "fitted model",
                    _ => "measured",
                }
            ),
            worlds
                .iter()
                .map(|&w| (w as f64, get("left", w, args.size, c, key)))
                .collect(),
        )
    };
    let right = |w: usize, c: &str, key: &str| {
        series(
            format!(
                "{} ({}, {w} workers)",
                if c == SPARSE[0] { "TopK" } else { "gTopK" },
                match key {
                    "paper_model_s" => "paper's model",
                    "our_model_s" => "fitted model",
                    _ => "measured",
                }
            ),
            args.sizes
                .iter()
                .map(|&b| (b as f64 / 1e6, get("right", w, b, c, key)))
                .collect(),
        )
    };
    let out = &args.out;
    let mb = args.size as f64 / 1e6;
    line_chart(
        &out.join("fig9_left_paper"),
        &format!(
            "Fig. 9 left, paper's alpha-beta: {mb:.0} MB, density {}",
            args.density
        ),
        "workers",
        "ms",
        &[
            left(SPARSE[0], "paper_model_s"),
            left(SPARSE[1], "paper_model_s"),
        ],
    )?;
    line_chart(
        &out.join("fig9_left_here"),
        &format!(
            "Fig. 9 left, this machine: {mb:.0} MB, density {}",
            args.density
        ),
        "workers",
        "ms",
        &[
            left(SPARSE[0], "our_model_s"),
            left(SPARSE[1], "our_model_s"),
            left(SPARSE[0], "measured_s"),
            left(SPARSE[1], "measured_s"),
        ],
    )?;
    let rw = args.right_world;
    line_chart(
        &out.join("fig9_right_paper"),
        &format!("Fig. 9 right, paper's alpha-beta: {rw} workers"),
        "MB",
        "ms",
        &[
            right(rw, SPARSE[0], "paper_model_s"),
            right(rw, SPARSE[1], "paper_model_s"),
        ],
    )?;
    line_chart(
        &out.join("fig9_right_here"),
        &format!("Fig. 9 right, this machine: {fit_world} workers"),
        "MB",
        "ms",
        &[
            right(fit_world, SPARSE[0], "our_model_s"),
            right(fit_world, SPARSE[1], "our_model_s"),
            right(fit_world, SPARSE[0], "measured_s"),
            right(fit_world, SPARSE[1], "measured_s"),
        ],
    )
}
