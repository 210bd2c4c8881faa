//! DGC's Table 2: dense baseline, gradient dropping and Deep Gradient Compression trained
//! with the same schedule and 4 (8, 16, 32) workers, printed in the paper's layout with
//! its numbers beside ours: method, workers, total batch, top-1 accuracy, difference to
//! the baseline, gradient compression ratio. Writes `table2.csv`, `table2.json` and the
//! learning curves (`curves.png` and `curves.svg`, Figure 3(a) style) into `--out`.
//!
//! `--preset quick`: ResNet-20 on Fashion-MNIST, 4 workers × 32, 5 epochs (learning rate
//! ×0.1 after epoch 4), DGC's sparsity warm-up in the first epoch; about 33 minutes on 2
//! cores. (Not 3: with the warm-up a third of training and one epoch at the low rate, DGC
//! ended 1.1–1.4 points short of the baseline; see RESULTS.md.)
//! `--preset paper`: ResNet-110 on CIFAR-10 (`--data-dir`), 164 epochs with the rate ×0.1
//! at 82 and 123, warm-up over 4 epochs, 4/8/16/32 workers.
//! `--preset smoke`: quick's three jobs on synthetic data for 16 steps each (about a
//! minute on 2 cores): it proves the pipeline, and judges no claim.
//!
//! Each row states the paper's claim for it and whether this run upholds it: gradient
//! dropping's curve "is worse than the baseline due to gradient staleness" (§4.2; in
//! Table 2 it ends below DGC at every worker count), and "the accuracy of ResNet-110 is
//! fully maintained while using Deep Gradient Compression", Table 2's DGC rows lying
//! +0.06 to +0.36 points from the baseline's, at the 270-600x of §5; we judge
//! "maintained" as within 0.5 points, about twice our baseline's spread over two seeds
//! (0.21).
//!
//! Each run is a real job: this binary re-executes itself as the workers
//! (`--worker-config`), exactly as `train --workers N` does.

use anyhow::{bail, Context, Result};
use benchmarks::{table, verdict};
use clap::Parser;
use serde_json::{json, Value};
use std::path::PathBuf;
use train::Config;

#[derive(Parser)]
#[command(
    about = "DGC Table 2: baseline, gradient dropping and DGC with N workers, beside the paper's numbers"
)]
struct Args {
    /// quick (ResNet-20, Fashion-MNIST, 4 workers), paper (ResNet-110, CIFAR-10, 4-32
    /// workers) or smoke (quick's jobs on synthetic data, 16 steps each).
    #[arg(long, default_value = "quick")]
    preset: String,
    /// Dataset directory (needed for paper: the CIFAR-10 binary batches).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Where the runs and the table go.
    #[arg(long, default_value = "runs/dgc_table2")]
    out: PathBuf,
    /// Worker counts (default: the preset's).
    #[arg(long, value_delimiter = ',')]
    workers: Option<Vec<usize>>,
    /// Epochs (default: the preset's).
    #[arg(long)]
    epochs: Option<usize>,
    /// Stop each run after this many steps (a smoke test of the whole pipeline).
    #[arg(long)]
    max_steps: Option<usize>,
    /// Evaluate on at most this many test samples.
    #[arg(long)]
    eval_samples: Option<usize>,
    #[command(flatten)]
    common: table::CommonArgs,
}

/// The paper's Table 2 (ResNet-110, CIFAR-10): (workers, method, top-1 %).
const PAPER: [(usize, &str, f64); 12] = [
    (4, "baseline", 93.75),
    (4, "gradient dropping", 92.75),
    (4, "dgc", 93.87),
    (8, "baseline", 92.92),
    (8, "gradient dropping", 93.02),
    (8, "dgc", 93.28),
    (16, "baseline", 93.14),
    (16, "gradient dropping", 92.93),
    (16, "dgc", 93.20),
    (32, "baseline", 93.10),
    (32, "gradient dropping", 92.10),
    (32, "dgc", 93.18),
];

struct Preset {
    base: Config,
    workers: Vec<usize>,
    dgc_warmup_epochs: f64,
    dgc_dense_below: usize,
}

fn preset(args: &Args) -> Result<Preset> {
    let mut c = Config {
        momentum: 0.9,
        weight_decay: 1e-4,
        lr: 0.1,
        batch_size: 32,
        log_every: 20,
        ..Config::default()
    };
    Ok(match args.preset.as_str() {
        "quick" | "smoke" => {
            let smoke = args.preset == "smoke";
            c.model = "resnet20".into();
            c.dataset = if smoke { "synthetic" } else { "fashion-mnist" }.into();
            c.data_dir = args.data_dir.clone();
            if smoke {
                c.steps = Some(args.max_steps.unwrap_or(16));
                c.eval_samples = Some(args.eval_samples.unwrap_or(64));
            }
            let epochs = args.epochs.unwrap_or(if smoke { 1 } else { 5 });
            c.epochs = Some(epochs);
            c.schedule = train::config::Schedule::Multistep;
            c.milestones = vec![(epochs as f64 - 1.0).max(1.0)];
            // ResNet-20's 2.2 k batch-norm and bias values, sent dense, would cap the
            // ratio near 100×; the quick preset compresses every tensor.
            Preset {
                base: c,
                workers: args.workers.clone().unwrap_or(vec![4]),
                dgc_warmup_epochs: 1.0,
                dgc_dense_below: 0,
            }
        }
        "paper" => {
            c.model = "resnet110".into();
            c.dataset = "cifar10".into();
            c.data_dir = Some(
                args.data_dir
                    .clone()
                    .context("--preset paper needs --data-dir with the CIFAR-10 binary batches")?,
            );
            c.epochs = Some(args.epochs.unwrap_or(164));
            c.schedule = train::config::Schedule::Multistep;
            c.milestones = vec![82.0, 123.0];
            Preset {
                base: c,
                workers: args.workers.clone().unwrap_or(vec![4, 8, 16, 32]),
                dgc_warmup_epochs: 4.0,
                dgc_dense_below: 1000,
            }
        }
        p => bail!("--preset {p}: expected smoke, quick or paper"),
    })
}

/// The paper's claim for row `r`, judged against the rows of the same worker count.
fn claim(r: &Value, rows: &[Value]) -> verdict::Verdict {
    let top1 = |method: &str| {
        rows.iter()
            .find(|o| o["workers"] == r["workers"] && o["method"] == method)
            .and_then(|o| o["top1"].as_f64())
            .filter(|a| a.is_finite())
    };
    let delta = r["delta"].as_f64().filter(|d| d.is_finite());
    match r["method"].as_str() {
        Some("gradient dropping") => verdict::Verdict::of(
            "gradient dropping falls below DGC (§4.2: staleness; Table 2: by 0.26 to 1.12 \
             points)",
            top1("gradient dropping")
                .zip(top1("dgc"))
                .map(|(gd, dgc)| gd < dgc),
        ),
        Some("dgc") => verdict::Verdict::of(
            "DGC keeps the baseline's accuracy, within 0.5 points (Table 2: +0.06 to +0.36), \
             at 270x or more after the warm-up (§5: 270-600x)",
            delta
                .zip(r["message_ratio_after_warmup"].as_f64())
                .map(|(d, ratio)| d >= -0.5 && ratio >= 270.0),
        ),
        _ => verdict::Verdict::none(),
    }
}

fn main() {
    table::main(|a: &Args| &a.common, run);
}

fn run(args: Args) -> Result<()> {
    table::check_counts(&[
        ("--epochs", args.epochs),
        ("--max-steps", args.max_steps),
        ("--eval-samples", args.eval_samples),
    ])?;
    if let Some(w) = &args.workers {
        anyhow::ensure!(!w.is_empty(), "--workers needs at least one worker count");
        if w.contains(&0) {
            bail!("--workers 0: every worker count must be at least 1");
        }
    }
    if let (true, Some(d)) = (args.preset == "smoke", &args.data_dir) {
        bail!(
            "--preset smoke trains on synthetic data, so --data-dir {} would be ignored",
            d.display()
        );
    }
    let p = preset(&args)?;
    table::create_out(&args.out)?;
    let methods: [(&str, &str, Vec<String>); 3] = [
        ("baseline", "dense", vec![]),
        ("gradient dropping", "topk", vec!["density=0.001".into()]),
        (
            "dgc",
            "dgc",
            vec![
                "density=0.001".into(),
                format!("warmup_epochs={}", p.dgc_warmup_epochs),
                format!("dense_below={}", p.dgc_dense_below),
            ],
        ),
    ];
    let mut rows = Vec::new();
    let mut curves = Vec::new();
    let judge = args.preset != "smoke";
    for &workers in &p.workers {
        let mut baseline = None;
        for (label, method, opts) in &methods {
            let cfg = Config {
                method: method.to_string(),
                method_opts: opts.clone(),
                workers,
                out: args.out.join(format!("{}-{workers}", method)),
                steps: args.max_steps.or(p.base.steps),
                eval_samples: args.eval_samples.or(p.base.eval_samples),
                ..p.base.clone()
            };
            let job = table::run_job(&cfg, label, &args.common)?;
            let acc = job.final_metric().unwrap_or(f64::NAN) * 100.0;
            let base = *baseline.get_or_insert(acc);
            let after = if *method == "dgc" {
                p.dgc_warmup_epochs
            } else {
                0.0
            };
            let paper = PAPER
                .iter()
                .find(|r| r.0 == workers && r.1 == *label)
                .map(|r| r.2);
            let paper_base = PAPER
                .iter()
                .find(|r| r.0 == workers && r.1 == "baseline")
                .map(|r| r.2);
            rows.push(json!({
                "method": label,
                "workers": workers,
                "total_batch": workers * cfg.batch_size,
                "top1": acc,
                "delta": acc - base,
                "compression_ratio": job.compression_ratio(),
                "compression_ratio_after_warmup": job.ratio_after(after),
                // The paper's measure (the gradient's bytes over the encoded message's),
                // as dgc_table3/4 print it; the two above are the wire's.
                "message_ratio_after_warmup": job.message_ratio_after(after),
                "paper_top1": paper,
                "paper_delta": paper.zip(paper_base).map(|(a, b)| a - b),
                "wall_seconds": job.wall_seconds,
            }));
            curves.push((format!("{label} ({workers})"), job.eval_curve()));
        }
    }
    let verdicts: Vec<verdict::Verdict> = rows.iter().map(|r| claim(r, &rows)).collect();
    for (r, v) in rows.iter_mut().zip(verdicts) {
        v.judged_if(judge).put(r);
    }
    table::write_table(
        &args.out,
        "table2",
        &rows,
        &[
            "method",
            "workers",
            "total_batch",
            "top1",
            "delta",
            "compression_ratio",
            "compression_ratio_after_warmup",
            "message_ratio_after_warmup",
            "paper_top1",
            "paper_delta",
            "wall_seconds",
            "claim",
            "holds",
        ],
        curves,
        "DGC Table 2: test accuracy",
        "top-1 accuracy",
    )?;
    table::print_rows(&args.common, &rows, || print_table(&args, &p, &rows))
}

fn print_table(args: &Args, p: &Preset, rows: &[Value]) {
    println!(
        "DGC Table 2 ({} preset: {} on {}; the paper: ResNet-110 on CIFAR-10)",
        args.preset, p.base.model, p.base.dataset
    );
    println!(
        "{:<8} {:<12} {:<20} {:>9} {:>8} {:>12} {:>16} {:>16} {:>10} {:>8} {:>7}",
        "workers",
        "total batch",
        "method",
        "top-1 %",
        "delta",
        "wire ratio",
        "wire post-warmup",
        "msg post-warmup",
        "paper %",
        "paper Δ",
        "claim"
    );
    let f = |v: &Value, d: usize| table::cell(v.as_f64(), d);
    for r in rows {
        println!(
            "{:<8} {:<12} {:<20} {:>9} {:>+8.2} {:>12} {:>16} {:>16} {:>10} {:>8} {:>7}",
            r["workers"].as_u64().unwrap_or(0),
            r["total_batch"].as_u64().unwrap_or(0),
            r["method"].as_str().unwrap_or(""),
            f(&r["top1"], 2),
            r["delta"].as_f64().unwrap_or(f64::NAN),
            f(&r["compression_ratio"], 1),
            f(&r["compression_ratio_after_warmup"], 1),
            f(&r["message_ratio_after_warmup"], 1),
            f(&r["paper_top1"], 2),
            f(&r["paper_delta"], 2),
            verdict::cell(r["holds"].as_bool())
        );
    }
    verdict::print_claims(rows, |r| {
        format!(
            "{} ({} workers)",
            r["method"].as_str().unwrap_or(""),
            r["workers"]
        )
    });
    println!(
        "(runs, table2.csv, table2.json, curves.png and curves.svg in {})",
        args.out.display()
    );
}
