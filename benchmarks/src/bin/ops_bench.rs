//! Op micro-benchmark: our f32 matmul (512, 1024, 2048) and a 3×3 convolution
//! forward+backward (batch 32, 64→64 channels, 32×32, padding 1), each beside NumPy's and
//! PyTorch's CPU time measured in the same run by `reference/ops_bench.py` with the same
//! thread count. Prints a table, or one JSON object with `--json`.

use anyhow::Result;
use benchmarks::{best_of, init_threads, run_reference};
use clap::Parser;
use serde_json::{json, Value};
use tensor::{Conv2dOptions, DType, Device, Rng, Tensor};

#[derive(Parser)]
#[command(
    about = "Matmul and conv3x3 throughput against NumPy and PyTorch on the CPU, same threads, same run"
)]
struct Args {
    /// Threads for us and for the references (default: RAYON_NUM_THREADS, else all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Square matmul sizes.
    #[arg(long, value_delimiter = ',', default_value = "512,1024,2048")]
    sizes: Vec<usize>,
    /// Timed repetitions per measurement (the best is reported).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Skip the Python references (they are reported as null).
    #[arg(long)]
    no_reference: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

fn matmul_gflops(n: usize, repeats: usize, rng: &mut Rng) -> Result<f64> {
    let a = Tensor::randn(vec![n, n], 0.0, 1.0, DType::F32, Device::Cpu, rng)?;
    let b = Tensor::randn(vec![n, n], 0.0, 1.0, DType::F32, Device::Cpu, rng)?;
    let t = best_of(1, repeats, || {
        a.matmul(&b)?;
        Ok(())
    })?;
    Ok(2.0 * (n as f64).powi(3) / t / 1e9)
}

/// (milliseconds, GFLOP/s) of one forward + backward (input and weight gradients).
fn conv_step(repeats: usize, rng: &mut Rng) -> Result<(f64, f64)> {
    let (n, c, o, h, w) = (32, 64, 64, 32, 32);
    let x = Tensor::randn(vec![n, c, h, w], 0.0, 1.0, DType::F32, Device::Cpu, rng)?.to_var();
    let k = Tensor::randn(vec![o, c, 3, 3], 0.0, 0.05, DType::F32, Device::Cpu, rng)?.to_var();
    let gy = Tensor::randn(vec![n, o, h, w], 0.0, 1.0, DType::F32, Device::Cpu, rng)?;
    let opts = Conv2dOptions {
        padding: (1, 1),
        ..Default::default()
    };
    let t = best_of(2, repeats, || {
        let y = x.conv2d(&k, opts)?;
        y.backward_with_grad(&gy)?;
        Ok(())
    })?;
    let flops = 3.0 * 2.0 * (n * o * c * 9 * h * w) as f64;
    Ok((t * 1e3, flops / t / 1e9))
}

fn ratio(ours: f64, reference: Option<f64>) -> Option<f64> {
    reference.map(|r| ours / r)
}

fn main() {
    benchmarks::exit_on_error(run());
}

fn run() -> Result<()> {
    let args = Args::parse();
    let threads = init_threads(args.threads)?;
    let reference = if args.no_reference {
        None
    } else {
        let sizes = args
            .sizes
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let ref_args = vec![
            "--threads".into(),
            threads.to_string(),
            "--sizes".into(),
            sizes,
            "--repeats".into(),
            args.repeats.to_string(),
        ];
        match run_reference("ops_bench.py", &ref_args) {
            Ok(v) => Some(v),
            Err(e) => {
                eprintln!("ops_bench: reference unavailable ({e:#}); reporting ours only");
                None
            }
        }
    };
    let ref_matmul = |n: usize, key: &str| -> Option<f64> {
        reference.as_ref()?["matmul"]
            .as_array()?
            .iter()
            .find(|r| r["n"].as_u64() == Some(n as u64))?[key]
            .as_f64()
    };

    let mut rng = Rng::new(0);
    let mut rows = Vec::new();
    for &n in &args.sizes {
        let ours = matmul_gflops(n, args.repeats, &mut rng)?;
        rows.push((
            n,
            ours,
            ref_matmul(n, "numpy_gflops"),
            ref_matmul(n, "torch_gflops"),
        ));
    }
    let (conv_ms, conv_gflops) = conv_step(args.repeats, &mut rng)?;
    let torch_ms = reference
        .as_ref()
        .and_then(|r| r["conv3x3"]["torch_ms"].as_f64());

    if args.json {
        let matmul: Vec<Value> = rows
            .iter()
            .map(|&(n, ours, np, th)| {
                json!({"n": n, "ours_gflops": ours, "numpy_gflops": np, "torch_gflops": th, "ours_over_numpy": ratio(ours, np)})
            })
            .collect();
        let out = json!({
            "threads": threads,
            "matmul": matmul,
            "conv3x3": {"ours_ms": conv_ms, "ours_gflops": conv_gflops, "torch_ms": torch_ms,
                        "throughput_ours_over_torch": torch_ms.map(|t| t / conv_ms)},
            "numpy_version": reference.as_ref().map(|r| r["numpy_version"].clone()),
            "torch_version": reference.as_ref().map(|r| r["torch_version"].clone()),
        });
        println!("{out}");
        return Ok(());
    }
    let fmt = |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |x| format!("{x:.prec$}"));
    println!("threads: {threads}");
    println!(
        "{:<14} {:>12} {:>12} {:>12} {:>12}",
        "matmul f32", "ours GF/s", "numpy GF/s", "torch GF/s", "ours/numpy"
    );
    for &(n, ours, np, th) in &rows {
        println!(
            "{:<14} {:>12.1} {:>12} {:>12} {:>12}",
            format!("{n}x{n}"),
            ours,
            fmt(np, 1),
            fmt(th, 1),
            fmt(ratio(ours, np), 2)
        );
    }
    println!();
    println!(
        "{:<26} {:>10} {:>10} {:>16}",
        "conv3x3 fwd+bwd", "ours ms", "torch ms", "throughput ratio"
    );
    println!(
        "{:<26} {:>10.1} {:>10} {:>16}",
        "32x64x32x32, 64 out",
        conv_ms,
        fmt(torch_ms, 1),
        fmt(torch_ms.map(|t| t / conv_ms), 2)
    );
    println!(
        "(ratios above 1 mean we are faster; ours at {conv_gflops:.1} GFLOP/s on the convolution)"
    );
    Ok(())
}
