//! Tables VI and VII of paper 002 (gTop-k): the training speed of one worker (Table VI:
//! iteration time and throughput), and the system throughput of S-SGD with dense
//! AllReduce, Top-k sparsification (TopKAllReduce) and gTop-k sparsification
//! (gTopKAllReduce) on a 32-worker 1 GbE cluster (Table VII, with the speed-ups g/d and
//! g/t), printed beside the paper's numbers; writes `table7.csv` and `table7.json` into
//! `--out`.
//!
//! The paper's gTop-k S-SGD flattens the whole model's gradient into one vector, keeps
//! k = 0.001·m of it, and does not overlap communication with backward. The runs here do
//! the same: one bucket holding every parameter (`--bucket-elems` above the model's
//! size), density 0.001, methods `dense`, `topk` and `gtopk`, on synthetic data of each
//! model's input shape (throughput does not depend on the values). For each model:
//!
//! - one worker per method (`--steps` steps; the first `--skip` are not timed): Table VI
//!   is the dense run; the sparse runs add their compression (top-k selection, residual
//!   and put-back) to the iteration;
//! - `--workers` local workers per method over loopback: the measured throughput, which on
//!   a machine with fewer cores than workers also measures the workers' competition for
//!   them;
//! - a projection to `--project-world` workers (32) on the paper's network: each method's
//!   one-worker iteration time plus its collective's time in paper 002's α-β model
//!   (comm's `AlphaBeta`, α = 0.436 ms and β = 9·10⁻⁶ ms per byte by default), images per
//!   second = workers × batch / that time. The breakdown of the gTop-k iteration
//!   (computation, compression, communication: the paper's Figure 11) is printed with it.
//!
//! `--preset quick` runs ResNet-20 (batch 32), VGG-16 (16) and AlexNet (16) for 10 steps;
//! `--preset paper` the paper's four models at Table VI's batch sizes (ResNet-50's batch
//! of 256 takes minutes a step on a small CPU). `--models` picks a subset.

use anyhow::{bail, ensure, Result};
use benchmarks::table::{self, Job};
use benchmarks::verdict;
use clap::Parser;
use comm::AlphaBeta;
use serde_json::{json, Value};
use std::path::PathBuf;
use train::Config;

#[derive(Parser)]
#[command(
    about = "Paper 002's Tables VI and VII: one worker's training speed, and the throughput of dense, Top-k and gTop-k S-SGD measured on local workers and projected to 32 workers on the paper's 1 GbE alpha-beta model, beside the paper's numbers"
)]
struct Args {
    /// quick (ResNet-20, VGG-16 and AlexNet at small batches), paper (the paper's four
    /// models at Table VI's batch sizes) or smoke (ResNet-20 at 4 images, 3 steps, 2
    /// workers: seconds).
    #[arg(long, default_value = "quick")]
    preset: String,
    /// Only these models (of resnet20, vgg16, alexnet, resnet50).
    #[arg(long, value_delimiter = ',')]
    models: Vec<String>,
    /// Batch size per worker for every model (default: the preset's per model).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Local workers of the measured multi-worker runs.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Steps per run (quick: 10; paper: 20).
    #[arg(long)]
    steps: Option<usize>,
    /// Steps at the start of each run left out of the timing (allocation, first touch).
    #[arg(long, default_value_t = 2)]
    skip: usize,
    /// Workers of the projection.
    #[arg(long, default_value_t = 32)]
    project_world: usize,
    /// α of the projection in seconds (the paper's 1 GbE: 0.436 ms).
    #[arg(long, default_value_t = 0.436e-3)]
    alpha: f64,
    /// β of the projection in seconds per byte (the paper's 1 GbE: 9·10⁻⁶ ms).
    #[arg(long, default_value_t = 9e-9)]
    beta: f64,
    /// Density of Top-k and gTop-k (the paper's ρ).
    #[arg(long, default_value_t = 0.001)]
    density: f64,
    /// Where the runs and the table go.
    #[arg(long, default_value = "runs/gtopk_table7")]
    out: PathBuf,
    #[command(flatten)]
    common: table::CommonArgs,
}

/// A model of the paper's Tables VI and VII with its numbers: Table VI's batch size,
/// iteration time (s) and throughput; Table VII's images/s with dense, Top-k and gTop-k
/// on 32 GPUs.
struct PaperRow {
    model: &'static str,
    label: &'static str,
    batch: usize,
    iteration_s: f64,
    throughput: f64,
    dense: f64,
    topk: f64,
    gtopk: f64,
    /// The paper's printed speed-ups, g/d and g/t (rounded there; AlexNet's 12.8× is
    /// 505/39 = 12.95 by its own throughputs).
    g_over_d: f64,
    g_over_t: f64,
    /// The quick preset's batch per worker.
    quick_batch: usize,
}

const PAPER: [PaperRow; 4] = [
    PaperRow {
        model: "vgg16",
        label: "VGG-16",
        batch: 128,
        iteration_s: 0.097,
        throughput: 1317.0,
        dense: 403.0,
        topk: 2016.0,
        gtopk: 3020.0,
        g_over_d: 7.5,
        g_over_t: 1.5,
        quick_batch: 16,
    },
    PaperRow {
        model: "resnet20",
        label: "ResNet-20",
        batch: 128,
        iteration_s: 0.146,
        throughput: 876.0,
        dense: 9212.0,
        topk: 22272.0,
        gtopk: 25280.0,
        g_over_d: 2.7,
        g_over_t: 1.1,
        quick_batch: 32,
    },
    PaperRow {
        model: "alexnet",
        label: "AlexNet",
        batch: 64,
        iteration_s: 0.369,
        throughput: 173.0,
        dense: 39.0,
        topk: 296.0,
        gtopk: 505.0,
        g_over_d: 12.8,
        g_over_t: 1.7,
        quick_batch: 16,
    },
    PaperRow {
        model: "resnet50",
        label: "ResNet-50",
        batch: 256,
        iteration_s: 4.842,
        throughput: 52.0,
        dense: 343.0,
        topk: 978.0,
        gtopk: 1251.0,
        g_over_d: 3.65,
        g_over_t: 1.3,
        quick_batch: 16,
    },
];

const METHODS: [&str; 3] = ["dense", "topk", "gtopk"];

/// The paper rows this run covers, in the paper's order.
fn selected(args: &Args) -> Result<Vec<&'static PaperRow>> {
    for m in &args.models {
        if !PAPER.iter().any(|p| p.model == m) {
            bail!("--models {m}: expected some of resnet20, vgg16, alexnet, resnet50");
        }
    }
    let wanted = |p: &PaperRow| match (args.models.is_empty(), args.preset.as_str()) {
        (false, _) => args.models.iter().any(|m| m == p.model),
        (true, "quick") => p.model != "resnet50",
        (true, _) => true,
    };
    Ok(PAPER.iter().filter(|p| wanted(p)).collect())
}

fn validate(args: &Args) -> Result<()> {
    ensure!(
        matches!(args.preset.as_str(), "quick" | "paper"),
        "--preset {}: expected smoke, quick or paper",
        args.preset
    );
    ensure!(
        args.workers >= 2,
        "--workers must be at least 2 (one worker exchanges nothing)"
    );
    ensure!(
        args.project_world >= 2,
        "--project-world must be at least 2"
    );
    ensure!(
        args.density > 0.0 && args.density <= 1.0,
        "--density {} must be in (0, 1]",
        args.density
    );
    ensure!(
        args.alpha >= 0.0 && args.beta > 0.0,
        "--alpha must be >= 0 and --beta > 0"
    );
    ensure!(
        args.batch_size != Some(0),
        "--batch-size must be at least 1"
    );
    let steps = steps(args);
    ensure!(
        steps > args.skip,
        "--steps {steps} leaves no timed step after --skip {}",
        args.skip
    );
    Ok(())
}

fn steps(args: &Args) -> usize {
    args.steps
        .unwrap_or(if args.preset == "quick" { 10 } else { 20 })
}

fn main() {
    table::main(|a: &Args| &a.common, run);
}

fn run(mut args: Args) -> Result<()> {
    let smoke = args.preset == "smoke";
    if smoke {
        // The pipeline on the smallest model: ResNet-20 (unless --models names others),
        // 4 images, 3 steps of which 1 untimed, 2 workers.
        args.preset = "quick".into();
        if args.models.is_empty() {
            args.models = vec!["resnet20".into()];
        }
        args.batch_size = args.batch_size.or(Some(4));
        args.steps = args.steps.or(Some(3));
        if args.skip == 2 {
            args.skip = 1;
        }
        if args.workers == 4 {
            args.workers = 2;
        }
    }
    validate(&args)?;
    let models = selected(&args)?;
    table::create_out(&args.out)?;
    let net = AlphaBeta {
        alpha: args.alpha,
        beta: args.beta,
    };
    let mut rows = Vec::new();
    for paper in models {
        rows.push(measure(&args, paper, &net, smoke)?);
    }
    table::write_rows(
        &args.out,
        "table7",
        &rows,
        &[
            "model",
            "params",
            "batch",
            "steps",
            "iteration_s",
            "compute_s",
            "throughput",
            "step_topk_s",
            "step_gtopk_s",
            "compress_topk_s",
            "compress_gtopk_s",
            "measured_world",
            "measured_dense",
            "measured_topk",
            "measured_gtopk",
            "measured_g_over_d",
            "measured_g_over_t",
            "project_world",
            "comm_dense_s",
            "comm_topk_s",
            "comm_gtopk_s",
            "projected_dense",
            "projected_topk",
            "projected_gtopk",
            "projected_g_over_d",
            "projected_g_over_t",
            "paper_batch",
            "paper_iteration_s",
            "paper_throughput",
            "paper_dense",
            "paper_topk",
            "paper_gtopk",
            "paper_g_over_d",
            "paper_g_over_t",
            "claim",
            "holds",
        ],
    )?;
    table::print_rows(&args.common, &rows, || print_tables(&args, &rows))
}

/// One model's row: its six jobs (each method on one worker and on `--workers`), the
/// measured and projected throughputs and speed-ups, the paper's numbers and its claim.
fn measure(args: &Args, paper: &PaperRow, net: &AlphaBeta, smoke: bool) -> Result<Value> {
    let (p, steps) = (args.project_world, steps(args));
    let batch = args.batch_size.unwrap_or(if args.preset == "quick" {
        paper.quick_batch
    } else {
        paper.batch
    });
    // Every run: this model on synthetic data, one bucket of the whole gradient.
    let run = |method: &str, workers: usize| -> Result<Job> {
        let cfg = Config {
            model: paper.model.into(),
            dataset: "synthetic".into(),
            method: method.into(),
            method_opts: if method == "dense" {
                Vec::new()
            } else {
                vec![format!("density={}", args.density)]
            },
            workers,
            batch_size: batch,
            steps: Some(steps),
            lr: 0.01,
            log_every: 1,
            eval_samples: Some(batch),
            bucket_elems: 1 << 40, // above any model: one bucket (TOML integers are i64)
            out: args
                .out
                .join(format!("{}-{method}-{workers}w", paper.model)),
            ..Config::default()
        };
        table::run_job(&cfg, &format!("{} {method}", paper.label), &args.common)
    };
    let mut row = json!({"model": paper.label, "batch": batch, "steps": steps,
        "measured_world": args.workers, "project_world": p});
    for method in METHODS {
        let one = run(method, 1)?;
        let params = one.summary["parameters"].as_u64().unwrap_or(0) as usize;
        row["params"] = json!(params);
        let step = one.mean_step("step_seconds", args.skip);
        if method == "dense" {
            row["iteration_s"] = json!(step);
            row["compute_s"] = json!(one.mean_step("compute_seconds", args.skip));
            row["throughput"] = json!(step.map(|s| batch as f64 / s));
        } else {
            row[format!("step_{method}_s")] = json!(step);
            row[format!("compress_{method}_s")] =
                json!(one.mean_step("compression_seconds", args.skip));
        }
        let many = run(method, args.workers)?;
        let step_many = many.mean_step("step_seconds", args.skip);
        row[format!("measured_{method}")] =
            json!(step_many.map(|s| (args.workers * batch) as f64 / s));
        let k = ((params as f64 * args.density).round() as usize).max(1);
        let comm = match method {
            "dense" => net.allreduce(p, 4 * params),
            "topk" => net.topk_allreduce(p, k),
            _ => net.gtopk_allreduce(p, k),
        };
        row[format!("comm_{method}_s")] = json!(comm);
        row[format!("projected_{method}")] = json!(step.map(|s| (p * batch) as f64 / (s + comm)));
    }
    let ratio = |a: &str, b: &str, row: &Value| -> Option<f64> {
        Some(row[a].as_f64()? / row[b].as_f64()?)
    };
    for kind in ["measured", "projected"] {
        let (g, d, t) = (
            format!("{kind}_gtopk"),
            format!("{kind}_dense"),
            format!("{kind}_topk"),
        );
        row[format!("{kind}_g_over_d")] = json!(ratio(&g, &d, &row));
        row[format!("{kind}_g_over_t")] = json!(ratio(&g, &t, &row));
    }
    row["paper_batch"] = json!(paper.batch);
    row["paper_iteration_s"] = json!(paper.iteration_s);
    row["paper_throughput"] = json!(paper.throughput);
    row["paper_dense"] = json!(paper.dense);
    row["paper_topk"] = json!(paper.topk);
    row["paper_gtopk"] = json!(paper.gtopk);
    row["paper_g_over_d"] = json!(paper.g_over_d);
    row["paper_g_over_t"] = json!(paper.g_over_t);
    let holds = row["projected_g_over_d"]
        .as_f64()
        .zip(row["projected_g_over_t"].as_f64())
        .map(|(d, t)| d > 1.0 && t > 1.0);
    verdict::Verdict::of(
        format!(
            "gTop-k S-SGD is faster than dense and than Top-k S-SGD at {p} workers on 1 GbE \
             (Table VII: {}x and {}x), in the alpha-beta projection",
            paper.g_over_d, paper.g_over_t
        ),
        holds,
    )
    .judged_if(!smoke)
    .put(&mut row);
    Ok(row)
}

fn print_tables(args: &Args, rows: &[Value]) {
    let num =
        |row: &Value, key: &str, d: usize, s: f64| table::cell(row[key].as_f64().map(|x| x * s), d);
    println!(
        "gTop-k, Table VI: one worker's training speed on this machine ({} preset, synthetic data)",
        args.preset
    );
    println!(
        "{:<10} {:>11} {:>6} {:>11} {:>12} | {:>11} {:>11} {:>12}",
        "Model",
        "parameters",
        "batch",
        "iteration",
        "images/s",
        "paper batch",
        "iteration",
        "images/s"
    );
    for r in rows {
        println!(
            "{:<10} {:>11} {:>6} {:>11} {:>12} | {:>11} {:>11} {:>12}",
            r["model"].as_str().unwrap_or(""),
            r["params"].to_string(),
            r["batch"].to_string(),
            num(r, "iteration_s", 3, 1.0) + " s",
            num(r, "throughput", 1, 1.0),
            r["paper_batch"].to_string(),
            num(r, "paper_iteration_s", 3, 1.0) + " s",
            num(r, "paper_throughput", 0, 1.0),
        );
    }
    println!("(the paper: one P102-100 GPU)");

    let w = args.workers;
    println!(
        "\ngTop-k, Table VII: system throughput in images/s (density {}; one bucket, no overlap, as the paper)",
        args.density
    );
    println!(
        "{:<10} | {:^39} | {:^39} | {:^39}",
        "",
        format!("measured, {w} local workers"),
        format!("projected, {} workers, alpha-beta", args.project_world),
        "paper, 32 GPUs, 1 GbE"
    );
    let head = format!(
        "{:>8} {:>8} {:>8} {:>6} {:>6}",
        "Dense", "Top-k", "gTop-k", "g/d", "g/t"
    );
    println!("{:<10} | {head} | {head} | {head}", "Model");
    for r in rows {
        let group = |kind: &str, d: usize| {
            format!(
                "{:>8} {:>8} {:>8} {:>6} {:>6}",
                num(r, &format!("{kind}_dense"), d, 1.0),
                num(r, &format!("{kind}_topk"), d, 1.0),
                num(r, &format!("{kind}_gtopk"), d, 1.0),
                num(r, &format!("{kind}_g_over_d"), 2, 1.0) + "x",
                num(r, &format!("{kind}_g_over_t"), 2, 1.0) + "x",
            )
        };
        println!(
            "{:<10} | {} | {} | {}",
            r["model"].as_str().unwrap_or(""),
            group("measured", 1),
            group("projected", 1),
            group("paper", 0)
        );
    }
    println!(
        "\nThe projected gTop-k iteration, {} workers (the paper's Figure 11): ms",
        args.project_world
    );
    println!(
        "{:<10} {:>12} {:>12} {:>12} {:>14} {:>14}",
        "Model", "computation", "compression", "comm. (gTop-k)", "comm. (Top-k)", "comm. (dense)"
    );
    for r in rows {
        // Compression is what the gTop-k run's step spent compressing; computation the
        // dense run's forward and backward.
        println!(
            "{:<10} {:>12} {:>12} {:>12} {:>14} {:>14}",
            r["model"].as_str().unwrap_or(""),
            num(r, "compute_s", 1, 1e3),
            num(r, "compress_gtopk_s", 1, 1e3),
            num(r, "comm_gtopk_s", 1, 1e3),
            num(r, "comm_topk_s", 1, 1e3),
            num(r, "comm_dense_s", 1, 1e3),
        );
    }
    verdict::print_claims(rows, |r| r["model"].as_str().unwrap_or("").to_string());
    println!(
        "(measured: workers x batch / mean step time over steps {}..{}, rank 0's clock; projected: \
         workers x batch / (one worker's mean step time with that method + its collective's \
         alpha-beta time, alpha = {:.3} ms, beta = {:.3} ns/byte). Runs, table7.csv and table7.json in {})",
        args.skip + 1,
        steps(args),
        args.alpha * 1e3,
        args.beta * 1e9,
        args.out.display()
    );
}
