//! SBC's Table II (paper 003): the dense baseline, gradient dropping, federated averaging
//! and Sparse Binary Compression in its three configurations, trained by 4 clients for the
//! same number of iterations, printed in the paper's layout (a column per method, rows of
//! accuracy and compression) with the paper's accuracies beside ours. Writes
//! `table2.csv`, `table2.json` and the learning curves (`curves.png`, `curves.svg`) into
//! `--out`.
//!
//! The methods, as the paper defines them:
//! - gradient dropping at 0.1 % with momentum correction and momentum factor masking,
//!   without sparsity warm-up (its supplement: "we omit warm up training"): our `dgc` with
//!   `warmup_epochs=0`, every tensor compressed;
//! - federated averaging: local steps, dense averaging every 100 steps (the delay is ours:
//!   the text we have does not state it; 100 is SBC (3)'s, so the two differ only in
//!   what is sent);
//! - SBC (1): no delay, p = 0.1 %; SBC (2): 10 steps, p = 1 %; SBC (3): 100 steps, p = 1 %.
//!
//! `--preset quick`: the paper's MNIST row (LeNet5-Caffe, 2000 iterations, a batch of
//! 128 over the 4 clients) on Fashion-MNIST, which has MNIST's shape; 17 minutes
//! on 2 cores (RESULTS.md). `--preset paper --row mnist|cifar10`: that row on the real data
//! (`--data-dir`: MNIST's IDX files, or CIFAR-10's binary batches for ResNet32 with 60,000
//! iterations and the rate ×0.1 at 30,000 and 50,000).
//!
//! Optimizers, as the paper's Table III: the MNIST row (and `quick`) trains with Adam at
//! 0.001 (PyTorch's β and ε; the paper names none), ResNet32 with momentum SGD 0.9 at 0.01.
//! `--optimizer sgd` runs the MNIST row with momentum SGD at 0.01 instead (the setting
//! of the tables recorded before the trainer had Adam). DGC's momentum correction is
//! momentum SGD's, so under Adam the gradient-dropping column is plain gradient dropping
//! (Aji & Heafield: `momentum_correction=false masking=false`); SBC masks Adam's first
//! moment where it sent.

use anyhow::{bail, Context, Result};
use benchmarks::{table, verdict};
use clap::Parser;
use serde_json::json;
use std::path::PathBuf;
use train::Config;

#[derive(Parser)]
#[command(
    about = "SBC Table II: baseline, gradient dropping, federated averaging and SBC (1)/(2)/(3) with 4 clients, beside the paper's accuracies"
)]
struct Args {
    /// quick (LeNet-5 on Fashion-MNIST, the MNIST row's schedule), paper (--row on its
    /// real data) or smoke (quick's jobs on synthetic data, 100 iterations each).
    #[arg(long, default_value = "quick")]
    preset: String,
    /// The paper's row to run with --preset paper: mnist (LeNet5-Caffe, the default) or
    /// cifar10 (ResNet32).
    #[arg(long)]
    row: Option<String>,
    /// Dataset directory (quick: Fashion-MNIST's IDX files, default the Debian package's;
    /// paper: MNIST's IDX files or CIFAR-10's binary batches).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Train on synthetic data of the model's input shape instead (a smoke test anywhere).
    #[arg(long)]
    synthetic: bool,
    /// Where the runs and the table go.
    #[arg(long, default_value = "runs/sbc_table2")]
    out: PathBuf,
    /// Optimizer: adam (the MNIST row's, at 0.001) or sgd (momentum 0.9 at 0.01, ResNet32's).
    /// Default: the row's, as the paper's Table III.
    #[arg(long, value_parser = ["adam", "sgd"])]
    optimizer: Option<String>,
    /// Iterations per run (default: the row's). Keep it a multiple of 100, or the delayed
    /// methods end between two synchronisations, with ranks holding different weights.
    #[arg(long)]
    steps: Option<usize>,
    /// Evaluate on at most this many test samples.
    #[arg(long)]
    eval_samples: Option<usize>,
    /// Images per client and iteration. Default 32: Table III's batch sizes read as the
    /// total over the 4 clients (ResNet32's 60,000 iterations at 128, cut at 30,000 and
    /// 50,000, is He et al.'s single-machine CIFAR schedule). The text supports the other
    /// reading for ResNet50 (rate "lowered in epochs 30 and 60", which 300,000 and
    /// 600,000 iterations are only at 32 per client × 4): `--batch-size 128` runs the
    /// MNIST row that way (4× the images per iteration).
    #[arg(long)]
    batch_size: Option<usize>,
    #[command(flatten)]
    common: table::CommonArgs,
}

/// The columns: label, method, options.
const METHODS: [(&str, &str, &[&str]); 6] = [
    ("Baseline", "dense", &[]),
    (
        "Gradient Dropping",
        "dgc",
        &["density=0.001", "warmup_epochs=0", "dense_below=0"],
    ),
    ("Federated Averaging", "fedavg", &["delay=100"]),
    ("SBC (1)", "sbc", &["preset=1"]),
    ("SBC (2)", "sbc", &["preset=2"]),
    ("SBC (3)", "sbc", &["preset=3"]),
];

/// The paper's Table II accuracies in METHODS' order. (Its compression rows did not
/// survive the text extraction we have, so none are printed. The extraction also lost
/// the two cited columns' names; their order, gradient dropping then federated
/// averaging, is our reading: federated averaging's 0.724 on ImageNet is the delayed
/// method the text says falls behind after the rate cuts.)
const PAPER_MNIST: [f64; 6] = [0.9946, 0.994, 0.994, 0.994, 0.994, 0.991];
const PAPER_CIFAR10: [f64; 6] = [0.926, 0.927, 0.919, 0.923, 0.919, 0.922];

/// Clients, as in every experiment of the paper.
const WORKERS: usize = 4;

struct Row {
    base: Config,
    /// Adam: the gradient-dropping column runs without momentum correction.
    adam: bool,
    /// What the paper trained, for the heading.
    paper_setting: &'static str,
    paper: [f64; 6],
}

fn row(args: &Args) -> Result<Row> {
    // The paper's batch sizes are read as the total over the 4 clients by default (see
    // --batch-size for the evidence either way).
    if args.batch_size == Some(0) {
        bail!("--batch-size must be at least 1");
    }
    let mut c = Config {
        workers: WORKERS,
        batch_size: args.batch_size.unwrap_or(128 / WORKERS),
        // ResNet32's rate and momentum in the paper's Table III; LeNet's Adam below.
        lr: 0.01,
        momentum: 0.9,
        log_every: 50,
        ..Config::default()
    };
    let (model, dataset, steps, paper_setting, paper) =
        match (args.preset.as_str(), args.row.as_deref()) {
            ("quick", Some(_)) => {
                bail!("--row is for --preset paper (quick runs the MNIST row on Fashion-MNIST)")
            }
            ("quick", None) => (
                "lenet5",
                "fashion-mnist",
                2000,
                "LeNet5-Caffe on MNIST",
                PAPER_MNIST,
            ),
            ("paper", None | Some("mnist")) => (
                "lenet5",
                "mnist",
                2000,
                "LeNet5-Caffe on MNIST",
                PAPER_MNIST,
            ),
            ("paper", Some("cifar10")) => (
                "resnet32",
                "cifar10",
                60_000,
                "ResNet32 on CIFAR-10",
                PAPER_CIFAR10,
            ),
            ("paper", Some(r)) => bail!("--row {r}: expected mnist or cifar10"),
            (p, _) => bail!("--preset {p}: expected smoke, quick or paper"),
        };
    let adam = match args.optimizer.as_deref() {
        Some(o) => o == "adam",
        None => model == "lenet5",
    };
    if adam {
        // Table III: LeNet5-Caffe with Adam at 0.001 (β1 is the trainer's --momentum).
        c.optimizer = train::config::OptimizerChoice::Adam;
        c.lr = 0.001;
    }
    c.model = model.into();
    c.dataset = if args.synthetic {
        "synthetic".into()
    } else {
        dataset.into()
    };
    let steps = args.steps.unwrap_or(steps);
    let unsynced: Vec<&str> = [
        ("Federated Averaging", 100),
        ("SBC (2)", 10),
        ("SBC (3)", 100),
    ]
    .iter()
    .filter(|(_, delay)| !steps.is_multiple_of(*delay))
    .map(|(name, _)| *name)
    .collect();
    if !unsynced.is_empty() {
        eprintln!(
            "sbc_table2: {steps} iterations end between two synchronisations of {}: their \
             ranks hold different weights, and each evaluates its share of the test set \
             with its own (use a multiple of 100)",
            unsynced.join(", ")
        );
    }
    c.steps = Some(steps);
    c.eval_samples = args.eval_samples;
    c.data_dir = args.data_dir.clone();
    if args.preset == "paper" && !args.synthetic {
        c.data_dir = Some(args.data_dir.clone().with_context(|| {
            format!(
                "--preset paper needs --data-dir with {}",
                if model == "lenet5" {
                    "MNIST's IDX files"
                } else {
                    "CIFAR-10's binary batches"
                }
            )
        })?);
    }
    if model == "resnet32" {
        // ×0.1 at iterations 30,000 and 50,000, as epochs of the trainer's count: each of
        // the 4 ranks takes whole batches of its 12,500 CIFAR-10 images, 390 a epoch.
        let per_epoch = (50_000 / WORKERS / c.batch_size) as f64;
        c.schedule = train::config::Schedule::Multistep;
        c.milestones = vec![30_000.0 / per_epoch, 50_000.0 / per_epoch];
    }
    Ok(Row {
        base: c,
        adam,
        paper_setting,
        paper,
    })
}

/// The paper's claim for a column (its `label`), judged by its accuracy's difference to
/// the baseline's (a fraction). "On all benchmarks, our methods perform comparable to
/// the baseline" (§V): Table II's largest accuracy gap for gradient dropping and SBC is
/// 0.9 points (SBC (3) on ImageNet; the MNIST and CIFAR-10 rows stay within 0.7), and
/// federated averaging's 1.3 (ImageNet), so "comparable" is judged as within 1 point
/// (1.3 for federated averaging).
fn claim(label: &str, delta: Option<f64>) -> verdict::Verdict {
    let within = |points: f64| {
        verdict::Verdict::of(
            format!("{label} comparable to the baseline: within {points} points (Table II)"),
            delta.map(|d| d >= -points / 100.0),
        )
    };
    match label {
        "Baseline" => verdict::Verdict::none(),
        "Federated Averaging" => within(1.3),
        _ => within(1.0),
    }
}

fn main() {
    table::main(|a: &Args| &a.common, run);
}

fn run(mut args: Args) -> Result<()> {
    // Smoke: 100 iterations each, one synchronisation of the delayed methods.
    let smoke = table::smoke_prologue(
        &mut args.preset,
        &mut args.synthetic,
        args.data_dir.as_deref(),
        &mut args.steps,
        &mut args.eval_samples,
        (100, 64),
    )?;
    table::check_counts(&[
        ("--steps", args.steps),
        ("--eval-samples", args.eval_samples),
        ("--batch-size", args.batch_size),
    ])?;
    let r = row(&args)?;
    table::create_out(&args.out)?;
    let mut rows = Vec::new();
    let mut curves = Vec::new();
    let mut baseline = None;
    for ((label, method, opts), paper) in METHODS.iter().zip(r.paper) {
        let mut method_opts: Vec<String> = opts.iter().map(|o| o.to_string()).collect();
        if r.adam && *method == "dgc" {
            method_opts.extend(["momentum_correction=false", "masking=false"].map(String::from));
        }
        let cfg = Config {
            method: method.to_string(),
            method_opts,
            out: args
                .out
                .join(label.to_lowercase().replace([' ', '(', ')'], "")),
            ..r.base.clone()
        };
        let job = table::run_job(&cfg, label, &args.common)?;
        let metric = job.final_metric();
        let base = *baseline.get_or_insert(metric);
        rows.push(json!({
            "method": label,
            "method_config": job.summary["method_config"],
            "optimizer": if r.adam { "adam" } else { "sgd" },
            "workers": WORKERS,
            "total_batch": WORKERS * cfg.batch_size,
            "steps": job.summary["steps"],
            "accuracy": metric,
            "delta": metric.zip(base).map(|(m, b)| m - b),
            "compression_ratio": job.compression_ratio(),
            "message_compression_ratio": job.summary["message_compression_ratio"].as_f64(),
            "bytes_sent": job.summary["bytes_sent"],
            "paper_accuracy": paper,
            "paper_delta": paper - r.paper[0],
            "wall_seconds": job.wall_seconds,
        }));
        if let Some(row) = rows.last_mut() {
            let delta = row["delta"].as_f64();
            claim(label, delta).judged_if(!smoke).put(row);
        }
        curves.push((label.to_string(), job.eval_curve()));
    }
    table::write_table(
        &args.out,
        "table2",
        &rows,
        &[
            "method",
            "workers",
            "total_batch",
            "steps",
            "accuracy",
            "delta",
            "compression_ratio",
            "message_compression_ratio",
            "bytes_sent",
            "paper_accuracy",
            "paper_delta",
            "wall_seconds",
            "claim",
            "holds",
        ],
        curves,
        "SBC Table II: test accuracy",
        "accuracy",
    )?;
    table::print_rows(&args.common, &rows, || print_table(&args, &r, &rows))
}

fn print_table(args: &Args, r: &Row, rows: &[serde_json::Value]) {
    println!(
        "SBC Table II ({} preset: {} on {}, {} workers x {}, {} iterations, {}; the paper: {})",
        args.preset,
        r.base.model,
        r.base.dataset,
        WORKERS,
        r.base.batch_size,
        r.base.steps.unwrap_or(0),
        if r.adam {
            format!("Adam at {}", r.base.lr)
        } else {
            format!("momentum SGD {} at {}", r.base.momentum, r.base.lr)
        },
        r.paper_setting
    );
    let f = |key: &str, d: usize, scale: f64| -> Vec<String> {
        rows.iter()
            .map(|row| table::cell(row[key].as_f64().map(|x| x * scale), d))
            .collect()
    };
    let line = |name: &str, cells: Vec<String>| {
        print!("{name:<24}");
        for c in cells {
            print!(" {c:>20}");
        }
        println!();
    };
    line("Method", METHODS.iter().map(|m| m.0.to_string()).collect());
    line("Accuracy %", f("accuracy", 2, 100.0));
    line("  difference", f("delta", 2, 100.0));
    line("Compression (wire)", f("compression_ratio", 0, 1.0));
    line(
        "Compression (message)",
        f("message_compression_ratio", 0, 1.0),
    );
    line("Paper accuracy %", f("paper_accuracy", 2, 100.0));
    line("  difference", f("paper_delta", 2, 100.0));
    line(
        "Claim",
        rows.iter()
            .map(|r| verdict::cell(r["holds"].as_bool()).to_string())
            .collect(),
    );
    verdict::print_claims(rows, |r| r["method"].as_str().unwrap_or("").to_string());
    println!(
        "(wire: dense ring bytes / bytes this rank sent; message: dense update bytes / the \
         method's message bytes, the paper's measure. Runs, table2.csv, table2.json, \
         curves.png and curves.svg in {})",
        args.out.display()
    );
}
