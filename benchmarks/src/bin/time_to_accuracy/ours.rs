//! Our rows: a trainer job per method, as local processes on loopback or one worker per
//! emulated host under `scripts/netem.sh`, read back into a [`Cell`].

use super::{netem_script, Args, Cell, Rate, Task};
use anyhow::{bail, Context, Result};
use benchmarks::table::{self, Job};
use std::path::Path;

/// One of our rows: a method and its options.
pub struct Row {
    pub label: &'static str,
    pub method: &'static str,
    pub opts: &'static [&'static str],
    /// Whether the gradients go in DDP's 25 MB buckets (`--bucket-elems`), as DDP's do.
    pub buckets: bool,
}

/// DDP's default bucket, 25 MiB of f32 gradients, in elements.
const DDP_BUCKET_ELEMS: usize = 25 * (1 << 20) / 4;

/// The dense rows take DDP's buckets (one allreduce for ResNet-20's 0.27 M values, as
/// DDP's); the compressed rows exchange per tensor, as their papers do. PowerSGD starts
/// at step 10 on both sides (PyTorch's default, 1,000, is two epochs of this job).
pub const ROWS: &[Row] = &[
    Row {
        label: "dense",
        method: "dense",
        opts: &[],
        buckets: true,
    },
    Row {
        label: "dense-bf16",
        method: "dense",
        opts: &["wire=bf16"],
        buckets: true,
    },
    Row {
        label: "dgc",
        method: "dgc",
        opts: &["density=0.001", "warmup_epochs=0.25"],
        buckets: false,
    },
    Row {
        label: "powersgd",
        method: "powersgd",
        opts: &["rank=2", "start_iter=10"],
        buckets: false,
    },
    Row {
        label: "gtopk",
        method: "gtopk",
        opts: &["density=0.001"],
        buckets: false,
    },
];

/// The step at which PowerSGD starts compressing on both sides.
pub const POWERSGD_START: usize = 10;

/// A tc rate (`100mbit`, `1gbit`, ...) in bit/s; an error naming the rate otherwise.
pub fn rate_bits(rate: &str) -> Result<f64> {
    let (num, unit) = rate.split_at(
        rate.find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(rate.len()),
    );
    let scale = match unit {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        _ => bail!("--rates {rate}: give a rate as tc reads it (100mbit, 1gbit) or `unshaped`"),
    };
    match num.parse::<f64>() {
        Ok(bits) if bits > 0.0 && bits.is_finite() => Ok(bits * scale),
        _ => bail!("--rates {rate}: give a rate as tc reads it (100mbit, 1gbit) or `unshaped`"),
    }
}

/// The token-bucket depth for a link of `rate`: 128 µs of it, at least 2 kB (one
/// packet): the 16 kB that held 1 Gbit/s in scripts/netem.sh's measurements, one packet
/// at 100 Mbit/s, and 160 kB at 10 Gbit/s, where a shallower bucket cannot be refilled
/// often enough to hold the rate.
pub fn burst(rate: &str) -> Result<String> {
    let bytes = (rate_bits(rate)? * 128e-6 / 8.0).max(2000.0);
    Ok(format!("{}b", bytes.round() as u64))
}

/// The arguments of `scripts/netem.sh` for `workers` hosts on links of `rate`: htb with
/// ACKs first (`--ack-prio`), which held the α-β model of a ring within 1 % at
/// 100 Mbit/s (RESULTS.md), and the delay if given.
pub fn netem_args(workers: usize, rate: &str, delay: Option<&str>) -> Result<Vec<String>> {
    let mut a = vec![
        "--workers".to_string(),
        workers.to_string(),
        "--rate".into(),
        rate.into(),
        "--shaper".into(),
        "htb".into(),
        "--burst".into(),
        burst(rate)?,
        "--ack-prio".into(),
    ];
    if let Some(d) = delay {
        a.extend(["--delay".into(), d.into()]);
    }
    Ok(a)
}

/// The job of `row` on `task`, in `dir`.
pub fn config(task: &Task, row: &Row, dir: &Path) -> train::Config {
    let mut c = task.base.clone();
    c.method = row.method.into();
    c.method_opts = row.opts.iter().map(|s| s.to_string()).collect();
    c.bucket_elems = if row.buckets { DDP_BUCKET_ELEMS } else { 0 };
    // Under netem each worker is its own host; on loopback the launcher's workers are
    // left to the scheduler too, as DDP's are.
    c.pin_cores = train::config::PinCores::False;
    c.out = dir.to_path_buf();
    c
}

/// Runs `row` at `rate` (reusing a finished run with `--reuse`) and reads its cell.
pub fn run(task: &Task, row: &Row, rate: &Rate, dir: &Path, args: &Args) -> Result<Cell> {
    let cfg = config(task, row, dir);
    let label = format!("{} {} at {}", task.name, row.label, rate.label);
    let job = match &rate.tc {
        None => table::run_job(&cfg, &label, &args.common)?,
        Some(tc) => {
            let netem = netem_args(cfg.workers, tc, args.delay.as_deref())?;
            table::run_job_by(&cfg, &label, &args.common, |cfg, job_file| {
                let exe = std::env::current_exe().context("finding this binary")?;
                let status = std::process::Command::new("bash")
                    .arg(netem_script())
                    .args(&netem)
                    .arg("--")
                    .arg(exe)
                    .arg(table::WORKER_FLAG)
                    .arg(job_file)
                    // Worker output to standard error: standard output is the table.
                    .stdout(std::process::Stdio::from(std::io::stderr()))
                    .status()
                    .context("running scripts/netem.sh")?;
                if !status.success() {
                    bail!(
                        "scripts/netem.sh with {} workers at {tc} failed ({status})",
                        cfg.workers
                    );
                }
                Ok(())
            })?
        }
    };
    Ok(cell(task, row.label, rate, &job))
}

/// The steps left out of the steady step time: the first 20 (allocator warm-up, the
/// first buckets' plans, PowerSGD's dense start).
pub const SKIP_STEPS: usize = 20;

fn cell(task: &Task, row: &str, rate: &Rate, job: &Job) -> Cell {
    let curve: Vec<(f64, f64)> = job
        .records
        .iter()
        .filter(|r| r["kind"] == "eval")
        .filter_map(|r| Some((r["train_seconds"].as_f64()?, r["metric"].as_f64()?)))
        .collect();
    let reached_seconds = job
        .first_reaching(task.target)
        .filter(|_| task.target > 0.0)
        .and_then(|r| r["train_seconds"].as_f64());
    let mean = |k: &str| job.mean_step(k, SKIP_STEPS);
    let steps = job.summary["steps"].as_f64().unwrap_or(0.0);
    let split = (|| {
        Some([
            mean("compute_seconds")?,
            mean("compression_seconds")?,
            mean("communication_seconds")?,
            mean("idle_seconds")?,
        ])
    })();
    Cell {
        row: row.into(),
        system: "ours",
        rate: rate.label.clone(),
        curve,
        reached_seconds,
        final_metric: job.final_metric(),
        steps_per_second: mean("step_seconds").filter(|&s| s > 0.0).map(|s| 1.0 / s),
        bytes_per_step: (steps > 0.0)
            .then(|| job.summary["bytes_sent"].as_f64().map(|b| b / steps))
            .flatten(),
        split,
        skipped: None,
    }
}
