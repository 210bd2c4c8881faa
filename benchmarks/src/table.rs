//! What the paper-table binaries (`dgc_table2`, `dgc_table3`, `dgc_table4`, `dgc_fig6`, `sbc_table2`,
//! `localgrad_table1`, `qsgd_table1`, `gtopk_table7`) share: running one training job per table cell as real worker
//! processes (the binary re-executes itself with `--worker-config`, as `train --workers
//! N` does), and reading back what the job wrote (summary, metrics records, the
//! evaluation curve, the ranks' checkpoints; `compare_runs` reads any run directory this
//! way too). The tables' layouts, presets and the papers' numbers stay in each binary.

use anyhow::{Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Instant;
use train::Config;

/// The flags every paper-table binary has, flattened into its arguments
/// (`#[command(flatten)]`), so their meaning and help are the same everywhere.
#[derive(clap::Args, Debug)]
pub struct CommonArgs {
    /// Print the rows as JSON.
    #[arg(long)]
    pub json: bool,
    /// Checkpoint each job every N epochs and where it ends (0: never). Checkpoints let a
    /// job be continued with `train --resume --out RUN`; a large model's take disk: two
    /// generations of parameters, optimizer and method state per rank. Default: every
    /// epoch (dgc_table3's quick preset: never). Running the table again replaces its
    /// jobs' runs, one continued by hand included.
    #[arg(long, value_name = "N")]
    pub checkpoint_every: Option<usize>,
    /// Keep a job that already finished with this very configuration (its run directory
    /// holds a summary.json and a job.toml equal to the one this table would write)
    /// instead of running it again: a long table stopped midway continues with the jobs
    /// it has not finished. Without it, running the table again replaces every job.
    #[arg(long)]
    pub reuse: bool,
    /// Internal: run as one worker of the job described by this config file.
    #[arg(long, hide = true)]
    pub worker_config: Option<PathBuf>,
}

/// The hidden flag a table binary passes to its own worker processes.
pub const WORKER_FLAG: &str = "--worker-config";

/// The `main` of a table binary: parses its arguments `A`; where the table started this
/// process as one of a job's workers (`--worker-config`), runs that worker; else runs
/// the table. An error ends the process with its chain ([`crate::exit_on_error`]).
pub fn main<A: clap::Parser>(common: fn(&A) -> &CommonArgs, table: fn(A) -> Result<()>) {
    crate::exit_on_error((|| {
        let args = A::parse();
        if run_worker_if_asked(common(&args).worker_config.as_deref())? {
            return Ok(());
        }
        table(args)
    })())
}

/// Creates the table's output directory.
pub fn create_out(out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))
}

/// When this process was started as a worker (`--worker-config FILE`), runs that worker
/// and returns true; the binary then exits.
pub fn run_worker_if_asked(worker_config: Option<&Path>) -> Result<bool> {
    let Some(path) = worker_config else {
        return Ok(false);
    };
    // As early as a worker can: a Ctrl-C while it starts is then a stop, not a death.
    train::interrupt::install().context("installing the Ctrl-C handler")?;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the job file {}", path.display()))?;
    let cfg: Config = toml::from_str(&text)
        .with_context(|| format!("parsing the job file {}", path.display()))?;
    train::run(&cfg, false, &[])?;
    Ok(true)
}

/// A job's length for a table's heading: "N steps" where it stops at a step count, else
/// "N epochs".
pub fn length(cfg: &Config) -> String {
    match (cfg.steps, cfg.epochs) {
        (Some(s), _) => format!("{s} steps"),
        (None, Some(e)) => format!("{e} epochs"),
        _ => String::new(),
    }
}

/// The prologue of a table whose quick preset takes `--synthetic`: `--synthetic` beside a
/// `--data-dir` is refused, and `--preset smoke` becomes the quick preset's jobs on
/// synthetic data, `steps` and `eval_samples` set to `short` (steps, samples) where the
/// flags left them open. Returns whether it was smoke, for the binary to leave its
/// claims unjudged.
pub fn smoke_prologue(
    preset: &mut String,
    synthetic: &mut bool,
    data_dir: Option<&Path>,
    steps: &mut Option<usize>,
    eval_samples: &mut Option<usize>,
    short: (usize, usize),
) -> Result<bool> {
    check_synthetic(*synthetic, data_dir)?;
    let smoke = smoke_as_quick(preset, synthetic, data_dir)?;
    if smoke {
        *steps = steps.or(Some(short.0));
        *eval_samples = eval_samples.or(Some(short.1));
    }
    Ok(smoke)
}

/// `--preset smoke` of a table whose quick preset takes `--synthetic`: the quick preset's
/// jobs on synthetic data (a `--data-dir` beside it is refused, as it would be ignored).
/// Turns `preset` into "quick" and sets `synthetic`; returns whether it was smoke, for
/// the binary to shorten its jobs and leave its claims unjudged.
pub fn smoke_as_quick(
    preset: &mut String,
    synthetic: &mut bool,
    data_dir: Option<&Path>,
) -> Result<bool> {
    if preset != "smoke" {
        return Ok(false);
    }
    check_synthetic(true, data_dir)?;
    *preset = "quick".into();
    *synthetic = true;
    Ok(true)
}

/// `--synthetic` trains on generated data, so a `--data-dir` beside it would be ignored:
/// an error instead.
pub fn check_synthetic(synthetic: bool, data_dir: Option<&Path>) -> Result<()> {
    if let (true, Some(d)) = (synthetic, data_dir) {
        anyhow::bail!(
            "--synthetic trains on generated data, so --data-dir {} would be ignored: give one or the other",
            d.display()
        );
    }
    Ok(())
}

/// Refuses 0 for the count flags given (`(flag, value)`: steps, epochs, evaluation
/// intervals, samples, batch sizes): a run of 0 steps or an evaluation every 0 steps
/// means nothing, and left to the trainer it would only be refused (or, for an
/// interval, run and print "every 0 steps") after the table had started its jobs.
pub fn check_counts(counts: &[(&str, Option<usize>)]) -> Result<()> {
    for (flag, value) in counts {
        if *value == Some(0) {
            anyhow::bail!("{flag} 0: must be at least 1");
        }
    }
    Ok(())
}

/// Refuses a density outside (0, 1] (`flag` names it): the fraction of a gradient's
/// values a sparse method or collective sends.
pub fn check_density(flag: &str, value: f64) -> Result<()> {
    if !(value > 0.0 && value <= 1.0) {
        anyhow::bail!("{flag} {value}: must be in (0, 1] (the fraction of the values sent)");
    }
    Ok(())
}

/// Refuses a negative or non-finite number of epochs (`flag` names it); 0 is allowed
/// (no warm-up).
pub fn check_epochs(flag: &str, value: Option<f64>) -> Result<()> {
    match value {
        Some(v) if !(v.is_finite() && v >= 0.0) => {
            anyhow::bail!("{flag} {v}: must be a number of epochs >= 0")
        }
        _ => Ok(()),
    }
}

/// What one finished job left in its run directory.
pub struct Job {
    pub dir: PathBuf,
    pub workers: usize,
    pub summary: Value,
    /// `metrics.jsonl`, one value per line (step and eval records).
    pub records: Vec<Value>,
    pub wall_seconds: f64,
}

/// Whether `dir` holds a finished run (a summary) of the job described by `job_text`:
/// `job.toml` is written before the workers start, so a run that died has one without a
/// summary, and a summary beside another job file is an earlier table's.
fn finished_with(dir: &Path, job_text: &str) -> bool {
    dir.join("summary.json").is_file()
        && std::fs::read_to_string(dir.join("job.toml")).is_ok_and(|t| t == job_text)
}

impl Job {
    /// The final evaluation metric (accuracy as a fraction, perplexity, word error rate).
    pub fn final_metric(&self) -> Option<f64> {
        self.summary["final_metric"].as_f64()
    }

    /// Dense bytes over bytes sent for the whole run (null where nothing was sent).
    pub fn compression_ratio(&self) -> Option<f64> {
        self.summary["compression_ratio"].as_f64()
    }

    /// Dense bytes over bytes sent for the steps after epoch `from_epoch` (DGC's ratio
    /// once its sparsity warm-up is over); None when nothing was sent in that span.
    pub fn ratio_after(&self, from_epoch: f64) -> Option<f64> {
        self.cumulative_ratio_after(from_epoch, "dense_bytes", "bytes_sent")
    }

    /// The method's dense message bytes over its message bytes (the papers' measure:
    /// the gradient against what encodes it, before headers) for the steps after epoch
    /// `from_epoch`.
    pub fn message_ratio_after(&self, from_epoch: f64) -> Option<f64> {
        self.cumulative_ratio_after(from_epoch, "dense_message_bytes", "message_bytes")
    }

    /// The growth of the cumulative `num` over that of `den` between the first step
    /// record at or after `from_epoch` (the start, for 0) and the last record. Records
    /// come every `--log-every` steps, so the span starts at the first record whose
    /// counters hold no step before `from_epoch`: starting from the last record before it
    /// would count the warm-up steps in between (DGC Table 4's quick preset, logging every
    /// 50 steps with a warm-up ending at step 83, counted 34 warm-up steps that way).
    fn cumulative_ratio_after(&self, from_epoch: f64, num: &str, den: &str) -> Option<f64> {
        let steps: Vec<&Value> = self
            .records
            .iter()
            .filter(|r| r["kind"] == "step")
            .collect();
        let first = if from_epoch <= 0.0 {
            None
        } else {
            Some(
                *steps
                    .iter()
                    .find(|r| r["epoch"].as_f64().unwrap_or(0.0) >= from_epoch - 1e-9)?,
            )
        };
        let last = steps.last()?;
        let (n0, d0) = first.map_or((0.0, 0.0), |r| {
            (
                r[num].as_f64().unwrap_or(0.0),
                r[den].as_f64().unwrap_or(0.0),
            )
        });
        let (n1, d1) = (last[num].as_f64()?, last[den].as_f64()?);
        (d1 > d0).then(|| (n1 - n0) / (d1 - d0))
    }

    /// The compression cells of a row, under the keys of [`COMPRESSION_COLUMNS`]: the
    /// parameter count, the dense gradient in MiB (the DGC paper's "MB": AlexNet's
    /// 60,965,224 values are its 232.56 MB), the compressed size (gradient over ratio),
    /// the paper's ratio (message bytes) and the wire ratio, both over the steps after
    /// epoch `from_epoch` (a warm-up), the paper's ratio over the whole run, the steps
    /// and the job's wall time.
    pub fn compression_columns(&self, from_epoch: f64) -> serde_json::Map<String, Value> {
        let params = self.summary["parameters"].as_u64().unwrap_or(0);
        let dense_mib = params as f64 * 4.0 / (1u64 << 20) as f64;
        let ratio = self.message_ratio_after(from_epoch);
        let cells = serde_json::json!({
            "params": params,
            "gradient_mib": dense_mib,
            "compressed_mib": ratio.map(|r| dense_mib / r),
            "compression_ratio": ratio,
            "wire_ratio": self.ratio_after(from_epoch),
            "compression_ratio_whole_run": self.summary["message_compression_ratio"],
            "steps": self.summary["steps"],
            "wall_seconds": self.wall_seconds,
        });
        match cells {
            Value::Object(map) => map,
            _ => unreachable!("json! of an object literal is an object"),
        }
    }

    /// The mean of `key` (`step_seconds`, `compute_seconds`, `compression_seconds`, …)
    /// over rank 0's step records after the first `skip` steps; with `log_every` 1 that
    /// is the mean over those steps.
    pub fn mean_step(&self, key: &str, skip: usize) -> Option<f64> {
        let v: Vec<f64> = self
            .step_records_after(skip)
            .filter_map(|r| r[key].as_f64())
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// The method's message bytes per step (what it hands to the collective, before
    /// headers) over the steps after the first `skip`, from the cumulative
    /// `message_bytes` of the step records (with `log_every` 1).
    pub fn message_bytes_per_step(&self, skip: usize) -> Option<f64> {
        let records: Vec<&Value> = self
            .records
            .iter()
            .filter(|r| r["kind"] == "step")
            .collect();
        let at = |step: usize| {
            records
                .iter()
                .find(|r| r["step"].as_u64() == Some(step as u64))
                .and_then(|r| r["message_bytes"].as_f64())
        };
        let last = records.last()?;
        let end = last["step"].as_u64()? as usize;
        if end <= skip {
            return None;
        }
        let start = if skip == 0 { 0.0 } else { at(skip)? };
        Some((last["message_bytes"].as_f64()? - start) / (end - skip) as f64)
    }

    fn step_records_after(&self, skip: usize) -> impl Iterator<Item = &Value> {
        self.records.iter().filter(move |r| {
            r["kind"] == "step" && r["step"].as_u64().is_some_and(|s| s as usize > skip)
        })
    }

    /// Whether a smaller metric is better (perplexity, word error rate).
    pub fn lower_is_better(&self) -> bool {
        self.summary["metric_name"] != "accuracy"
    }

    /// The first evaluation at least as good as `target`: its record (step, epoch,
    /// `wall_seconds`, metric, `test_loss`), or None if no evaluation got there.
    pub fn first_reaching(&self, target: f64) -> Option<&Value> {
        let lower = self.lower_is_better();
        self.records
            .iter()
            .filter(|r| r["kind"] == "eval")
            .find(|r| {
                r["metric"]
                    .as_f64()
                    .is_some_and(|m| if lower { m <= target } else { m >= target })
            })
    }

    /// The last evaluation's record.
    pub fn last_eval(&self) -> Option<&Value> {
        self.records.iter().rev().find(|r| r["kind"] == "eval")
    }

    /// How far the ranks' final parameters are apart: the largest ‖w_r − w_0‖ / ‖w_0‖
    /// over the ranks r, from their last checkpoints (0 where every rank holds the same
    /// weights, as after a synchronisation).
    pub fn rank_drift(&self) -> Result<f64> {
        let params = |rank: usize| -> Result<Vec<f32>> {
            let file = train::checkpoint::path(&self.dir, rank);
            let saved = train::checkpoint::load(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            Ok(saved
                .tensors
                .into_iter()
                .filter(|(name, _, _)| name.starts_with("param/"))
                .flat_map(|(_, v, _)| v)
                .collect())
        };
        let w0 = params(0)?;
        let norm0 = w0.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
        let mut worst = 0.0f64;
        for rank in 1..self.workers {
            let w = params(rank)?;
            anyhow::ensure!(
                w.len() == w0.len(),
                "rank {rank}'s checkpoint in {} holds {} parameters, rank 0's {}",
                self.dir.display(),
                w.len(),
                w0.len()
            );
            let d = w
                .iter()
                .zip(&w0)
                .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
                .sum::<f64>()
                .sqrt();
            worst = worst.max(d / norm0.max(f64::MIN_POSITIVE));
        }
        Ok(worst)
    }

    /// The evaluation metric against epoch, one point per evaluation (an evaluation
    /// whose metric is not a number, an overflowed perplexity, is left out).
    pub fn eval_curve(&self) -> Vec<(f64, f64)> {
        train::plot::points(&self.records, "eval", "epoch", "metric")
    }
}

/// The keys of [`Job::compression_columns`], in the order the CSV files list them.
pub const COMPRESSION_COLUMNS: [&str; 8] = [
    "params",
    "gradient_mib",
    "compressed_mib",
    "compression_ratio",
    "wire_ratio",
    "compression_ratio_whole_run",
    "steps",
    "wall_seconds",
];

/// A row: `cells` (the table's own columns, a JSON object literal) followed by `job`'s
/// compression columns after epoch `from_epoch`.
pub fn row_with_compression(cells: Value, job: &Job, from_epoch: f64) -> Value {
    let Value::Object(mut row) = cells else {
        panic!("a table row's cells must be a JSON object, not {cells}");
    };
    row.extend(job.compression_columns(from_epoch));
    Value::Object(row)
}

/// Runs a table's jobs in order, labelled, after checking every configuration (a mistake
/// in the last job's shows before the first one trains) and creating `out`.
pub fn run_plan(out: &Path, plan: &[(String, Config)], common: &CommonArgs) -> Result<Vec<Job>> {
    for (label, cfg) in plan {
        cfg.validate()
            .with_context(|| format!("the {label} run's configuration"))?;
    }
    create_out(out)?;
    plan.iter()
        .map(|(label, cfg)| run_job(cfg, label, common))
        .collect()
}

/// Runs `cfg` (its `out` is the run directory) as `cfg.workers` local processes of the
/// current binary, which must call [`run_worker_if_asked`] first thing in `main`; their
/// logs go to standard error. Fails with the first failing worker's error. The common
/// flags that reach the trainer (`--checkpoint-every`) override `cfg`'s, and the job
/// replaces what an earlier run of the table left in its directory.
pub fn run_job(cfg: &Config, label: &str, common: &CommonArgs) -> Result<Job> {
    run_job_by(cfg, label, common, |cfg, job_file| {
        // The workers' logs go to standard error: standard output is the table (or JSON).
        train::launcher::launch_logging(
            cfg.workers,
            cfg.pin_cores,
            &[WORKER_FLAG.into(), job_file.to_path_buf().into_os_string()],
            train::launcher::WorkerLogs::Stderr,
        )
    })
}

/// [`run_job`] with the workers started by `launch(cfg, job_file)` instead of the local
/// launcher (each worker runs this binary with [`WORKER_FLAG`] `job_file`, as one rank of
/// the job: `time_to_accuracy` starts them in emulated hosts' network namespaces).
pub fn run_job_by(
    cfg: &Config,
    label: &str,
    common: &CommonArgs,
    launch: impl FnOnce(&Config, &Path) -> Result<()>,
) -> Result<Job> {
    let mut cfg = cfg.clone();
    // A table's jobs live in its own --out: running the table again replaces them.
    cfg.overwrite = true;
    if let Some(n) = common.checkpoint_every {
        cfg.checkpoint_every = n;
    }
    let cfg = &cfg;
    cfg.validate()
        .with_context(|| format!("the configuration of '{label}'"))?;
    let dir = &cfg.out;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let job_file = dir.join("job.toml");
    let job_text = toml::to_string_pretty(cfg)?;
    if common.reuse && finished_with(dir, &job_text) {
        eprintln!("== {label}: keeping the finished run in {}", dir.display());
        let job = Job::read(dir)?;
        return Ok(Job {
            wall_seconds: job.summary["wall_seconds"].as_f64().unwrap_or(f64::NAN),
            ..job
        });
    }
    std::fs::write(&job_file, &job_text)
        .with_context(|| format!("writing {}", job_file.display()))?;
    eprintln!("== {label}, {} workers -> {}", cfg.workers, dir.display());
    let started = Instant::now();
    // A Ctrl-C waits for the workers to save their checkpoints (see `train::interrupt`);
    // one that came after the last job's last chance to stop starts no other.
    train::interrupt::install().context("installing the Ctrl-C handler")?;
    if train::interrupt::requested() {
        return Err(train::interrupt::Interrupted {
            step: None,
            total: None,
            saved: false,
            out: dir.clone(),
        }
        .into());
    }
    launch(cfg, &job_file)
        .map_err(|e| train::interrupt::in_run(e, dir, cfg.checkpoint_every > 0))
        .with_context(|| format!("the job '{label}'"))?;
    Ok(Job {
        wall_seconds: started.elapsed().as_secs_f64(),
        ..Job::read(dir)?
    })
}

impl Job {
    /// A finished run as its directory holds it (`summary.json`, `metrics.jsonl`), its
    /// wall time the summary's.
    pub fn read(dir: &Path) -> Result<Job> {
        // A path that is not there (a typo) is told apart from a run that has not
        // finished: "has no summary.json" would send the user looking for a run that
        // never existed.
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => anyhow::bail!(
                "{} is not a directory: a run is the directory the trainer wrote (--out), \
                 holding summary.json and metrics.jsonl",
                dir.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                anyhow::bail!("{} does not exist: no run there", dir.display())
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
        }
        let summary_path = dir.join("summary.json");
        let text = match std::fs::read_to_string(&summary_path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // One stopped with a checkpoint (interrupted, or dead after an epoch)
                // can be finished: say how.
                let resumable = train::checkpoint::read_position(&train::checkpoint::path(dir, 0))
                    .ok()
                    .flatten();
                let how = match resumable {
                    Some(p) => format!(
                        "; its checkpoint stands at step {}: `train --resume --out {}` finishes it",
                        p.step,
                        dir.display()
                    ),
                    None => String::new(),
                };
                anyhow::bail!(
                    "{} has no summary.json: not a finished run (the trainer writes it at the end){how}",
                    dir.display()
                )
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", summary_path.display())),
        };
        let summary: Value = serde_json::from_str(&text)
            .with_context(|| format!("parsing {}", summary_path.display()))?;
        let records = read_jsonl(&dir.join("metrics.jsonl"))?;
        Ok(Job {
            dir: dir.to_path_buf(),
            workers: summary["workers"].as_u64().unwrap_or(0) as usize,
            wall_seconds: summary["wall_seconds"].as_f64().unwrap_or(f64::NAN),
            summary,
            records,
        })
    }
}

fn read_jsonl(path: &Path) -> Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{} line {}: not JSON", path.display(), i + 1))
        })
        .collect()
}

/// Writes a table's files into `out`: its rows (see [`write_rows`]) and the learning
/// curves (`curves.png`, `curves.svg`; metric against epoch, one series per job).
pub fn write_table(
    out: &Path,
    stem: &str,
    rows: &[Value],
    columns: &[&str],
    curves: Vec<(String, Vec<(f64, f64)>)>,
    title: &str,
    metric: &str,
) -> Result<()> {
    write_rows(out, stem, rows, columns)?;
    let series: Vec<train::plot::Series> = curves
        .into_iter()
        .map(|(name, points)| train::plot::Series { name, points })
        .collect();
    train::plot::line_chart(&out.join("curves"), title, "epoch", metric, &series)
}

/// Writes `{stem}.json` (the rows) and `{stem}.csv` (the rows' `columns` in that order:
/// numbers in full, strings as they are unless they need quoting, nothing for null) into
/// `out`.
pub fn write_rows(out: &Path, stem: &str, rows: &[Value], columns: &[&str]) -> Result<()> {
    let write = |name: &str, text: &str| {
        let path = out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write(
        &format!("{stem}.json"),
        &serde_json::to_string_pretty(rows)?,
    )?;
    let mut csv = columns.join(",") + "\n";
    for row in rows {
        let cells: Vec<String> = columns
            .iter()
            .map(|&c| match &row[c] {
                Value::Null => String::new(),
                // Quoted (RFC 4180) where a comma, quote or line break would split it.
                Value::String(s) if s.contains([',', '"', '\n', '\r']) => {
                    format!("\"{}\"", s.replace('"', "\"\""))
                }
                Value::String(s) => s.clone(),
                v => v.to_string(),
            })
            .collect();
        csv += &(cells.join(",") + "\n");
    }
    write(&format!("{stem}.csv"), &csv)
}

/// Prints the rows: as JSON under `--json` (what scripts and the tests read), else as
/// the table `print` writes for a reader.
pub fn print_rows(common: &CommonArgs, rows: &[Value], print: impl FnOnce()) -> Result<()> {
    if common.json {
        println!("{}", serde_json::to_string_pretty(rows)?);
    } else {
        print();
    }
    Ok(())
}

/// A number for a table cell: `decimals` places, or "-" where there is none.
pub fn cell(v: Option<f64>, decimals: usize) -> String {
    v.map_or("-".to_string(), |x| format!("{x:.decimals$}"))
}

#[cfg(test)]
mod tests {
    use super::Job;
    use serde_json::json;

    /// Step records every 50 steps of 100 per epoch; the cumulative counters grow by 1
    /// per step during a warm-up that ends at step 83 (epoch 0.83) and by 10 after it.
    fn job() -> Job {
        let counter = |s: u64| if s <= 83 { s } else { 83 + 10 * (s - 83) };
        let records = [50u64, 100, 150, 200]
            .map(|s| {
                json!({"kind": "step", "step": s, "epoch": s as f64 / 100.0,
                       "dense_message_bytes": counter(s), "message_bytes": s})
            })
            .to_vec();
        Job {
            dir: "unused".into(),
            workers: 1,
            summary: json!({}),
            records,
            wall_seconds: 0.0,
        }
    }

    #[test]
    fn the_ratio_after_a_warm_up_counts_no_warm_up_step() {
        // From the first record at or after the warm-up's end (step 100), not from the
        // last before it (step 50, which would count steps 51-83 of the warm-up).
        let r = job().message_ratio_after(0.83).unwrap();
        assert_eq!(r, 10.0);
        // From the start: everything.
        let whole = job().message_ratio_after(0.0).unwrap();
        assert_eq!(whole, (83.0 + 10.0 * 117.0) / 200.0);
        // No record after the warm-up but the last: nothing to measure.
        assert_eq!(job().message_ratio_after(1.9), None);
    }

    /// A string cell that holds a comma, a quote or a line break is quoted, its quotes
    /// doubled; numbers and plain strings are written as they are, null as nothing.
    #[test]
    fn csv_cells_are_quoted_where_they_must_be() {
        let dir = std::env::temp_dir().join(format!("table-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rows = [
            json!({"a": "dgc(density=0.001, clip=0)", "b": "say \"hi\"", "c": 1.5,
                           "d": null, "e": "plain"}),
        ];
        super::write_rows(&dir, "t", &rows, &["a", "b", "c", "d", "e"]).unwrap();
        let csv = std::fs::read_to_string(dir.join("t.csv")).unwrap();
        assert_eq!(
            csv.lines().nth(1),
            Some("\"dgc(density=0.001, clip=0)\",\"say \"\"hi\"\"\",1.5,,plain")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
