//! PyTorch DDP's rows: `benchmarks/reference/ddp_train.py` with each communication hook,
//! as local processes on loopback or one rank per emulated host under
//! `scripts/netem.sh`, read back into a [`Cell`].

use super::ours::{netem_args, POWERSGD_START, SKIP_STEPS};
use super::{netem_script, Args, Cell, Rate, Task};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// One of DDP's rows: the hook ddp_train.py registers.
pub struct Row {
    pub label: &'static str,
    pub hook: &'static str,
}

pub const ROWS: &[Row] = &[
    Row {
        label: "ddp",
        hook: "none",
    },
    Row {
        label: "ddp-fp16",
        hook: "fp16",
    },
    Row {
        label: "ddp-bf16",
        hook: "bf16",
    },
    Row {
        label: "ddp-powersgd",
        hook: "powersgd",
    },
];

/// Whether `python` imports torch and safetensors (the reason where it does not).
pub fn torch_available(python: &str) -> Result<(), String> {
    let out = Command::new(python)
        .args(["-c", "import torch, safetensors; print(torch.__version__)"])
        .output();
    match out {
        Ok(o) if o.status.success() => Ok(()),
        Ok(_) => Err(format!(
            "{python} has no torch or safetensors (pip install torch safetensors)"
        )),
        Err(e) => Err(format!("{python} did not start: {e}")),
    }
}

/// A row that did not run, and why.
pub fn skipped(row: &Row, rate: &Rate, why: String) -> Cell {
    Cell {
        row: row.label.into(),
        system: "pytorch-ddp",
        rate: rate.label.clone(),
        curve: Vec::new(),
        reached_seconds: None,
        final_metric: None,
        steps_per_second: None,
        bytes_per_step: None,
        split: None,
        skipped: Some(why),
    }
}

/// ddp_train.py's arguments for `row` on `task`, from the same weights (`initial`).
fn script_args(task: &Task, row: &Row, initial: &Path, out: &Path) -> Result<Vec<String>> {
    let c = &task.base;
    if c.dataset != "fashion-mnist" && c.dataset != "synthetic" {
        bail!("ddp_train.py trains on Fashion-MNIST, not {}", c.dataset);
    }
    let mut a = vec![
        format!("--batch={}", c.batch_size),
        format!("--lr={}", c.lr),
        format!("--momentum={}", c.momentum),
        format!("--weight-decay={}", c.weight_decay),
        format!("--hook={}", row.hook),
        "--powersgd-rank=2".into(),
        format!("--start-powersgd-iter={POWERSGD_START}"),
        "--threads=1".into(),
        format!("--init={}", initial.display()),
        format!("--eval-every={}", c.eval_every),
        format!("--eval-samples={}", c.eval_samples.unwrap_or(0)),
        format!("--log-every={}", c.log_every),
        format!("--seed={}", c.seed),
        format!("--out={}", out.display()),
    ];
    if c.dataset == "synthetic" {
        // Synthetic images take the model's own input, CIFAR's for ResNet-20.
        a.push(format!("--synthetic={}", c.synthetic_samples));
        a.push("--synthetic-shape=3,32,32".into());
    } else if let Some(d) = &c.data_dir {
        a.push(format!("--data-dir={}", d.display()));
    }
    match (c.steps, c.epochs) {
        (Some(s), _) => a.push(format!("--steps={s}")),
        (None, Some(e)) => a.push(format!("--epochs={e}")),
        _ => bail!("the task has neither steps nor epochs"),
    }
    Ok(a)
}

/// Runs `row` at `rate` from `initial` (reusing a finished run with `--reuse`: its
/// `args.json` equal to this run's and a summary record in `ddp.jsonl`).
pub fn run(
    task: &Task,
    row: &Row,
    rate: &Rate,
    dir: &Path,
    initial: &Path,
    python: &str,
    args: &Args,
) -> Result<Cell> {
    if !initial.is_file() {
        bail!(
            "{} is missing: the dense row writes the weights both sides start from (run it first, or drop --rows' filter)",
            initial.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let out = dir.join("ddp.jsonl");
    let script = benchmarks::reference_script("ddp_train.py");
    let mut argv = script_args(task, row, initial, &out)?;
    let workers = task.base.workers;
    let netem = match &rate.tc {
        Some(tc) => Some(netem_args(workers, tc, args.delay.as_deref())?),
        None => {
            argv.push(format!("--workers={workers}"));
            None
        }
    };
    let stamp = serde_json::json!({"argv": argv, "netem": netem}).to_string();
    let stamp_file = dir.join("args.json");
    let records = read_jsonl(&out);
    let finished = records.iter().any(|r| r["kind"] == "summary");
    let label = format!("{} {} at {}", task.name, row.label, rate.label);
    if args.common.reuse
        && finished
        && std::fs::read_to_string(&stamp_file).is_ok_and(|s| s == stamp)
    {
        eprintln!("== {label}: keeping the finished run in {}", dir.display());
    } else {
        std::fs::write(&stamp_file, &stamp)
            .with_context(|| format!("writing {}", stamp_file.display()))?;
        let _ = std::fs::remove_file(&out);
        eprintln!("== {label}, {workers} ranks -> {}", dir.display());
        let mut cmd = match &netem {
            Some(n) => {
                let mut c = Command::new("bash");
                c.arg(netem_script()).args(n).arg("--").arg(python);
                c
            }
            None => Command::new(python),
        };
        let status = cmd
            .arg(&script)
            .args(&argv)
            .env("PYTHONUNBUFFERED", "1")
            .stdout(std::process::Stdio::from(std::io::stderr()))
            .status()
            .with_context(|| format!("running {python} {}", script.display()))?;
        if !status.success() {
            bail!("{} failed ({status})", script.display());
        }
    }
    Ok(cell(task, row.label, rate, &read_jsonl(&out)))
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn cell(task: &Task, row: &str, rate: &Rate, records: &[Value]) -> Cell {
    let evals = || records.iter().filter(|r| r["kind"] == "eval");
    let curve: Vec<(f64, f64)> = evals()
        .filter_map(|r| Some((r["train_seconds"].as_f64()?, r["metric"].as_f64()?)))
        .collect();
    let reached_seconds = (task.target > 0.0)
        .then(|| {
            let reaches = |m: f64| {
                if task.lower_is_better {
                    m <= task.target
                } else {
                    m >= task.target
                }
            };
            curve.iter().find(|p| reaches(p.1)).map(|p| p.0)
        })
        .flatten();
    let steps: Vec<f64> = records
        .iter()
        .filter(|r| {
            r["kind"] == "step" && r["step"].as_u64().is_some_and(|s| s as usize > SKIP_STEPS)
        })
        .filter_map(|r| r["step_seconds"].as_f64())
        .collect();
    let summary = records.iter().find(|r| r["kind"] == "summary");
    Cell {
        row: row.into(),
        system: "pytorch-ddp",
        rate: rate.label.clone(),
        final_metric: curve.last().map(|p| p.1),
        curve,
        reached_seconds,
        steps_per_second: (!steps.is_empty())
            .then(|| steps.len() as f64 / steps.iter().sum::<f64>()),
        bytes_per_step: summary.and_then(|s| s["bytes_per_step"].as_f64()),
        split: None,
        skipped: None,
    }
}
