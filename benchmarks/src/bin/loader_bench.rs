//! Does the loader keep up? Batches per second of the sharded, prefetching loader on
//! Fashion-MNIST (Debian's files) and on CIFAR-10-format data (binary batches written
//! here in the real format, random pixels), both with CIFAR augmentation (pad-4 crop and
//! flip) and normalisation, against one ResNet-20 training step on the same batch shape
//! measured in the same run. The loader must be at least 5× faster than the step.

use anyhow::{Context, Result};
use benchmarks::{best_of, init_threads};
use clap::Parser;
use data::{read_cifar10, read_mnist, Augment, Dataset, ImageDataset, Loader};
use nn::{models, Ctx, Module};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tensor::Rng;

#[derive(Parser)]
#[command(about = "Loader throughput (batches/s) against the time of one ResNet-20 training step")]
struct Args {
    /// Directory of the four Fashion-MNIST IDX files.
    #[arg(long, default_value = data::prepare::FASHION_MNIST_SYSTEM_DIR)]
    fashion_dir: PathBuf,
    #[arg(long, default_value_t = 32)]
    batch: usize,
    #[arg(long)]
    threads: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// (batches per second over one epoch of rank 0 of 1, batches counted).
fn loader_rate(ds: ImageDataset, batch: usize) -> Result<(f64, usize)> {
    let l = Loader::new(Arc::new(ds.with_augment(Augment::cifar())), batch, 0, 1, 0)?;
    let t = Instant::now();
    let mut n = 0;
    for b in l.epoch(0) {
        b?;
        n += 1;
    }
    Ok((n as f64 / t.elapsed().as_secs_f64(), n))
}

fn step_seconds(in_channels: usize, hw: usize, batch: usize) -> Result<f64> {
    let mut rng = Rng::new(0);
    let model = models::resnet_cifar(20, in_channels, 10, &mut rng)?;
    let x = tensor::Tensor::randn(
        vec![batch, in_channels, hw, hw],
        0.0,
        1.0,
        tensor::DType::F32,
        tensor::Device::Cpu,
        &mut rng,
    )?;
    let y = tensor::Tensor::from_vec(
        (0..batch as u32).map(|i| i % 10).collect::<Vec<_>>(),
        batch,
        tensor::Device::Cpu,
    )?;
    let mut ctx = Ctx::train(0);
    best_of(1, 3, || {
        model
            .forward(&x, &mut ctx)?
            .cross_entropy(&y, None)?
            .backward()?;
        Ok(())
    })
}

fn main() {
    benchmarks::exit_on_error(run());
}

fn run() -> Result<()> {
    let args = Args::parse();
    let threads = init_threads(args.threads)?;
    let f = &args.fashion_dir;
    let fashion = read_mnist(
        &f.join("train-images-idx3-ubyte.gz"),
        &f.join("train-labels-idx1-ubyte.gz"),
        10,
    )
    .with_context(|| {
        format!(
            "reading Fashion-MNIST from {} (apt-get install dataset-fashion-mnist)",
            f.display()
        )
    })?;
    let fashion_n = fashion.len();
    // CIFAR-10 format: 10,000 records of random pixels, written and read back for real.
    let dir = std::env::temp_dir().join(format!("loader-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut rng = Rng::new(1);
    let mut bytes = Vec::with_capacity(10_000 * 3073);
    for i in 0..10_000 {
        bytes.push((i % 10) as u8);
        bytes.extend((0..3072).map(|_| rng.below(256) as u8));
    }
    let file = dir.join("data_batch_1.bin");
    std::fs::write(&file, &bytes)?;
    let cifar = read_cifar10(&[&file])?;
    std::fs::remove_dir_all(&dir).ok();

    let (fashion_rate, fashion_batches) = loader_rate(fashion, args.batch)?;
    let (cifar_rate, cifar_batches) = loader_rate(cifar, args.batch)?;
    let fashion_step = step_seconds(1, 28, args.batch)?;
    let cifar_step = step_seconds(3, 32, args.batch)?;
    let rows = [
        (
            "fashion-mnist",
            fashion_n,
            fashion_batches,
            fashion_rate,
            fashion_step,
        ),
        (
            "cifar10-format",
            10_000,
            cifar_batches,
            cifar_rate,
            cifar_step,
        ),
    ];
    if args.json {
        let v: Vec<_> = rows
            .iter()
            .map(|&(name, n, b, rate, step)| {
                json!({"dataset": name, "images": n, "batches": b, "batch": args.batch, "loader_batches_per_s": rate,
                       "resnet20_step_s": step, "loader_over_step": rate * step, "threads": threads})
            })
            .collect();
        println!("{}", serde_json::Value::Array(v));
        return Ok(());
    }
    println!("threads: {threads}, batch {}", args.batch);
    println!(
        "{:<16} {:>10} {:>16} {:>18} {:>14}",
        "dataset", "batches", "loader batch/s", "ResNet-20 step ms", "loader/step"
    );
    for (name, _, b, rate, step) in rows {
        println!(
            "{name:<16} {b:>10} {rate:>16.0} {:>18.1} {:>13.1}x",
            step * 1e3,
            rate * step
        );
    }
    Ok(())
}
