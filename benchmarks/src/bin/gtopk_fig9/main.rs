//! Figure 9 of paper 002 (gTop-k): the time of TopKAllReduce against gTopKAllReduce as
//! the number of workers grows (left panel: m = 100 MB of gradient at density 0.001, so
//! k = 25,000 (index, value) pairs per worker) and as the message grows (right panel: 32
//! workers, as the caption says; the text says 64, `--right-world`). The paper draws both
//! panels from its α-β model (Table I) with the α = 0.436 ms and β = 9·10⁻⁶ ms per byte it
//! fitted on its 1 GbE cluster. This binary prints, for each point:
//!
//! - that model with the paper's α and β: the figure itself;
//! - the same model with α and β fitted on this machine, in the same run, by a ping-pong
//!   of every rank pair at once in the largest measured job;
//! - the collectives measured with 2, 4 and 8 local workers (`--worlds`), each beside the
//!   model with the α and β fitted in that job (measured / model says how well the model
//!   holds here).
//!
//! The model is comm's `AlphaBeta` (the algorithms as comm implements them: Bruck's
//! allgather for TopK, a binomial tree up and down for gTopK; for powers of two these are
//! exactly Table I's forms). A time is the collective's completion time on the slowest
//! rank, best of `--repeats` after `--warmup` untimed calls. Writes `fig9.csv`,
//! `fig9.json` and four charts (`fig9_left_paper`, `fig9_left_here`, `fig9_right_paper`,
//! `fig9_right_here`, PNG and SVG) into `--out`.
//!
//! Inside the emulated network (`scripts/netem.sh --workers 8 -- gtopk_fig9 …`), where
//! RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and GRADEX_TOKEN are already set, it runs as
//! one worker of that job: the measured column is that job's world, and rank 0 prints the
//! table and writes the files.

use anyhow::{bail, ensure, Context, Result};
use benchmarks::collective::{launch_local, slowest_best};
use benchmarks::random_sparse;
use clap::Parser;
use comm::{ping_pong, AlphaBeta, Communicator, ReduceOp};
use serde_json::{json, Value};
use std::path::PathBuf;

mod report;
use report::report;

#[derive(Parser)]
#[command(
    about = "Paper 002's Figure 9: TopKAllReduce against gTopKAllReduce as workers and message size grow, from the paper's alpha-beta model, this machine's fitted model, and local measurements"
)]
struct Args {
    /// quick (the figure's sizes, measured with 2, 4 and 8 local workers) or smoke (4 MB
    /// and 0.4 MB with 2 and 3 workers, one timed call each: seconds; judges no claim).
    #[arg(long, default_value = "quick")]
    preset: String,
    /// Local worker counts to measure (one job each; the largest also measures the right
    /// panel and gives the fitted model).
    #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
    worlds: Vec<usize>,
    /// Worker counts of the left panel's model rows (the measured ones are added).
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,16,32,64")]
    model_worlds: Vec<usize>,
    /// The left panel's gradient size in bytes (the paper: 100 MB, ResNet-50's size).
    #[arg(long, default_value_t = 100_000_000)]
    size: usize,
    /// The right panel's gradient sizes in bytes.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000000,10000000,50000000,100000000,200000000,400000000"
    )]
    sizes: Vec<usize>,
    /// Workers of the right panel's model rows (the caption's 32).
    #[arg(long, default_value_t = 32)]
    right_world: usize,
    /// Density: each worker contributes k = density × size / 4 (index, value) pairs.
    #[arg(long, default_value_t = 0.001)]
    density: f64,
    /// Timed calls per point (the best counts).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Untimed calls per point before the timed ones (TCP windows grow on first use).
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Do not measure the dense allreduce of the left panel (its model rows stay).
    #[arg(long)]
    no_dense: bool,
    /// The paper's α in seconds (0.436 ms on its 1 GbE cluster).
    #[arg(long, default_value_t = 0.436e-3)]
    paper_alpha: f64,
    /// The paper's β in seconds per byte (9·10⁻⁶ ms).
    #[arg(long, default_value_t = 9e-9)]
    paper_beta: f64,
    /// Where the table and the charts go.
    #[arg(long, default_value = "runs/gtopk_fig9")]
    out: PathBuf,
    /// Print the rows as JSON instead of the tables.
    #[arg(long)]
    json: bool,
    /// Internal: rank 0 of a measuring job writes its rows here.
    #[arg(long, hide = true)]
    rows_out: Option<PathBuf>,
    /// Internal: this job also measures the right panel.
    #[arg(long, hide = true)]
    measure_right: bool,
    /// Set for `--preset smoke`.
    #[arg(skip)]
    smoke: bool,
}

/// One measuring job's results: its world, the α-β fitted in it, and its rows
/// (`panel`, `collective`, `bytes`, `k`, `measured_s`, `model_s`).
struct Measured {
    world: usize,
    fit: AlphaBeta,
    rows: Vec<Value>,
}

const SPARSE: [&str; 2] = ["topk_allreduce", "gtopk_allreduce"];

fn pairs(bytes: usize, density: f64) -> usize {
    (((bytes / 4) as f64 * density).round() as usize).max(1)
}

fn predict(m: &AlphaBeta, collective: &str, p: usize, bytes: usize, k: usize) -> f64 {
    match collective {
        "allreduce" => m.allreduce(p, bytes),
        "topk_allreduce" => m.topk_allreduce(p, k),
        _ => m.gtopk_allreduce(p, k),
    }
}

fn validate(args: &Args) -> Result<()> {
    ensure!(!args.worlds.is_empty(), "--worlds needs at least one world");
    if let Some(w) = args.worlds.iter().find(|&&w| w < 2) {
        bail!("--worlds {w}: every measured world needs at least 2 workers");
    }
    if let Some(w) = args.model_worlds.iter().find(|&&w| w < 2) {
        bail!("--model-worlds {w}: the model needs at least 2 workers");
    }
    ensure!(
        args.right_world >= 2,
        "--right-world {}: at least 2 workers",
        args.right_world
    );
    ensure!(
        args.density > 0.0 && args.density <= 1.0,
        "--density {} must be in (0, 1]",
        args.density
    );
    ensure!(
        args.size >= 4 && args.sizes.iter().all(|&s| s >= 4),
        "--size and --sizes are in bytes, at least 4 (one f32)"
    );
    // Best of 0 timed calls would be no measurement at all (slowest_best would time
    // one call anyway and the table would say "best of 0").
    benchmarks::table::check_counts(&[("--repeats", Some(args.repeats))])?;
    ensure!(
        args.paper_alpha >= 0.0 && args.paper_beta > 0.0,
        "--paper-alpha must be >= 0 and --paper-beta > 0"
    );
    Ok(())
}

/// One worker of a measuring job: fit α-β, then time the collectives.
fn worker(args: &Args) -> Result<()> {
    let mut c = Communicator::from_env()?;
    let (rank, p) = (c.rank(), c.world_size());
    ensure!(p >= 2, "gtopk_fig9 needs at least 2 workers, got {p}");
    let pp_sizes: Vec<usize> = (0..=12).map(|i| 1usize << (2 * i)).collect();
    let fit = AlphaBeta::fit(&ping_pong(&mut c, &pp_sizes, 5)?);
    let (warmup, reps) = (args.warmup, args.repeats);
    let mut rows = Vec::new();
    let mut sparse = |c: &mut Communicator, panel: &str, bytes: usize| -> Result<()> {
        let (n, k) = (bytes / 4, pairs(bytes, args.density));
        let local = random_sparse(rank, n, k);
        for name in SPARSE {
            let t = slowest_best(c, warmup, reps, |c| {
                if name == "topk_allreduce" {
                    c.topk_allreduce(&local).map(|_| ())
                } else {
                    c.gtopk_allreduce(&local, k).map(|_| ())
                }
            })?;
            rows.push(
                json!({"panel": panel, "collective": name, "bytes": bytes, "k": k,
                "measured_s": t, "model_s": predict(&fit, name, p, bytes, k)}),
            );
        }
        Ok(())
    };
    sparse(&mut c, "left", args.size)?;
    let netem_job = args.rows_out.is_none();
    if args.measure_right || netem_job {
        for &bytes in &args.sizes {
            sparse(&mut c, "right", bytes)?;
        }
    }
    if !args.no_dense {
        let mut data = vec![1.0f32; args.size / 4];
        let t = slowest_best(&mut c, warmup, reps, |c| {
            c.allreduce(&mut data, ReduceOp::Sum)
        })?;
        rows.push(
            json!({"panel": "left", "collective": "allreduce", "bytes": args.size,
            "k": null, "measured_s": t, "model_s": fit.allreduce(p, args.size)}),
        );
    }
    c.barrier()?;
    if rank != 0 {
        return Ok(());
    }
    let job = json!({"world": p, "alpha": fit.alpha, "beta": fit.beta, "rows": rows});
    match &args.rows_out {
        Some(path) => std::fs::write(path, job.to_string())
            .with_context(|| format!("writing {}", path.display())),
        None => {
            std::fs::create_dir_all(&args.out)
                .with_context(|| format!("creating {}", args.out.display()))?;
            report(args, &[parse_job(&job)?])
        }
    }
}

fn parse_job(v: &Value) -> Result<Measured> {
    let num = |key: &str| {
        v[key]
            .as_f64()
            .with_context(|| format!("a measuring job's output lacks '{key}'"))
    };
    Ok(Measured {
        world: num("world")? as usize,
        fit: AlphaBeta {
            alpha: num("alpha")?,
            beta: num("beta")?,
        },
        rows: v["rows"].as_array().cloned().unwrap_or_default(),
    })
}

/// Runs one local job per `--worlds` entry and reports.
fn launch(args: &Args) -> Result<()> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut worlds = args.worlds.clone();
    worlds.sort_unstable();
    worlds.dedup();
    let largest = *worlds.last().context("no world to measure")?;
    let join = |v: &[usize]| {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut measured = Vec::new();
    for &w in &worlds {
        let path = args.out.join(format!("world-{w}.json"));
        let mut forward: Vec<std::ffi::OsString> = vec![
            "--size".into(),
            args.size.to_string().into(),
            "--sizes".into(),
            join(&args.sizes).into(),
            "--density".into(),
            args.density.to_string().into(),
            "--repeats".into(),
            args.repeats.to_string().into(),
            "--warmup".into(),
            args.warmup.to_string().into(),
            "--rows-out".into(),
            path.clone().into_os_string(),
        ];
        if args.no_dense {
            forward.push("--no-dense".into());
        }
        if w == largest {
            forward.push("--measure-right".into());
        }
        eprintln!("gtopk_fig9: measuring with {w} local workers");
        launch_local(w, &forward).with_context(|| format!("the {w}-worker job"))?;
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let v: Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        measured.push(parse_job(&v)?);
    }
    report(args, &measured)
}

fn main() {
    benchmarks::exit_on_error(run());
}

fn run() -> Result<()> {
    let mut args = Args::parse();
    match args.preset.as_str() {
        "quick" => {}
        "smoke" => {
            // The flags left at their defaults shrink to a run of seconds.
            args.smoke = true;
            if args.worlds == [2, 4, 8] {
                args.worlds = vec![2, 3];
            }
            if args.size == 100_000_000 {
                args.size = 4_000_000;
            }
            if args.sizes.len() == 6 && args.sizes.last() == Some(&400_000_000) {
                args.sizes = vec![400_000, 4_000_000];
            }
            if args.repeats == 3 {
                args.repeats = 1;
            }
        }
        p => bail!("--preset {p}: expected smoke or quick"),
    }
    validate(&args)?;
    if std::env::var("RANK").is_ok() {
        worker(&args)
    } else {
        launch(&args)
    }
}
