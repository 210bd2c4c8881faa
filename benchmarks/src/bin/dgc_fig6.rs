//! Figure 6 of the DGC paper: the speed-up of training on N nodes over one node, for
//! AlexNet and DeepSpeech with conventional (dense) training, TernGrad and Deep Gradient
//! Compression, on 1 Gbit/s (a) and 10 Gbit/s (b) Ethernet. The paper computes the figure
//! with a performance model (Wen et al., 2017): a profile of one training node plus an
//! analytical model of the communication. So does this binary, with its parts measured
//! here:
//!
//! - per model and method, one worker trains on synthetic data of the model's input shape
//!   for `--steps` steps (the first `--skip` untimed), the whole gradient as one vector
//!   (one bucket) and DGC at its final density 0.001 (no warm-up): its mean iteration
//!   (computation plus the method's compression) and its message bytes per step;
//! - the communication of N nodes in the α-β model (comm's `AlphaBeta`): dense, the ring
//!   allreduce of the 4-byte gradient; TernGrad and DGC, the allgather of each node's
//!   message (as this stack exchanges them; the paper's "density doubles at every
//!   aggregation step" of a sparse recursive-doubling allreduce costs the same bytes),
//!   with β = 8 ns per byte divided by the rate in Gbit/s (line rate) and α = `--alpha`
//!   (paper 002's measured 0.436 ms on 1 GbE);
//! - speed-up(N) = N × one node's dense iteration / (the method's iteration + its
//!   communication with N nodes).
//!
//! A node here is one worker; the paper's has 4 GPUs behind a PCI switch. Writes
//! `fig6.csv`, `fig6.json` and one chart per rate (`fig6_1gbps.png`, …) into `--out`.

use anyhow::{bail, ensure, Context, Result};
use benchmarks::{table, verdict};
use clap::Parser;
use comm::AlphaBeta;
use serde_json::{json, Value};
use std::path::PathBuf;
use train::Config;

#[derive(Parser)]
#[command(
    about = "The DGC paper's Figure 6: speed-up over one node of dense training, TernGrad and DGC on 1 and 10 Gbit/s Ethernet, from one measured node and the alpha-beta communication model"
)]
struct Args {
    /// quick (AlexNet at 16 images, DeepSpeech at 2 utterances, 5 steps), paper (a
    /// node's batch of the paper's 4-GPU nodes: AlexNet 256, DeepSpeech 32; 10 steps) or
    /// smoke (LeNet-5 in the figure's place, 2 images, 3 steps: seconds).
    #[arg(long, default_value = "quick")]
    preset: String,
    /// Models to profile: the figure's alexnet and deepspeech, or any model of the trainer.
    #[arg(long, value_delimiter = ',', default_value = "alexnet,deepspeech")]
    models: Vec<String>,
    /// Batch size of one node for every model (default: the preset's per model).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Steps of each one-node run (quick: 5; paper: 10).
    #[arg(long)]
    steps: Option<usize>,
    /// Steps at the start of each run left out of the timing.
    #[arg(long, default_value_t = 1)]
    skip: usize,
    /// Node counts of the figure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
    nodes: Vec<usize>,
    /// Link rates in Gbit/s, one panel each.
    #[arg(long, value_delimiter = ',', default_value = "1,10")]
    gbps: Vec<f64>,
    /// α of the model in seconds (paper 002's 1 GbE: 0.436 ms).
    #[arg(long, default_value_t = 0.436e-3)]
    alpha: f64,
    /// Where the runs, the table and the charts go.
    #[arg(long, default_value = "runs/dgc_fig6")]
    out: PathBuf,
    #[command(flatten)]
    common: table::CommonArgs,
}

/// The figure's three methods: our method name, its options, the paper's label.
const METHODS: [(&str, &[&str], &str); 3] = [
    ("dense", &[], "Baseline"),
    ("terngrad", &[], "TernGrad"),
    (
        "dgc",
        &["density=0.001", "warmup_epochs=0"],
        "Deep Gradient Compression",
    ),
];

fn steps(args: &Args) -> usize {
    args.steps
        .unwrap_or(if args.preset == "quick" { 5 } else { 10 })
}

fn batch(args: &Args, model: &str) -> usize {
    args.batch_size
        .unwrap_or(match (args.preset.as_str(), model) {
            ("quick", "deepspeech" | "an4_lstm") => 2,
            ("quick", _) => 16,
            (_, "deepspeech" | "an4_lstm") => 32,
            _ => 256,
        })
}

fn validate(args: &Args) -> Result<()> {
    ensure!(
        matches!(args.preset.as_str(), "quick" | "paper"),
        "--preset {}: expected smoke, quick or paper",
        args.preset
    );
    ensure!(!args.models.is_empty(), "--models needs at least one model");
    ensure!(
        !args.nodes.is_empty() && args.nodes.iter().all(|&n| n >= 1),
        "--nodes must be counts of at least 1"
    );
    ensure!(
        !args.gbps.is_empty() && args.gbps.iter().all(|&g| g > 0.0 && g.is_finite()),
        "--gbps must be positive rates"
    );
    ensure!(args.alpha >= 0.0, "--alpha must be >= 0");
    ensure!(
        args.batch_size != Some(0),
        "--batch-size must be at least 1"
    );
    let s = steps(args);
    ensure!(
        s > args.skip,
        "--steps {s} leaves no timed step after --skip {}",
        args.skip
    );
    for m in &args.models {
        if nn::models::find(m).is_err() {
            bail!("--models {m}: not a model of this stack (see train --help)");
        }
    }
    Ok(())
}

fn main() {
    table::main(|a: &Args| &a.common, run);
}

fn run(mut args: Args) -> Result<()> {
    let smoke = args.preset == "smoke";
    if smoke {
        // The pipeline on the smallest model: LeNet-5 in the figure's models' place
        // (unless --models names others), 2 images, 3 steps.
        args.preset = "quick".into();
        if args.models == ["alexnet", "deepspeech"] {
            args.models = vec!["lenet5".into()];
        }
        args.batch_size = args.batch_size.or(Some(2));
        args.steps = args.steps.or(Some(3));
    }
    validate(&args)?;
    table::create_out(&args.out)?;
    let mut rows = Vec::new();
    for model in &args.models {
        let b = batch(&args, model);
        // One node per method: iteration time and message bytes.
        let mut profiles = Vec::new();
        for (method, opts, _) in METHODS {
            let cfg = Config {
                model: model.clone(),
                dataset: "synthetic".into(),
                method: method.into(),
                method_opts: opts.iter().map(|o| o.to_string()).collect(),
                workers: 1,
                batch_size: b,
                steps: Some(steps(&args)),
                lr: 0.01,
                log_every: 1,
                eval_samples: Some(b),
                bucket_elems: 1 << 40, // above any model: one bucket (TOML integers are i64)
                out: args.out.join(format!("{model}-{method}")),
                ..Config::default()
            };
            let job = table::run_job(&cfg, &format!("{model} {method}"), &args.common)?;
            let step = job
                .mean_step("step_seconds", args.skip)
                .with_context(|| format!("{model} {method}: no timed step"))?;
            let params = job.summary["parameters"].as_u64().unwrap_or(0) as usize;
            let message = job
                .message_bytes_per_step(args.skip)
                .with_context(|| format!("{model} {method}: no message bytes"))?;
            profiles.push((method, step, params, message));
        }
        let t1 = profiles[0].1;
        for &gbps in &args.gbps {
            let net = AlphaBeta {
                alpha: args.alpha,
                beta: 8e-9 / gbps,
            };
            for (&(method, step, params, message), (_, _, paper_label)) in
                profiles.iter().zip(METHODS)
            {
                for &n in &args.nodes {
                    let comm = if method == "dense" {
                        net.allreduce(n, 4 * params)
                    } else {
                        net.allgather(n, message.round() as usize)
                    };
                    rows.push(json!({
                        "model": model, "method": method, "label": paper_label, "gbps": gbps,
                        "nodes": n, "batch": b, "params": params, "step_s": step,
                        "message_bytes": message, "comm_s": comm,
                        "speedup": n as f64 * t1 / (step + comm),
                    }));
                }
            }
        }
    }
    let verdicts: Vec<verdict::Verdict> = rows.iter().map(|r| claim(r, &rows, &args)).collect();
    for (r, v) in rows.iter_mut().zip(verdicts) {
        v.judged_if(!smoke).put(r);
    }
    table::write_rows(
        &args.out,
        "fig6",
        &rows,
        &[
            "model",
            "method",
            "gbps",
            "nodes",
            "batch",
            "params",
            "step_s",
            "message_bytes",
            "comm_s",
            "speedup",
            "claim",
            "holds",
        ],
    )?;
    write_charts(&args, &rows)?;
    table::print_rows(&args.common, &rows, || print_tables(&args, &rows))
}

/// The paper's claims (§5: "conventional training ... about 30x with 10Gbps Ethernet",
/// "DGC ... more than 40x with only 1Gbps"; DGC's gain grows as the network slows),
/// on the rows of the largest node count at the slowest rate, against the fastest rate:
/// dense scales worse on the slow link, and DGC's speed-up over dense is larger there.
/// Other rows claim nothing.
fn claim(r: &Value, rows: &[Value], args: &Args) -> verdict::Verdict {
    let (Some(&n), Some(slow), Some(fast)) = (
        args.nodes.iter().max(),
        args.gbps.iter().copied().reduce(f64::min),
        args.gbps.iter().copied().reduce(f64::max),
    ) else {
        return verdict::Verdict::none();
    };
    if slow == fast || r["nodes"].as_u64() != Some(n as u64) || r["gbps"].as_f64() != Some(slow) {
        return verdict::Verdict::none();
    }
    let speedup = |method: &str, gbps: f64| {
        rows.iter()
            .find(|o| {
                o["model"] == r["model"]
                    && o["method"] == method
                    && o["gbps"].as_f64() == Some(gbps)
                    && o["nodes"].as_u64() == Some(n as u64)
            })
            .and_then(|o| o["speedup"].as_f64())
    };
    match r["method"].as_str() {
        Some("dense") => verdict::Verdict::of(
            format!(
                "dense training scales worse on {slow} than on {fast} Gbit/s at {n} nodes (§5)"
            ),
            speedup("dense", slow)
                .zip(speedup("dense", fast))
                .map(|(s, f)| s < f),
        ),
        Some("dgc") => {
            let gain = |g: f64| {
                speedup("dgc", g)
                    .zip(speedup("dense", g))
                    .map(|(d, b)| d / b)
            };
            verdict::Verdict::of(
                format!("DGC's speed-up over dense is larger on {slow} than on {fast} Gbit/s at {n} nodes (§5)"),
                gain(slow).zip(gain(fast)).map(|(s, f)| s > f),
            )
        }
        _ => verdict::Verdict::none(),
    }
}

fn label(model: &str, method: &str) -> String {
    let m = match model {
        "alexnet" => "AlexNet",
        "deepspeech" => "DeepSpeech",
        other => other,
    };
    let label = METHODS
        .iter()
        .find(|x| x.0 == method)
        .map_or(method, |x| x.2);
    format!("{m} {label}")
}

fn write_charts(args: &Args, rows: &[Value]) -> Result<()> {
    for &gbps in &args.gbps {
        let mut series = Vec::new();
        for model in &args.models {
            for (method, _, _) in METHODS {
                let points = rows
                    .iter()
                    .filter(|r| r["model"] == model.as_str() && r["method"] == method)
                    .filter(|r| r["gbps"].as_f64() == Some(gbps))
                    .filter_map(|r| Some((r["nodes"].as_f64()?, r["speedup"].as_f64()?)))
                    .collect();
                series.push(train::plot::Series {
                    name: label(model, method),
                    points,
                });
            }
        }
        train::plot::line_chart(
            &args.out.join(format!("fig6_{gbps}gbps")),
            &format!("DGC Fig. 6: training speed-up, {gbps} Gbit/s Ethernet (model)"),
            "training nodes",
            "speed-up over one node",
            &series,
        )?;
    }
    Ok(())
}

fn print_tables(args: &Args, rows: &[Value]) {
    println!(
        "DGC, Figure 6: speed-up over one node ({} preset; one node measured here, communication from the alpha-beta model)",
        args.preset
    );
    for model in &args.models {
        let first = rows.iter().find(|r| r["model"] == model.as_str());
        if let Some(r) = first {
            println!(
                "{model}: {} parameters, batch {} per node",
                r["params"], r["batch"]
            );
        }
        for (method, _, _) in METHODS {
            if let Some(r) = rows
                .iter()
                .find(|r| r["model"] == model.as_str() && r["method"] == method)
            {
                println!(
                    "  {:<38} iteration {:>9.1} ms, message {:>14.0} bytes a step",
                    label(model, method),
                    r["step_s"].as_f64().unwrap_or(0.0) * 1e3,
                    r["message_bytes"].as_f64().unwrap_or(0.0)
                );
            }
        }
    }
    for (panel, &gbps) in args.gbps.iter().enumerate() {
        println!(
            "\n({}) {gbps} Gbit/s Ethernet: alpha = {:.3} ms, beta = {:.3} ns/byte",
            (b'a' + (panel % 26) as u8) as char,
            args.alpha * 1e3,
            8.0 / gbps
        );
        let mut head = format!("{:<38}", "nodes");
        for n in &args.nodes {
            head += &format!(" {n:>7}");
        }
        println!("{head}");
        for model in &args.models {
            for (method, _, _) in METHODS {
                let mut line = format!("{:<38}", label(model, method));
                for &n in &args.nodes {
                    let s = rows
                        .iter()
                        .find(|r| {
                            r["model"] == model.as_str()
                                && r["method"] == method
                                && r["gbps"].as_f64() == Some(gbps)
                                && r["nodes"].as_u64() == Some(n as u64)
                        })
                        .and_then(|r| r["speedup"].as_f64());
                    line += &format!(" {:>7}", table::cell(s, 1));
                }
                println!("{line}");
            }
        }
    }
    verdict::print_claims(rows, |r| {
        format!(
            "{} at {} Gbit/s",
            label(
                r["model"].as_str().unwrap_or(""),
                r["method"].as_str().unwrap_or("")
            ),
            r["gbps"]
        )
    });
    println!(
        "\nThe paper (its text; the figure's values are not in our copy): AlexNet on 64 nodes, \
         conventional training about 30x with 10 Gbit/s, DGC more than 40x with 1 Gbit/s. \
         Runs, fig6.csv, fig6.json and fig6_*gbps.png/.svg in {}",
        args.out.display()
    );
}
