//! Every method's compression and decompression on one 25 M-value gradient (ResNet-50's
//! size) with a heavy-tailed distribution: values per second each way, the density
//! reached, and the bytes of the message against dense f32. Then the selection
//! algorithms (exact top-k, DGC's sampled threshold) against one memory pass over the
//! same buffer (a sum in eight lanes and a copy, on the same threads; torch.sum and
//! torch's copy beside them when PyTorch is installed), measured in the same run.
//!
//! Each method runs through its real `exchange` on a one-rank job, so the residual
//! bookkeeping, encoding and decoding are exactly the training path's; the collective of
//! one rank is a copy and is not counted.

use anyhow::{anyhow, ensure, Context as _, Result};
use benchmarks::{best_of, init_threads};
use clap::Parser;
use comm::{CommConfig, Communicator};
use compress::{HostAfterStep, HostExchange, ParamSpec, StepInfo};
use rayon::prelude::*;
use serde_json::{json, Value};
use tensor::Rng;

#[derive(Parser)]
#[command(
    about = "Compression and decompression speed, density and message bytes (the encoded message, before frame headers) of every method on a 25 M-value gradient, and selection against a memory pass"
)]
struct Args {
    /// Values in the gradient (ResNet-50 has 25,557,032 parameters).
    #[arg(long, default_value_t = 25_557_032)]
    values: usize,
    /// Threads (rayon pool; the memory pass uses them all).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Timed repetitions (the best is reported) after one warm-up.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Density of the sparsifying methods and of the selection comparison.
    #[arg(long, default_value_t = 0.001)]
    density: f64,
    /// Methods as `name` or `name:key=value,key=value`; default: all of them.
    #[arg(long, value_delimiter = ' ')]
    methods: Vec<String>,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
    /// `cpu`: every method through its exchange, as above. `cuda`: DGC's compression and
    /// its selections on GPU 0 against a device copy and torch.topk on the same GPU, then
    /// every method of --methods through its whole exchange on GPU tensors
    /// (benchmarks/src/gpu_compress.rs; --threads does not apply).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "cuda"])]
    device: String,
}

/// Gradient-like values: Gaussian bulk, Student-t tail (3 degrees of freedom), 5 % zeros.
fn heavy_tailed(n: usize, seed: u64) -> Vec<f32> {
    let chunk = 1 << 20;
    (0..n.div_ceil(chunk))
        .into_par_iter()
        .flat_map_iter(|c| {
            let mut r = Rng::new(seed ^ (c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let len = chunk.min(n - c * chunk);
            (0..len)
                .map(|_| {
                    if r.below(20) == 0 {
                        return 0.0;
                    }
                    let chi: f64 = (0..3).map(|_| r.normal().powi(2)).sum::<f64>() / 3.0;
                    (1e-3 * r.normal() / chi.sqrt()) as f32
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Σ x over a chunk in eight independent f64 lanes (one chain of adds is latency-bound).
fn sum_lanes(c: &[f32]) -> f64 {
    let mut acc = [0f64; 8];
    let mut it = c.chunks_exact(8);
    for x in &mut it {
        for (a, &v) in acc.iter_mut().zip(x) {
            *a += v as f64;
        }
    }
    acc.iter().sum::<f64>() + it.remainder().iter().map(|&v| v as f64).sum::<f64>()
}

fn default_methods(density: f64) -> Vec<String> {
    let d = format!("density={density}");
    vec![
        "dense".into(),
        "dense:wire=f16".into(),
        format!("topk:{d}"),
        format!("dgc:{d},warmup_epochs=0"),
        format!("dgc:{d},warmup_epochs=0,sampling=false"),
        format!("gtopk:{d}"),
        format!("sbc:delay=1,density={density}"),
        "qsgd:preset=2bit".into(),
        "qsgd:preset=4bit".into(),
        "qsgd:preset=8bit".into(),
        "qsgd:preset=8bit-8192".into(),
        "qsgd:preset=4bit,coding=fixed".into(),
        "terngrad".into(),
        "onebit".into(),
        // The flat gradient is a vector: the batched variant makes it a square.
        "powersgd:batched=true,start_iter=0,rank=4".into(),
    ]
}

fn one_rank() -> Result<Communicator> {
    Ok(Communicator::connect(&CommConfig {
        max_frame: 1 << 34,
        ..CommConfig::loopback(0, 1, 0, b"bench")
    })?)
}

/// Checks every argument, the methods' options included (each method is built once and
/// dropped), before anything runs: a bad last method or --density must not be found
/// only after the gradient is generated and the earlier methods have been timed.
/// Returns the method labels to run.
fn validate(args: &Args) -> Result<Vec<String>> {
    benchmarks::table::check_counts(&[
        ("--values", Some(args.values)),
        ("--threads", Some(args.threads)),
        ("--repeats", Some(args.repeats)),
    ])?;
    benchmarks::table::check_density("--density", args.density)?;
    // The sparse methods' indices are u32.
    ensure!(
        args.values <= u32::MAX as usize,
        "--values {}: must be at most {} (indices are u32)",
        args.values,
        u32::MAX
    );
    let methods = if args.methods.is_empty() {
        default_methods(args.density)
    } else {
        args.methods.clone()
    };
    for label in &methods {
        benchmarks::one_rank_method(label).with_context(|| format!("--methods {label}"))?;
    }
    Ok(methods)
}

/// Best compression and decompression seconds of `label` over the repetitions, with the
/// density and message bytes of the last one.
fn bench_method(label: &str, grad: &[f32], repeats: usize) -> Result<Value> {
    let mut m = benchmarks::one_rank_method(label).with_context(|| format!("--methods {label}"))?;
    m.init(&[ParamSpec::new("grad", &[grad.len()])])?;
    let mut comm = one_rank()?;
    let mut weights = vec![0f32; grad.len()];
    let (mut best_c, mut best_d) = (f64::INFINITY, f64::INFINITY);
    let mut last = None;
    for step in 0..=repeats {
        m.begin_step(StepInfo {
            step: step as u64,
            epoch: 100.0,
        });
        let u = m.exchange(HostExchange::new(&mut comm, 0, grad).with_weights(&weights))?;
        let mut stats = u.stats;
        // Delayed methods compress after the optimizer step: move the weights by the
        // gradient, as a step with learning rate 1 would.
        weights.iter_mut().zip(&u.values).for_each(|(w, g)| *w -= g);
        if let Some(s) = m.after_step(HostAfterStep::new(&mut comm, 0, &mut weights))? {
            stats = s;
        }
        if step > 0 {
            best_c = best_c.min(stats.compress_seconds);
            best_d = best_d.min(stats.decompress_seconds);
        }
        last = Some(stats);
    }
    let s = last.ok_or_else(|| anyhow!("no repetitions"))?;
    let n = grad.len() as f64;
    // A dense exchange has no compression step: its speed is null, not infinite.
    let rate = |t: f64| if t > 0.0 { json!(n / t) } else { Value::Null };
    Ok(json!({
        "method": label,
        "describe": m.describe(),
        "compress_values_per_s": rate(best_c),
        "decompress_values_per_s": rate(best_d),
        "density": s.density(),
        "message_bytes": s.message_bytes,
        "dense_bytes": s.dense_bytes,
    }))
}

fn main() {
    benchmarks::exit_on_error(run());
}

fn run() -> Result<()> {
    let args = Args::parse();
    let methods = validate(&args)?;
    init_threads(Some(args.threads))?;
    let n = args.values;
    eprintln!("generating {n} heavy-tailed values ...");
    let grad = heavy_tailed(n, 42);
    if args.device == "cuda" {
        return benchmarks::gpu_compress::run(
            &grad,
            args.density,
            args.repeats.max(5),
            &methods,
            args.json,
        );
    }
    let mut rows = Vec::new();
    for label in &methods {
        eprintln!("{label} ...");
        rows.push(bench_method(label, &grad, args.repeats)?);
    }
    // Selection against one memory pass over the same buffer: a sum with eight
    // independent accumulators per thread, so that it is bound by memory bandwidth and
    // not by the latency of one chain of adds (a single f64 chain took 10.6 ms here where
    // torch.sum takes 3.1), and a copy; torch.sum and torch's copy beside them when
    // PyTorch is installed.
    let k = ((n as f64) * args.density).ceil() as usize;
    let mut sink = 0f64;
    let memory = best_of(1, args.repeats, || {
        sink += grad.par_chunks(1 << 16).map(sum_lanes).sum::<f64>();
        Ok(())
    })?;
    let mut dst = vec![0f32; n];
    let copy = best_of(1, args.repeats, || {
        dst.par_chunks_mut(1 << 16)
            .zip(grad.par_chunks(1 << 16))
            .for_each(|(d, s)| d.copy_from_slice(s));
        Ok(())
    })?;
    drop(dst);
    let torch = benchmarks::run_reference(
        "cpu_pass.py",
        &[format!("--n={n}"), format!("--threads={}", args.threads)],
    )
    .map_err(|e| eprintln!("PyTorch reference not run: {e:#}"))
    .ok();
    let mut kept = (0, 0);
    let exact = best_of(0, args.repeats, || {
        kept.0 = compress::select::exact_topk(&grad, k).len();
        Ok(())
    })?;
    let mut rng = Rng::new(7);
    let sampled = best_of(1, args.repeats, || {
        kept.1 = compress::select::sampled_threshold(&grad, k, 0.01, &mut rng).len();
        Ok(())
    })?;
    std::hint::black_box(sink);
    let selection = [
        ("memory_pass", memory, n),
        ("copy", copy, n),
        ("exact_topk", exact, kept.0),
        ("sampled_threshold", sampled, kept.1),
    ];
    if args.json {
        let mut all = rows.clone();
        for (name, t, _) in selection {
            all.push(json!({"selection": name, "seconds": t}));
        }
        all.push(json!({"torch_reference": torch}));
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    println!(
        "{n} values, {} threads, best of {}",
        args.threads, args.repeats
    );
    println!(
        "{:<50} {:>12} {:>12} {:>10} {:>14} {:>9}",
        "method", "comp Mval/s", "decomp Mv/s", "density", "msg bytes", "ratio"
    );
    let mvals = |v: &Value| {
        v.as_f64()
            .map_or("-".to_string(), |x| format!("{:.1}", x / 1e6))
    };
    for r in &rows {
        let message = r["message_bytes"].as_u64().unwrap_or(0).max(1) as f64;
        println!(
            "{:<50} {:>12} {:>12} {:>10.6} {:>14} {:>8.1}x",
            r["method"].as_str().unwrap_or(""),
            mvals(&r["compress_values_per_s"]),
            mvals(&r["decompress_values_per_s"]),
            r["density"].as_f64().unwrap_or(0.0),
            r["message_bytes"],
            r["dense_bytes"].as_f64().unwrap_or(0.0) / message,
        );
    }
    println!("\nselection of k = {k} ({}):", args.density);
    if let Some(t) = &torch {
        let ms = |key: &str| t[key].as_f64().unwrap_or(f64::NAN);
        println!(
            "PyTorch {} on {} threads: torch.sum {:.2} ms ({:.2}x our memory pass), copy {:.2} ms",
            t["torch_version"].as_str().unwrap_or("?"),
            args.threads,
            ms("sum_ms"),
            ms("sum_ms") / (memory * 1e3),
            ms("copy_ms"),
        );
    }
    for (name, t, kept) in selection {
        println!(
            "{name:<20} {:>9.2} ms  {:>6.2}x the memory pass  (kept {kept})",
            t * 1e3,
            t / memory
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{validate, Args};
    use clap::Parser;

    fn check(flags: &[&str]) -> Result<Vec<String>, String> {
        let args = Args::try_parse_from(["compress_bench"].iter().chain(flags))
            .map_err(|e| e.to_string())?;
        validate(&args).map_err(|e| format!("{e:#}"))
    }

    #[test]
    fn the_defaults_build_every_method() {
        assert_eq!(check(&[]).unwrap().len(), 15);
        let one = check(&["--values", "1", "--repeats", "1", "--threads", "1"]);
        assert_eq!(one.unwrap().len(), 15);
    }

    #[test]
    fn every_bad_argument_is_refused_before_anything_runs() {
        for (flags, want) in [
            (&["--values", "0"][..], "--values 0: must be at least 1"),
            (&["--values", "4294967296"], "must be at most 4294967295"),
            (&["--repeats", "0"], "--repeats 0: must be at least 1"),
            (&["--threads", "0"], "--threads 0: must be at least 1"),
            (&["--density", "0"], "--density 0: must be in (0, 1]"),
            (&["--density", "2"], "--density 2: must be in (0, 1]"),
            // The last method's option is wrong: found before the first one runs.
            (
                &["--methods", "dense topk:density=1.5"],
                "--methods topk:density=1.5",
            ),
            (&["--methods", "dense nosuch"], "--methods nosuch"),
        ] {
            let e = check(flags).expect_err(&format!("{flags:?} was accepted"));
            assert!(e.contains(want), "{flags:?}: expected '{want}' in: {e}");
        }
    }
}
