//! Shared helpers for the benchmark binaries: thread-pool setup, best-of timing, and
//! running the Python reference scripts in `benchmarks/reference/` in the same process
//! tree, so every number we print has a reference measured in the same run.

use anyhow::{bail, Context, Result};

pub mod collective;
pub mod gpu_compress;
pub mod table;
pub mod verdict;

/// A caching allocator for every benchmark binary. Training allocates and frees tensors
/// of the same few sizes at every step; with glibc's malloc, large blocks go back to the
/// kernel and come back as fresh pages that fault on first touch, which cost as much as
/// the arithmetic on ResNet-20 (measured: ReLU forward+backward 4.8 → 2.5 ms at batch 32).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// Ends a binary's `main`: an error is printed as one line with its causes
/// (`error: … : …`) and the process exits with status 1. Returning the error from
/// `main` instead prints its Debug form, which with `RUST_BACKTRACE=1` set (as many
/// shells have it) adds a stack backtrace to every bad flag or missing file.
pub fn exit_on_error(result: Result<()>) {
    if let Err(e) = result {
        // A Ctrl-C: the job's workers saved their checkpoints; exits with 130.
        train::interrupt::exit_if_interrupted(&e);
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// Threads to use: `--threads` if given, else `RAYON_NUM_THREADS`, else all cores.
/// Configures rayon's global pool, which our kernels (and `gemm`) run on.
pub fn init_threads(requested: Option<usize>) -> Result<usize> {
    let n = requested
        .or_else(|| {
            std::env::var("RAYON_NUM_THREADS")
                .ok()
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
        .context("configuring the rayon thread pool")?;
    // The main thread, which times the steps, runs its kernels itself with n − 1 helpers
    // (as the trainer's training thread does, and PyTorch's ops do); other threads'
    // kernels go to the global pool above.
    tensor::cpu::run_kernels_here(Some(n)).context("configuring the main thread's kernels")?;
    Ok(n)
}

/// Best wall time in seconds of `repeats` runs of `f`, after `warmup` untimed runs.
/// The minimum is the least noisy estimate on a shared machine.
pub fn best_of(warmup: usize, repeats: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    let mut best = f64::INFINITY;
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// Path of a script in `benchmarks/reference/`: `$GRADEX_REFERENCE_DIR` if set, else the
/// source tree the binary was built from, else `benchmarks/reference/` under the current
/// directory (a prebuilt binary carried to another machine runs from a copy of the
/// repository, at a different path).
pub fn reference_script(name: &str) -> PathBuf {
    if let Ok(dir) = std::env::var("GRADEX_REFERENCE_DIR") {
        return PathBuf::from(dir).join(name);
    }
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("reference")
        .join(name);
    if built.exists() {
        return built;
    }
    PathBuf::from("benchmarks").join("reference").join(name)
}

/// Runs a reference script with `python3` (or `$PYTHON`) and parses the one JSON object it
/// prints. An error says why (no Python, script failed, bad output) so callers can report
/// the reference as missing rather than fail the whole benchmark.
pub fn run_reference(script: &str, args: &[String]) -> Result<serde_json::Value> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let path = reference_script(script);
    let out = Command::new(&python)
        .arg(&path)
        .args(args)
        .output()
        .with_context(|| format!("running {python} {}", path.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("parsing the JSON printed by {}", path.display()))
}

/// The median as Python's `statistics.median` takes it (the mean of the middle pair of an
/// even count), which the PyTorch reference scripts report: ratios compare like with like.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Rank `rank`'s sparse gradient for the sparse-collective benchmarks: k normal values at
/// uniform random positions below n (duplicates summed), the same for a rank in every
/// benchmark.
pub fn random_sparse(rank: usize, n: usize, k: usize) -> comm::SparseVec {
    let mut r = tensor::Rng::new(rank as u64 + 7);
    comm::SparseVec::new(
        (0..k)
            .map(|_| (r.below(n) as u32, r.normal() as f32))
            .collect(),
    )
}

/// The method of `label` (`name` or `name:key=value,...`) as the one rank of a job
/// builds it (momentum 0.9, no weight decay); callers add which flag named it.
pub fn one_rank_method(label: &str) -> Result<Box<dyn compress::Method>> {
    let (name, opts) = label.split_once(':').unwrap_or((label, ""));
    let opts: Vec<String> = opts
        .split(',')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let ctx = compress::Context {
        rank: 0,
        world: 1,
        seed: 1,
        momentum: 0.9,
        nesterov: false,
        weight_decay: 0.0,
    };
    Ok(compress::MethodSpec::parse(name, &opts).and_then(|spec| compress::build(&spec, &ctx))?)
}
