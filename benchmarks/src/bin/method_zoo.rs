//! Every method on one task: the same model, data, seed, workers and steps, each method
//! at its usual settings, in one table — test accuracy, bytes on the wire, compression
//! ratio, the mean step and its split (compute, compression, communication, idle). The
//! table researchers compare a new method against. Writes `zoo.csv`, `zoo.json` and the
//! accuracy curves (`curves.png`, `curves.svg`) into `--out`.
//!
//! - `--preset smoke`: LeNet-5 on Fashion-MNIST (or `--synthetic`), 2 workers × 32, 40
//!   steps a method: every method runs, in about 3 minutes on 2 cores.
//! - `--preset quick`: the README's main job for each method: ResNet-20 on
//!   Fashion-MNIST, 4 workers × 32, 2 epochs; about 2 hours on 2 cores.
//!
//! "Usual settings" are each method's paper's (or library's) defaults where they fit a
//! short run, named in the table's options column: sparsifiers at 0.1 % (gradient
//! dropping, DGC with a one-epoch warm-up, gTop-k), SBC(2), QSGD 4 bits, PowerSGD at rank
//! 2 from step 10, random-k at 1 %, threshold-v at GRACE's 0.01; signSGD and signum, whose
//! updates are ±1, at learning rate 0.001 without the trainer's momentum (their papers'
//! order of magnitude); the others at the task's learning rate with momentum 0.9.
//!
//! The zoo reproduces no paper's table, so its rows carry the claim columns of the paper
//! tables empty (`"claim": null, "holds": null`): the papers' claims are judged where
//! their own settings run, in `dgc_table2`, `qsgd_table1` and the others.

use anyhow::{bail, Context, Result};
use benchmarks::{table, verdict};
use clap::Parser;
use serde_json::{json, Value};
use std::path::PathBuf;
use train::Config;

#[derive(Parser)]
#[command(
    about = "Every compression method on one task (same model, data, seed, workers, steps): accuracy, bytes, ratio and step time, one row each"
)]
struct Args {
    /// smoke (LeNet-5, 40 steps a method) or quick (ResNet-20, 2 epochs a method).
    #[arg(long, default_value = "smoke", value_parser = ["smoke", "quick"])]
    preset: String,
    /// Fashion-MNIST's IDX files (default: the Debian package's, `apt-get install
    /// dataset-fashion-mnist`).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Train on synthetic data of the model's input shape instead (a smoke test anywhere).
    #[arg(long)]
    synthetic: bool,
    /// Only these methods (comma-separated labels of the table's first column).
    #[arg(long, value_delimiter = ',')]
    methods: Vec<String>,
    /// Where the runs and the table go.
    #[arg(long, default_value = "runs/method_zoo")]
    out: PathBuf,
    /// Steps per run (smoke: 40; quick: 2 epochs).
    #[arg(long)]
    steps: Option<usize>,
    /// Worker processes (smoke: 2; quick: 4).
    #[arg(long)]
    workers: Option<usize>,
    /// Evaluate on at most this many test samples.
    #[arg(long)]
    eval_samples: Option<usize>,
    #[command(flatten)]
    common: table::CommonArgs,
}

/// A row: its label, the method, its options, and a learning rate and momentum of its
/// own where the task's do not fit it.
struct Entry {
    label: &'static str,
    method: &'static str,
    opts: &'static [&'static str],
    lr: Option<f64>,
    momentum: Option<f64>,
}

const fn entry(label: &'static str, method: &'static str, opts: &'static [&'static str]) -> Entry {
    Entry {
        label,
        method,
        opts,
        lr: None,
        momentum: None,
    }
}

const ENTRIES: &[Entry] = &[
    entry("dense", "dense", &[]),
    entry("dense-f16", "dense", &["wire=f16"]),
    entry("dense-bf16", "dense", &["wire=bf16"]),
    entry("topk", "topk", &["density=0.001"]),
    entry("local", "local", &["density=0.001"]),
    entry("dgc", "dgc", &["density=0.001", "warmup_epochs=1"]),
    entry("gtopk", "gtopk", &["density=0.001"]),
    entry("sbc", "sbc", &["preset=2"]),
    entry("qsgd", "qsgd", &["preset=4bit"]),
    entry("terngrad", "terngrad", &[]),
    entry("onebit", "onebit", &[]),
    entry("fedavg", "fedavg", &["delay=10"]),
    entry("powersgd", "powersgd", &["rank=2", "start_iter=10"]),
    Entry {
        lr: Some(0.001),
        momentum: Some(0.0),
        ..entry("signsgd", "signsgd", &[])
    },
    Entry {
        lr: Some(0.001),
        momentum: Some(0.0),
        ..entry("signum", "signum", &["momentum=0.9"])
    },
    entry("efsignsgd", "efsignsgd", &[]),
    entry("randomk", "randomk", &["density=0.01"]),
    entry("thresholdv", "thresholdv", &["threshold=0.01"]),
];

fn base_config(args: &Args) -> Result<Config> {
    let mut c = Config {
        momentum: 0.9,
        weight_decay: 1e-4,
        eval_samples: args.eval_samples,
        data_dir: args.data_dir.clone(),
        dataset: if args.synthetic {
            "synthetic".into()
        } else {
            "fashion-mnist".into()
        },
        ..Config::default()
    };
    match args.preset.as_str() {
        "smoke" => {
            c.model = "lenet5".into();
            c.workers = args.workers.unwrap_or(2);
            c.batch_size = 32;
            c.lr = 0.01;
            c.log_every = 10;
            c.steps = Some(args.steps.unwrap_or(40));
            c.eval_samples = Some(args.eval_samples.unwrap_or(1000));
        }
        "quick" => {
            c.model = "resnet20".into();
            c.workers = args.workers.unwrap_or(4);
            c.batch_size = 32;
            c.lr = 0.1;
            c.log_every = 20;
            match args.steps {
                Some(s) => c.steps = Some(s),
                None => c.epochs = Some(2),
            }
        }
        p => bail!("--preset {p}: expected smoke or quick"),
    }
    if c.workers < 2 {
        bail!("--workers must be at least 2 (one worker exchanges nothing)");
    }
    Ok(c)
}

fn main() {
    table::main(|a: &Args| &a.common, run);
}

fn run(args: Args) -> Result<()> {
    table::check_synthetic(args.synthetic, args.data_dir.as_deref())?;
    table::check_counts(&[
        ("--steps", args.steps),
        ("--workers", args.workers),
        ("--eval-samples", args.eval_samples),
    ])?;
    if let Some(m) = args
        .methods
        .iter()
        .find(|m| !ENTRIES.iter().any(|e| e.label == *m))
    {
        bail!(
            "--methods {m}: no such row; the rows are {}",
            ENTRIES
                .iter()
                .map(|e| e.label)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let base = base_config(&args)?;
    let chosen: Vec<&Entry> = ENTRIES
        .iter()
        .filter(|e| args.methods.is_empty() || args.methods.iter().any(|m| m == e.label))
        .collect();
    let plan: Vec<(String, Config)> = chosen
        .iter()
        .map(|e| {
            let cfg = Config {
                method: e.method.to_string(),
                method_opts: e.opts.iter().map(|o| o.to_string()).collect(),
                lr: e.lr.unwrap_or(base.lr),
                momentum: e.momentum.unwrap_or(base.momentum),
                out: args.out.join(e.label),
                ..base.clone()
            };
            (e.label.to_string(), cfg)
        })
        .collect();
    let jobs = table::run_plan(&args.out, &plan, &args.common)?;
    let mut rows = Vec::new();
    let mut curves = Vec::new();
    for ((label, cfg), job) in plan.iter().zip(&jobs) {
        let mean = |key: &str| job.mean_step(key, 1);
        rows.push(json!({
            "method": label,
            "method_config": job.summary["method_config"],
            "lr": cfg.lr,
            "momentum": cfg.momentum,
            "accuracy": job.final_metric(),
            "bytes_sent": job.summary["bytes_sent"],
            "compression_ratio": job.compression_ratio(),
            "message_compression_ratio": job.summary["message_compression_ratio"],
            "step_ms": mean("step_seconds").map(|s| s * 1e3),
            "compute_ms": mean("compute_seconds").map(|s| s * 1e3),
            "compression_ms": mean("compression_seconds").map(|s| s * 1e3),
            "communication_ms": mean("communication_seconds").map(|s| s * 1e3),
            "idle_ms": mean("idle_seconds").map(|s| s * 1e3),
        }));
        if let Some(row) = rows.last_mut() {
            verdict::Verdict::none().put(row);
        }
        curves.push((label.clone(), job.eval_curve()));
    }
    table::write_table(
        &args.out,
        "zoo",
        &rows,
        &[
            "method",
            "method_config",
            "lr",
            "momentum",
            "accuracy",
            "bytes_sent",
            "compression_ratio",
            "message_compression_ratio",
            "step_ms",
            "compute_ms",
            "compression_ms",
            "communication_ms",
            "idle_ms",
            "claim",
            "holds",
        ],
        curves,
        "Every method on one task: test accuracy",
        "accuracy",
    )
    .context("writing the table")?;
    table::print_rows(&args.common, &rows, || print_table(&args, &base, &rows))
}

fn print_table(args: &Args, base: &Config, rows: &[Value]) {
    let length = table::length(base);
    println!(
        "Every method on one task ({} preset: {} on {}, {} workers x {}, {length}, seed {})",
        args.preset, base.model, base.dataset, base.workers, base.batch_size, base.seed
    );
    println!(
        "{:<11} {:>8} {:>12} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8}  options",
        "method",
        "acc %",
        "bytes sent",
        "ratio",
        "msg ratio",
        "step ms",
        "compute",
        "compress",
        "comm",
        "idle"
    );
    let num = |r: &Value, k: &str, d: usize, s: f64| table::cell(r[k].as_f64().map(|x| x * s), d);
    for r in rows {
        println!(
            "{:<11} {:>8} {:>12} {:>8}x {:>8}x {:>8} {:>8} {:>8} {:>8} {:>8}  {}",
            r["method"].as_str().unwrap_or(""),
            num(r, "accuracy", 2, 100.0),
            r["bytes_sent"]
                .as_u64()
                .map_or("-".into(), |b| b.to_string()),
            num(r, "compression_ratio", 1, 1.0),
            num(r, "message_compression_ratio", 1, 1.0),
            num(r, "step_ms", 1, 1.0),
            num(r, "compute_ms", 1, 1.0),
            num(r, "compression_ms", 1, 1.0),
            num(r, "communication_ms", 1, 1.0),
            num(r, "idle_ms", 1, 1.0),
            r["method_config"].as_str().unwrap_or(""),
        );
    }
    println!(
        "(accuracy after the last step; bytes sent by rank 0, frames included; ratio = dense \
         ring bytes / bytes sent, msg ratio = the methods' message measure; the step and its \
         split are rank 0's means after the first step. Runs, zoo.csv, zoo.json and \
         curves.png in {})",
        args.out.display()
    );
}
