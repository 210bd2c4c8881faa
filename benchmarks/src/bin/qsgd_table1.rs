//! QSGD's Table 1 (paper 004): full-precision training against QSGD at 2, 4 and 8 bits,
//! the same schedule, printed in the paper's layout (network, dataset, parameters, initial
//! rate, top-1 at 32 bits, top-1 with QSGD, speed-up) with the paper's rows below ours.
//! Writes `table1.csv`, `table1.json` and the learning curves (`curves.png`,
//! `curves.svg`) into `--out`.
//!
//! QSGD as the paper runs it (§5): 2 bits with buckets of 128 values, 4 and 8 bits with
//! buckets of 512, Elias-coded, tensors under 10,000 values sent in full precision (our
//! `qsgd` presets `2bit`, `4bit`, `8bit`).
//!
//! - `--preset quick`: LeNet-5 on Fashion-MNIST (the MNIST network of the paper's
//!   Figure 3 is a two-layer perceptron; Table 1's smallest row is ResNet-110 on
//!   CIFAR-10, which 2 cores do not train in minutes), 4 workers × 32, 2,000 steps,
//!   momentum SGD 0.9 at 0.01.
//! - `--preset paper`: Table 1's CIFAR-10 row: ResNet-110 on CIFAR-10 (`--data-dir`),
//!   8 workers (the paper's 8 GPUs) × 16, initial rate 0.1 (the table's), 164 epochs with
//!   the rate × 0.1 at 82 and 123 (He et al.'s schedule; the paper does not give its own).
//!   The ImageNet rows need an ImageNet loader, which this stack does not have, and the
//!   AN4 row's schedule is not in the paper: both are printed from the paper only.
//!
//! "Speed-up" is measured here: the 32-bit run's mean training step over the QSGD run's
//! (evaluations and checkpoints left out), on this machine's network (loopback for local
//! workers), beside the bytes saved (wire compression). The paper's is on 8 GPUs over its
//! interconnect.

use anyhow::{bail, Context, Result};
use benchmarks::{table, verdict};
use clap::Parser;
use serde_json::{json, Value};
use std::path::PathBuf;
use train::Config;

#[derive(Parser)]
#[command(
    about = "QSGD Table 1: 32-bit training against QSGD 2/4/8-bit (bucket 128/512/512), top-1 and speed-up, beside the paper's rows"
)]
struct Args {
    /// quick (LeNet-5 on Fashion-MNIST), paper (ResNet-110 on CIFAR-10, --data-dir) or
    /// smoke (quick's jobs on synthetic data, 40 steps each).
    #[arg(long, default_value = "quick")]
    preset: String,
    /// Dataset directory (quick: Fashion-MNIST's IDX files, default the Debian package's;
    /// paper: CIFAR-10's binary batches).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Train on synthetic data of the model's input shape instead (a smoke test anywhere).
    #[arg(long)]
    synthetic: bool,
    /// Where the runs and the table go.
    #[arg(long, default_value = "runs/qsgd_table1")]
    out: PathBuf,
    /// Steps per run (quick: 2000; paper: 164 epochs).
    #[arg(long)]
    steps: Option<usize>,
    /// Worker processes (quick: 4; paper: 8).
    #[arg(long)]
    workers: Option<usize>,
    /// Evaluate on at most this many test samples.
    #[arg(long)]
    eval_samples: Option<usize>,
    /// QSGD's bucket scale: max (the largest magnitude, what the paper's experiments use,
    /// §4 "QSGD variants"; the default here, since this binary reproduces those
    /// experiments) or l2 (the 2-norm, Lemma 3.1's analysed form and the method's own
    /// default).
    #[arg(long, default_value = "max", value_parser = ["l2", "max"])]
    norm: String,
    #[command(flatten)]
    common: table::CommonArgs,
}

/// The runs: label and `qsgd` preset (None: the 32-bit baseline, `dense`).
const RUNS: [(&str, Option<&str>); 4] = [
    ("32bit", None),
    ("QSGD 2bit", Some("2bit")),
    ("QSGD 4bit", Some("4bit")),
    ("QSGD 8bit", Some("8bit")),
];

/// One row of the paper's Table 1.
struct PaperRow {
    network: &'static str,
    dataset: &'static str,
    params: &'static str,
    init_rate: f64,
    top1_32bit: Option<f64>,
    /// Top-1 with QSGD and the bit width it was reported at.
    top1_qsgd: Option<(f64, &'static str)>,
    speedup: &'static str,
}

/// The paper's Table 1 (top-1 in %; a dash where the paper has none).
const PAPER: [PaperRow; 7] = [
    PaperRow {
        network: "AlexNet",
        dataset: "ImageNet",
        params: "62M",
        init_rate: 0.07,
        top1_32bit: Some(59.50),
        top1_qsgd: Some((60.05, "4bit")),
        speedup: "2.05x",
    },
    PaperRow {
        network: "ResNet152",
        dataset: "ImageNet",
        params: "60M",
        init_rate: 1.0,
        top1_32bit: Some(77.0),
        top1_qsgd: Some((76.74, "8bit")),
        speedup: "1.56x",
    },
    PaperRow {
        network: "ResNet50",
        dataset: "ImageNet",
        params: "25M",
        init_rate: 1.0,
        top1_32bit: Some(74.68),
        top1_qsgd: Some((74.76, "4bit")),
        speedup: "1.26x",
    },
    PaperRow {
        network: "ResNet110",
        dataset: "CIFAR-10",
        params: "1M",
        init_rate: 0.1,
        top1_32bit: Some(93.86),
        top1_qsgd: Some((94.19, "4bit")),
        speedup: "1.10x",
    },
    PaperRow {
        network: "BN-Inception",
        dataset: "ImageNet",
        params: "11M",
        init_rate: 3.6,
        top1_32bit: None,
        top1_qsgd: None,
        speedup: "1.16x (projected)",
    },
    PaperRow {
        network: "VGG19",
        dataset: "ImageNet",
        params: "143M",
        init_rate: 0.1,
        top1_32bit: None,
        top1_qsgd: None,
        speedup: "2.25x (projected)",
    },
    PaperRow {
        network: "LSTM",
        dataset: "AN4",
        params: "13M",
        init_rate: 0.5,
        top1_32bit: Some(81.13),
        top1_qsgd: Some((81.15, "4bit")),
        speedup: "2x (2 GPUs)",
    },
];

fn base_config(args: &Args) -> Result<Config> {
    let mut c = Config {
        momentum: 0.9,
        weight_decay: 1e-4,
        eval_samples: args.eval_samples,
        data_dir: args.data_dir.clone(),
        ..Config::default()
    };
    let real = match args.preset.as_str() {
        "quick" => {
            c.model = "lenet5".into();
            c.workers = args.workers.unwrap_or(4);
            c.batch_size = 128 / c.workers.clamp(1, 128);
            c.lr = 0.01;
            c.log_every = 50;
            c.steps = Some(args.steps.unwrap_or(2000));
            "fashion-mnist"
        }
        "paper" => {
            c.model = "resnet110".into();
            c.workers = args.workers.unwrap_or(8);
            c.batch_size = 128 / c.workers.clamp(1, 128);
            c.lr = 0.1;
            c.log_every = 100;
            match args.steps {
                Some(s) => c.steps = Some(s),
                None => c.epochs = Some(164),
            }
            c.schedule = train::config::Schedule::Multistep;
            c.milestones = vec![82.0, 123.0];
            if !args.synthetic {
                c.data_dir =
                    Some(args.data_dir.clone().context(
                        "--preset paper needs --data-dir with CIFAR-10's binary batches",
                    )?);
            }
            "cifar10"
        }
        p => bail!("--preset {p}: expected smoke, quick or paper"),
    };
    if c.workers < 2 {
        bail!("--workers must be at least 2 (one worker exchanges nothing)");
    }
    c.dataset = if args.synthetic {
        "synthetic".into()
    } else {
        real.into()
    };
    Ok(c)
}

/// The paper's claim for a run (its `label`), judged by its accuracy's difference to the
/// 32-bit run's (a fraction). 4 and 8 bits "recover or slightly improve full accuracy"
/// (§5; Table 1's worst is ResNet-152 at 8 bits, −0.26 points): judged as within 0.3
/// points. 2 bits can cost accuracy (§5: 1.73 points for AlexNet at 2 bits, buckets of
/// 64): judged as within that.
fn claim(label: &str, delta: Option<f64>) -> verdict::Verdict {
    let within =
        |points: f64, claim: &str| verdict::Verdict::of(claim, delta.map(|d| d >= -points / 100.0));
    match label {
        "32bit" => verdict::Verdict::none(),
        "QSGD 2bit" => within(
            1.73,
            "2-bit QSGD costs at most 1.73 points (§5, AlexNet at 2 bits)",
        ),
        _ => within(
            0.3,
            &format!("{label} keeps full-precision accuracy, within 0.3 points (Table 1: −0.26 to +0.55)"),
        ),
    }
}

fn main() {
    table::main(|a: &Args| &a.common, run);
}

fn run(mut args: Args) -> Result<()> {
    let smoke = table::smoke_prologue(
        &mut args.preset,
        &mut args.synthetic,
        args.data_dir.as_deref(),
        &mut args.steps,
        &mut args.eval_samples,
        (40, 64),
    )?;
    table::check_counts(&[
        ("--steps", args.steps),
        ("--workers", args.workers),
        ("--eval-samples", args.eval_samples),
    ])?;
    let base = base_config(&args)?;
    table::create_out(&args.out)?;
    let mut jobs = Vec::new();
    for (label, preset) in RUNS {
        let cfg = Config {
            method: if preset.is_some() { "qsgd" } else { "dense" }.to_string(),
            method_opts: preset
                .map(|p| vec![format!("preset={p}"), format!("norm={}", args.norm)])
                .unwrap_or_default(),
            out: args.out.join(label.to_lowercase().replace(' ', "-")),
            ..base.clone()
        };
        jobs.push(table::run_job(&cfg, label, &args.common)?);
    }
    let full = jobs[0].final_metric();
    // Per training step, so that the evaluations and checkpoints every run pays alike do
    // not pull the ratio towards 1.
    let full_step = jobs[0].summary["mean_step_seconds"].as_f64();
    let mut rows = Vec::new();
    let mut curves = Vec::new();
    for ((label, _), job) in RUNS.iter().zip(&jobs) {
        let metric = job.final_metric();
        let wall = job.summary["wall_seconds"].as_f64();
        let step = job.summary["mean_step_seconds"].as_f64();
        rows.push(json!({
            "run": label,
            "method_config": job.summary["method_config"],
            "network": base.model,
            "dataset": base.dataset,
            "params": job.summary["parameters"],
            "init_rate": base.lr,
            "workers": base.workers,
            "steps": job.summary["steps"],
            "top1": metric,
            "delta": metric.zip(full).map(|(m, f)| m - f),
            "compression_ratio": job.compression_ratio(),
            "message_compression_ratio": job.summary["message_compression_ratio"],
            "training_seconds": wall,
            "mean_step_seconds": step,
            "speedup": full_step.zip(step).map(|(f, s)| f / s),
        }));
        if let Some(row) = rows.last_mut() {
            claim(label, metric.zip(full).map(|(m, f)| m - f))
                .judged_if(!smoke)
                .put(row);
        }
        curves.push((label.to_string(), job.eval_curve()));
    }
    table::write_table(
        &args.out,
        "table1",
        &rows,
        &[
            "run",
            "network",
            "dataset",
            "params",
            "init_rate",
            "workers",
            "steps",
            "top1",
            "delta",
            "compression_ratio",
            "message_compression_ratio",
            "training_seconds",
            "mean_step_seconds",
            "speedup",
            "claim",
            "holds",
        ],
        curves,
        "QSGD Table 1: test accuracy",
        "accuracy",
    )?;
    table::print_rows(&args.common, &rows, || print_table(&args, &base, &rows))
}

fn print_table(args: &Args, base: &Config, rows: &[Value]) {
    let length = table::length(base);
    println!(
        "QSGD Table 1 ({} preset: {} on {}, {} workers x {}, {length}; buckets scaled by their {})",
        args.preset,
        base.model,
        base.dataset,
        base.workers,
        base.batch_size,
        if args.norm == "max" {
            "largest magnitude"
        } else {
            "2-norm"
        }
    );
    let num =
        |row: &Value, key: &str, d: usize, s: f64| table::cell(row[key].as_f64().map(|x| x * s), d);
    println!(
        "{:<10} {:>10} {:>10} {:>10} {:>8} {:>12} {:>12} {:>10} {:>10} {:>7}",
        "Run",
        "Params",
        "Init. rate",
        "Top-1 %",
        "diff",
        "wire ratio",
        "msg ratio",
        "training",
        "speed-up",
        "claim"
    );
    for row in rows {
        println!(
            "{:<10} {:>10} {:>10} {:>10} {:>8} {:>12} {:>12} {:>10} {:>10} {:>7}",
            row["run"].as_str().unwrap_or(""),
            row["params"]
                .as_u64()
                .map_or("-".to_string(), |p| p.to_string()),
            num(row, "init_rate", 2, 1.0),
            num(row, "top1", 2, 100.0),
            num(row, "delta", 2, 100.0),
            num(row, "compression_ratio", 1, 1.0) + "x",
            num(row, "message_compression_ratio", 2, 1.0) + "x",
            num(row, "training_seconds", 1, 1.0) + " s",
            num(row, "speedup", 2, 1.0) + "x",
            verdict::cell(row["holds"].as_bool()),
        );
    }
    verdict::print_claims(rows, |r| r["run"].as_str().unwrap_or("").to_string());
    println!("\nThe paper (8 GPUs, CNTK; top-1 %)");
    println!(
        "{:<13} {:>9} {:>7} {:>10} {:>13} {:>16} {:>18}",
        "Network",
        "Dataset",
        "Params",
        "Init. rate",
        "Top-1 (32bit)",
        "Top-1 (QSGD)",
        "Speedup (8 GPUs)"
    );
    for p in &PAPER {
        println!(
            "{:<13} {:>9} {:>7} {:>10} {:>13} {:>16} {:>18}",
            p.network,
            p.dataset,
            p.params,
            p.init_rate,
            table::cell(p.top1_32bit, 2),
            p.top1_qsgd
                .map_or("-".to_string(), |(a, bits)| format!("{a:.2} ({bits})")),
            p.speedup
        );
    }
    println!(
        "(ours: top-1 = test accuracy after the last step; compression = dense ring bytes / \
         bytes this rank sent; training = wall time, evaluations included; speed-up = the \
         32-bit run's mean step time / this run's, on this machine. Runs, table1.csv, table1.json, curves.png and curves.svg in {})",
        args.out.display()
    );
}
