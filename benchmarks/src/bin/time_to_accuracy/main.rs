//! Does compression pay? The wall-clock time each method takes to reach a target test
//! metric, ours beside PyTorch DDP's (no hook, and its fp16, bf16 and PowerSGD
//! communication hooks), on the same job, at each link rate of an emulated cluster
//! network: W network namespaces with one shaped link each (`scripts/netem.sh`), one
//! worker process per namespace, gloo and our TCP bound to the namespace's address.
//!
//! - `--preset quick`: the README's main job (ResNet-20 on Fashion-MNIST, 4 workers × 32,
//!   one epoch, evaluated every 50 steps on 2,000 test images, target 85 % accuracy) and
//!   the 2 × 200 LSTM on the King James Bible (`--tasks lstm`; see `--help`), at
//!   100 Mbit/s, 1 Gbit/s and 10 Gbit/s.
//! - `--preset smoke`: every row for 30 steps of ResNet-20 with 2 workers on synthetic
//!   data, unshaped (loopback, no namespaces): the pipeline, not the verdicts; about
//!   5 minutes on 2 cores. The DDP rows run where PyTorch imports, and are skipped (said
//!   in the table) where it does not.
//!
//! Both sides start from the same weights: our first row writes `initial.safetensors`,
//! which `benchmarks/reference/ddp_train.py` loads. Both run one compute thread per
//! worker (`RAYON_NUM_THREADS=1`, `torch.set_num_threads(1)`), the same batch, learning
//! rate, momentum, weight decay, seed and evaluation points; evaluation time is left out
//! of the time to the target on both. Writes, per task, `{task}.csv`/`.json` (a row per
//! method and rate) and `{task}-{rate}.png`/`.svg` (the metric against training seconds,
//! one line per row), and prints a table per task with a verdict per rate.

mod ddp;
mod ours;
mod report;

use anyhow::{bail, Context, Result};
use benchmarks::table;
use clap::Parser;
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(
    about = "Time to a target accuracy of our methods and PyTorch DDP's hooks at each emulated link rate",
    long_about = "Time to a target accuracy of our methods and PyTorch DDP's communication hooks, on \
the same job from the same weights, at each link rate of an emulated cluster network \
(scripts/netem.sh: one network namespace and shaped link per worker; needs root and \
iproute2). Evaluation time is excluded. The DDP rows need `pip install torch safetensors` \
for $PYTHON (default python3) and are skipped, with a note, without it.\n\n\
Presets: quick (ResNet-20 on Fashion-MNIST, 4 workers x 32, 1 epoch, target 85 %; with \
--tasks lstm also the 2 x 200 LSTM on the King James Bible, target perplexity 250) at \
100mbit,1gbit,10gbit; smoke (30 steps of ResNet-20 on synthetic data, 2 workers, \
unshaped loopback)."
)]
struct Args {
    /// smoke or quick (see above).
    #[arg(long, default_value = "quick", value_parser = ["smoke", "quick"])]
    preset: String,
    /// Tasks, comma-separated: resnet20, lstm (quick default: resnet20).
    #[arg(long, value_delimiter = ',')]
    tasks: Vec<String>,
    /// Link rates, comma-separated, as tc reads them (100mbit, 1gbit, ...), or `unshaped`
    /// for loopback without namespaces (quick default: 100mbit,1gbit,10gbit; smoke:
    /// unshaped).
    #[arg(long, value_delimiter = ',')]
    rates: Vec<String>,
    /// One-way delay added between any two hosts (netem), e.g. 0.1ms.
    #[arg(long)]
    delay: Option<String>,
    /// Only these rows, comma-separated labels (ours: dense, dense-bf16, dgc, powersgd,
    /// gtopk; DDP: ddp, ddp-fp16, ddp-bf16, ddp-powersgd).
    #[arg(long, value_delimiter = ',')]
    rows: Vec<String>,
    /// Workers (quick: 4; smoke: 2).
    #[arg(long)]
    workers: Option<usize>,
    /// Steps per run instead of the preset's epochs.
    #[arg(long)]
    steps: Option<usize>,
    /// The target metric (accuracy as a fraction; perplexity for lstm) instead of the
    /// preset's.
    #[arg(long)]
    target: Option<f64>,
    /// Fashion-MNIST's IDX files (default: the Debian package's).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Where the runs and tables go.
    #[arg(long, default_value = "runs/time_to_accuracy")]
    out: PathBuf,
    #[command(flatten)]
    common: table::CommonArgs,
}

/// A task of the table: its job (a trainer configuration, less the method), its target
/// and how to read its metric.
pub struct Task {
    pub name: &'static str,
    pub base: train::Config,
    pub target: f64,
    pub lower_is_better: bool,
    /// Whether the PyTorch side has this task (ddp_train.py trains ResNet-20 only).
    pub ddp: bool,
}

/// One link rate: the tc rate, or None for loopback without namespaces.
#[derive(Clone, Debug)]
pub struct Rate {
    pub label: String,
    pub tc: Option<String>,
}

/// Where one cell ran and what it measured.
pub struct Cell {
    pub row: String,
    pub system: &'static str,
    pub rate: String,
    /// Metric against training seconds (evaluations left out).
    pub curve: Vec<(f64, f64)>,
    pub reached_seconds: Option<f64>,
    pub final_metric: Option<f64>,
    pub steps_per_second: Option<f64>,
    pub bytes_per_step: Option<f64>,
    /// Mean seconds per step of compute, compression, communication and idle (ours).
    pub split: Option<[f64; 4]>,
    /// Why the row has no numbers (PyTorch missing, the task not on that side).
    pub skipped: Option<String>,
}

fn tasks(args: &Args) -> Result<Vec<Task>> {
    let smoke = args.preset == "smoke";
    let names: Vec<String> = if args.tasks.is_empty() {
        vec!["resnet20".into()]
    } else {
        args.tasks.clone()
    };
    names
        .iter()
        .map(|n| match n.as_str() {
            "resnet20" => Ok(resnet20(args, smoke)),
            "lstm" if !smoke => Ok(lstm(args)),
            "lstm" => bail!("--tasks lstm has no smoke preset (the KJV corpus is prepared with `datasets prepare kjv`)"),
            other => bail!("--tasks {other}: the tasks are resnet20 and lstm"),
        })
        .collect()
}

fn resnet20(args: &Args, smoke: bool) -> Task {
    let mut c = train::Config {
        model: "resnet20".into(),
        dataset: if smoke { "synthetic" } else { "fashion-mnist" }.into(),
        data_dir: args.data_dir.clone(),
        workers: args.workers.unwrap_or(if smoke { 2 } else { 4 }),
        batch_size: 32,
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 1e-4,
        checkpoint_every: 0,
        log_every: 10,
        ..train::Config::default()
    };
    if smoke {
        c.steps = Some(args.steps.unwrap_or(30));
        c.eval_every = 10;
        c.eval_samples = Some(256);
        c.synthetic_samples = 2048;
    } else {
        c.steps = args.steps;
        c.epochs = args.steps.is_none().then_some(1);
        c.eval_every = 50;
        c.eval_samples = Some(2000);
    }
    Task {
        name: "resnet20",
        base: c,
        // Smoke: a target every row of ours passes on synthetic data, so that the time to
        // it is read off (PyTorch's random smoke images stay at chance, 0.1).
        target: args.target.unwrap_or(if smoke { 0.1 } else { 0.85 }),
        lower_is_better: false,
        ddp: true,
    }
}

fn lstm(args: &Args) -> Task {
    let c = train::Config {
        model: "lstm_lm".into(),
        dataset: "kjv".into(),
        data_dir: Some(args.data_dir.clone().unwrap_or_else(|| "data/kjv".into())),
        hidden: Some(200),
        workers: args.workers.unwrap_or(4),
        batch_size: 20,
        bptt: 35,
        lr: 20.0,
        momentum: 0.0,
        weight_decay: 0.0,
        clip: 0.25,
        checkpoint_every: 0,
        log_every: 10,
        steps: args.steps,
        epochs: args.steps.is_none().then_some(1),
        eval_every: 100,
        ..train::Config::default()
    };
    Task {
        name: "lstm",
        base: c,
        target: args.target.unwrap_or(250.0),
        lower_is_better: true,
        ddp: false,
    }
}

fn rates(args: &Args) -> Result<Vec<Rate>> {
    let given: Vec<String> = if !args.rates.is_empty() {
        args.rates.clone()
    } else if args.preset == "smoke" {
        vec!["unshaped".into()]
    } else {
        ["100mbit", "1gbit", "10gbit"].map(String::from).to_vec()
    };
    given
        .into_iter()
        .map(|r| {
            if r == "unshaped" {
                return Ok(Rate {
                    label: "unshaped (loopback)".into(),
                    tc: None,
                });
            }
            ours::rate_bits(&r)?;
            Ok(Rate {
                label: r.clone(),
                tc: Some(r),
            })
        })
        .collect()
}

/// The shaped rates need network namespaces: root and `ip`. Checked before any job runs.
fn check_netem(rates: &[Rate]) -> Result<()> {
    if rates.iter().all(|r| r.tc.is_none()) {
        return Ok(());
    }
    let uid = std::process::Command::new("id").arg("-u").output();
    if !uid.is_ok_and(|o| o.stdout.trim_ascii() == b"0") {
        bail!("shaped --rates need root (network namespaces); `--rates unshaped` runs on loopback");
    }
    let ip = std::process::Command::new("ip").arg("-V").output();
    if !ip.is_ok_and(|o| o.status.success()) {
        bail!("shaped --rates need iproute2's `ip` and `tc` (apt-get install iproute2)");
    }
    Ok(())
}

/// The repository's `scripts/netem.sh` (beside the source tree the binary was built from,
/// else under the current directory).
pub fn netem_script() -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/netem.sh");
    if built.exists() {
        return built;
    }
    PathBuf::from("scripts/netem.sh")
}

/// A directory name for a rate (and the delay, where one is added: `--reuse` must not
/// take a run without it).
pub fn rate_dir(rate: &Rate, delay: Option<&str>) -> String {
    match (&rate.tc, delay) {
        (None, _) => "unshaped".into(),
        (Some(tc), None) => tc.clone(),
        (Some(tc), Some(d)) => format!("{tc}-delay{d}"),
    }
}

fn run(args: Args) -> Result<()> {
    if args.workers == Some(0) || args.steps == Some(0) {
        bail!("--workers and --steps must be at least 1");
    }
    // One compute thread per worker on both sides (ddp_train.py --threads 1): our
    // workers inherit this (the table's own process runs no kernels).
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let tasks = tasks(&args)?;
    let known = || {
        ours::ROWS
            .iter()
            .map(|r| r.label)
            .chain(ddp::ROWS.iter().map(|r| r.label))
    };
    if let Some(bad) = args.rows.iter().find(|r| !known().any(|k| k == r.as_str())) {
        bail!(
            "--rows {bad}: no such row (the rows: {})",
            known().collect::<Vec<_>>().join(", ")
        );
    }
    let rates = rates(&args)?;
    check_netem(&rates)?;
    table::create_out(&args.out)?;
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let torch = ddp::torch_available(&python);
    for task in &tasks {
        let mut cells: Vec<Cell> = Vec::new();
        for rate in &rates {
            let dir = args
                .out
                .join(task.name)
                .join(rate_dir(rate, args.delay.as_deref()));
            for row in ours::ROWS {
                if !args.rows.is_empty() && !args.rows.iter().any(|r| r == row.label) {
                    continue;
                }
                let cell = ours::run(task, row, rate, &dir.join(row.label), &args)
                    .with_context(|| format!("{} at {}: {}", task.name, rate.label, row.label))?;
                cells.push(cell);
            }
            let initial = dir.join("dense").join(train::checkpoint::INITIAL_FILE);
            for row in ddp::ROWS {
                if !args.rows.is_empty() && !args.rows.iter().any(|r| r == row.label) {
                    continue;
                }
                let why_not = if !task.ddp {
                    Some(format!(
                        "ddp_train.py trains ResNet-20 only, not {}",
                        task.name
                    ))
                } else {
                    torch.clone().err()
                };
                let cell = match why_not {
                    Some(why) => ddp::skipped(row, rate, why),
                    None => ddp::run(
                        task,
                        row,
                        rate,
                        &dir.join(row.label),
                        &initial,
                        &python,
                        &args,
                    )
                    .with_context(|| format!("{} at {}: {}", task.name, rate.label, row.label))?,
                };
                cells.push(cell);
            }
        }
        let smoke = args.preset == "smoke";
        let rows = report::rows(task, &cells, !smoke);
        report::write(
            &args.out,
            task,
            &rates,
            args.delay.as_deref(),
            &cells,
            &rows,
        )?;
        table::print_rows(&args.common, &rows, || {
            report::print(task, &rates, &cells, smoke)
        })?;
    }
    Ok(())
}

fn main() {
    table::main(|a: &Args| &a.common, run)
}
