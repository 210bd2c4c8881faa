//! One training step (forward, loss, backward, SGD with momentum 0.9) of ResNet-50 at
//! batch 64 and of the 2 × 1500 LSTM language model (vocab 10000, batch 20, 35 steps),
//! both with cross-entropy, and of DGC's AN4 DeepSpeech (5 bidirectional LSTM layers of
//! 800, batch 16 of 200 frames, CTC) on CUDA device 0, against PyTorch eager fp32 on the
//! same GPU measured in the same run by `reference/gpu_step.py` (TF32 off on both sides).
//!
//! Each step ends with a device synchronisation, so a step's time is the whole step's
//! GPU work. The median of `--repeats` steps after `--warmup` is reported, with the ratio
//! ours / PyTorch (lower is better; the target is ≤ 2).
//!
//! Also reported: the memory high-water mark over the timed steps beside PyTorch's
//! `max_memory_allocated` (ours from the CUDA pool that caches freed blocks, see
//! tensor's cuda/memory.rs; `GRADEX_CUDA_CACHE=off` measures the step without caching),
//! and how many times a step waited for the GPU before its end (0 is the goal).
//!
//! `--exchange dense,dgc` also times the step with each gradient exchanged by that method
//! on tensors over NCCL with one rank (`Method::exchange_tensor`, the trainer's path with
//! `--backend nccl`), then applied as the trainer applies it; the ratio to the plain step
//! is the exchange's cost on the GPU (issue 36's target for DGC: at most 1.10× the dense
//! exchange's step). One rank's NCCL collectives are local copies, so this is the
//! compression's cost, not the network's.
//!
//! `cargo run --release -p benchmarks --bin gpu_step_bench` on a GPU machine, or the
//! prebuilt binary through scripts/gpu-check.sh. Exits with an error without a GPU.

use anyhow::{bail, Context, Result};
use benchmarks::{median, run_reference};
use clap::Parser;
use nn::optim::{Optimizer, Sgd};
use nn::{init, models, Ctx, Module};
use serde_json::json;
use std::time::Instant;
use tensor::{cuda, DType, Device, Rng, Tensor};

#[derive(Parser)]
#[command(
    about = "GPU training-step time of ResNet-50, the 2x1500 LSTM LM and DeepSpeech against PyTorch"
)]
struct Args {
    /// Models to time (resnet50, lstm, deepspeech).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "resnet50,lstm,deepspeech"
    )]
    models: Vec<String>,
    /// Timed steps (the median is reported).
    #[arg(long, default_value_t = 10)]
    repeats: usize,
    /// Untimed steps first (kernel compilation, allocator warm-up).
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Skip the PyTorch reference.
    #[arg(long)]
    no_reference: bool,
    /// Also time forward, backward and the SGD update separately (synchronising between
    /// them).
    #[arg(long)]
    breakdown: bool,
    /// Append the results as JSON lines to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Also time the step with these methods' exchange over NCCL (one rank): dense, dgc
    /// (DGC at density 0.001, no warm-up, momentum 0.9, its defaults otherwise).
    #[arg(long, value_delimiter = ',')]
    exchange: Vec<String>,
}

/// A one-rank job's NCCL communicator on `device` (over a one-rank TCP rendezvous).
fn nccl_group(device: Device) -> Result<comm::NcclCommunicator> {
    let cfg = comm::CommConfig::loopback(0, 1, 0, b"gpu_step_bench");
    let mut tcp = comm::Communicator::connect(&cfg).context("a one-rank TCP communicator")?;
    comm::NcclCommunicator::new(&mut tcp, device).context("NCCL on one rank")
}

/// `name` (dense, dgc) built for one rank and placed on `device` for `model`'s parameters.
fn exchange_method(
    name: &str,
    model: &dyn Module,
    device: Device,
) -> Result<Box<dyn compress::Method>> {
    let label = match name {
        "dense" => "dense",
        "dgc" => "dgc:density=0.001,warmup_epochs=0",
        other => bail!("--exchange {other}: dense or dgc"),
    };
    let mut m = benchmarks::one_rank_method(label).with_context(|| format!("--exchange {name}"))?;
    let specs: Vec<compress::ParamSpec> = model
        .named_params()
        .iter()
        .map(|p| compress::ParamSpec::new(&p.name, p.tensor.dims()))
        .collect();
    m.init(&specs)?;
    m.place(device)?;
    Ok(m)
}

/// One step with every gradient exchanged by `method` over `group` in parameter order,
/// then applied as the trainer applies it (`Gradient`: SGD; `Direction`: w −= lr·d).
#[allow(clippy::too_many_arguments)]
fn exchange_step(
    model: &dyn Module,
    sgd: &mut Sgd,
    device: Device,
    loss_of: &dyn Fn(&dyn Module, &mut Ctx) -> tensor::Result<Tensor>,
    method: &mut dyn compress::Method,
    group: &mut comm::NcclCommunicator,
    lr: f64,
) -> Result<()> {
    let mut ctx = Ctx::train(1);
    let loss = loss_of(model, &mut ctx)?;
    let grads = loss.backward()?;
    let params: Vec<Tensor> = model.named_params().into_iter().map(|p| p.tensor).collect();
    let mut updates = Vec::with_capacity(params.len());
    for (i, p) in params.iter().enumerate() {
        let g = grads
            .get(p)
            .with_context(|| format!("no gradient for parameter {i}"))?;
        updates.push(
            method.exchange_tensor(compress::TensorExchange::new(group, i, g).with_weights(p))?,
        );
    }
    tensor::no_grad(|| -> Result<()> {
        for (i, (p, u)) in params.iter().zip(updates).enumerate() {
            match u.kind {
                compress::UpdateKind::Gradient => sgd.update(i, p, &u.values)?,
                compress::UpdateKind::Direction => p.assign(&p.sub(&u.values.scale(lr)?)?)?,
            }
        }
        Ok(())
    })?;
    cuda::synchronize(device)?;
    Ok(())
}

/// Median step time in ms of `step`, which must leave the device idle when it returns.
fn time_steps(warmup: usize, repeats: usize, mut step: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..warmup {
        step()?;
    }
    let mut times = Vec::new();
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        step()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(times))
}

/// One SGD step of `model` on the loss `loss_of` computes, synchronised.
fn train_step(
    model: &dyn Module,
    sgd: &mut Sgd,
    device: Device,
    loss_of: &dyn Fn(&dyn Module, &mut Ctx) -> tensor::Result<Tensor>,
) -> Result<()> {
    let mut ctx = Ctx::train(1);
    let loss = loss_of(model, &mut ctx)?;
    let grads = loss.backward()?;
    let params: Vec<Tensor> = model.named_params().into_iter().map(|p| p.tensor).collect();
    sgd.step(&params, &grads)?;
    cuda::synchronize(device)?;
    Ok(())
}

/// Median forward, backward and update times (ms), each phase synchronised.
fn phases(
    model: &dyn Module,
    sgd: &mut Sgd,
    device: Device,
    loss_of: &dyn Fn(&dyn Module, &mut Ctx) -> tensor::Result<Tensor>,
    repeats: usize,
) -> Result<[f64; 3]> {
    let mut v: [Vec<f64>; 3] = Default::default();
    for _ in 0..repeats.max(1) {
        let mut ctx = Ctx::train(1);
        let t = Instant::now();
        let loss = loss_of(model, &mut ctx)?;
        cuda::synchronize(device)?;
        let fwd = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let grads = loss.backward()?;
        cuda::synchronize(device)?;
        let bwd = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let params: Vec<Tensor> = model.named_params().into_iter().map(|p| p.tensor).collect();
        sgd.step(&params, &grads)?;
        cuda::synchronize(device)?;
        let upd = t.elapsed().as_secs_f64() * 1e3;
        for (slot, x) in v.iter_mut().zip([fwd, bwd, upd]) {
            slot.push(x);
        }
    }
    let [a, b, c] = v;
    Ok([median(a), median(b), median(c)])
}

fn report_phases(name: &str, p: [f64; 3]) {
    eprintln!(
        "{name}: forward {:.1} ms, backward {:.1} ms, SGD update {:.1} ms",
        p[0], p[1], p[2]
    );
}

/// A model on the device, its batch size and its loss on a fixed batch.
type Workload = (
    Box<dyn Module>,
    usize,
    Box<dyn Fn(&dyn Module, &mut Ctx) -> tensor::Result<Tensor>>,
);

/// A standard-normal f32 input drawn on the host (the same values whatever the device)
/// and moved to `device`.
fn normal_input(shape: Vec<usize>, device: Device, rng: &mut Rng) -> Result<Tensor> {
    Ok(Tensor::randn(shape, 0.0, 1.0, DType::F32, Device::Cpu, rng)?.to_device(device)?)
}

fn workload(name: &str, device: Device) -> Result<Workload> {
    let mut rng = Rng::new(0);
    Ok(match name {
        "resnet50" => {
            let batch = 64;
            let model = init::with_default_device(device, || models::resnet50(1000, &mut rng))?;
            let x = normal_input(vec![batch, 3, 224, 224], device, &mut rng)?;
            let labels: Vec<u32> = (0..batch as u32).map(|i| i % 1000).collect();
            let y = Tensor::from_vec(labels, vec![batch], device)?;
            let loss =
                move |m: &dyn Module, ctx: &mut Ctx| m.forward(&x, ctx)?.cross_entropy(&y, None);
            (Box::new(model), batch, Box::new(loss))
        }
        "lstm" => {
            let (batch, steps, vocab) = (20usize, 35usize, 10000usize);
            let model =
                init::with_default_device(device, || models::lstm_lm(vocab, 1500, 0.0, &mut rng))?;
            let ids: Vec<u32> = (0..steps * batch)
                .map(|i| ((i * 37) % vocab) as u32)
                .collect();
            let targets: Vec<u32> = (0..ids.len())
                .map(|i| ids[(i + batch) % ids.len()])
                .collect();
            let x = Tensor::from_vec(ids, vec![steps, batch], device)?;
            let y = Tensor::from_vec(targets, vec![steps * batch], device)?;
            let loss = move |m: &dyn Module, ctx: &mut Ctx| {
                m.forward(&x, ctx)?
                    .reshape(vec![steps * batch, vocab])?
                    .cross_entropy(&y, None)
            };
            (Box::new(model), batch, Box::new(loss))
        }
        "deepspeech" => {
            // DGC's AN4 model (5 bidirectional LSTM layers of 800, 29 classes) on 2 s
            // utterances (200 frames), transcripts of 20 labels, CTC averaged over the batch.
            let (batch, frames, classes, label_len) = (16usize, 200usize, 29usize, 20usize);
            let model = init::with_default_device(device, || {
                models::deepspeech(nn::layers::RnnKind::Lstm, 5, 800, classes, &mut rng)
            })?;
            let x = normal_input(
                vec![batch, 1, models::SPECTROGRAM_BINS, frames],
                device,
                &mut rng,
            )?;
            let targets: Vec<Vec<u32>> = (0..batch)
                .map(|b| {
                    (0..label_len)
                        .map(|j| 1 + ((b * 7 + j * 13) % (classes - 1)) as u32)
                        .collect()
                })
                .collect();
            let loss = move |m: &dyn Module, ctx: &mut Ctx| {
                let logits = m.forward(&x, ctx)?;
                let lengths = vec![logits.dims()[0]; batch];
                nn::loss::ctc_loss(
                    &logits.log_softmax(2)?,
                    &targets,
                    &lengths,
                    nn::loss::CtcReduction::BatchMean,
                    false,
                )
            };
            (Box::new(model), batch, Box::new(loss))
        }
        other => bail!("unknown model {other:?} (resnet50, lstm, deepspeech)"),
    })
}

/// What `bench` measured of one model.
struct Timed {
    batch: usize,
    /// The plain step's median time (ms).
    ms: f64,
    /// Each `--exchange` method's step time (ms).
    exchanged: Vec<(String, f64)>,
    /// The memory pool's high-water marks over the timed steps (MiB): held by live
    /// buffers, and mapped by the pool (live plus cached); `None` without a pool.
    peak_used_mib: Option<f64>,
    peak_reserved_mib: Option<f64>,
    /// Times one step waited for the GPU before its closing synchronisation (0 is the
    /// goal: every wait stalls the host's queueing of kernels).
    syncs_per_step: u64,
}

fn bench(name: &str, args: &Args, device: Device) -> Result<Timed> {
    let (model, batch, loss) = workload(name, device)?;
    let mut sgd = Sgd::new(0.01, 0.9, false, 0.0)?;
    let gpu = cuda::device(0)?;
    for _ in 0..args.warmup {
        train_step(model.as_ref(), &mut sgd, device, loss.as_ref())?;
    }
    gpu.reset_memory_peaks()?;
    let ms = time_steps(0, args.repeats, || {
        train_step(model.as_ref(), &mut sgd, device, loss.as_ref())
    })?;
    let memory = gpu.memory_stats()?;
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let before = gpu.host_syncs();
    train_step(model.as_ref(), &mut sgd, device, loss.as_ref())?;
    // train_step's own closing synchronisation is the one wait a step should have.
    let syncs_per_step = (gpu.host_syncs() - before).saturating_sub(1);
    let mut exchanged = Vec::new();
    if !args.exchange.is_empty() {
        let mut group = nccl_group(device)?;
        for method in &args.exchange {
            let mut m = exchange_method(method, model.as_ref(), device)?;
            let mut sgd = Sgd::new(0.01, 0.9, false, 0.0)?;
            let t = time_steps(args.warmup, args.repeats, || {
                exchange_step(
                    model.as_ref(),
                    &mut sgd,
                    device,
                    loss.as_ref(),
                    m.as_mut(),
                    &mut group,
                    0.01,
                )
            })
            .with_context(|| format!("the step with the {method} exchange"))?;
            eprintln!("{name}: step with the {method} exchange over NCCL (one rank) {t:.1} ms, plain step {ms:.1} ms");
            exchanged.push((method.clone(), t));
        }
    }
    if args.breakdown {
        report_phases(
            name,
            phases(
                model.as_ref(),
                &mut sgd,
                device,
                loss.as_ref(),
                args.repeats,
            )?,
        );
    }
    Ok(Timed {
        batch,
        ms,
        exchanged,
        peak_used_mib: memory.map(|m| mib(m.used_peak)),
        peak_reserved_mib: memory.map(|m| mib(m.reserved_peak)),
        syncs_per_step,
    })
}

fn main() {
    benchmarks::exit_on_error(run());
}

fn run() -> Result<()> {
    let args = Args::parse();
    if !cuda::is_available(0) {
        bail!(
            "gpu_step_bench: no usable CUDA device (driver, device, cuBLAS and NVRTC are needed)"
        );
    }
    let device = Device::Cuda(0);
    let mut rows = Vec::new();
    for name in &args.models {
        let t = bench(name, &args, device).with_context(|| format!("timing {name}"))?;
        let (batch, ours) = (t.batch, t.ms);
        let reference = if args.no_reference {
            None
        } else {
            let r = run_reference(
                "gpu_step.py",
                &[
                    "--model".into(),
                    name.clone(),
                    "--batch".into(),
                    batch.to_string(),
                    "--repeats".into(),
                    args.repeats.to_string(),
                    "--warmup".into(),
                    args.warmup.to_string(),
                ]
                .into_iter()
                .chain(args.breakdown.then(|| "--breakdown".to_string()))
                .collect::<Vec<_>>(),
            );
            match r {
                Ok(v) => Some(v),
                Err(e) => {
                    eprintln!("gpu_step_bench: PyTorch reference for {name} unavailable: {e:#}");
                    None
                }
            }
        };
        let torch = reference.as_ref().and_then(|r| r["torch_ms"].as_f64());
        let row = json!({
            "model": name, "batch": batch, "ours_ms": ours, "torch_ms": torch,
            "ours_over_torch": torch.map(|t| ours / t),
            "torch_version": reference.as_ref().map(|r| r["torch_version"].clone()),
            "device": reference.as_ref().map(|r| r["device"].clone()),
            "torch_phases": reference.as_ref().map(|r| r["phases"].clone()),
            "exchange_ms": t.exchanged.iter().map(|(m, t)| (m.clone(), json!(t))).collect::<serde_json::Map<_, _>>(),
            "peak_used_mib": t.peak_used_mib, "peak_reserved_mib": t.peak_reserved_mib,
            "torch_peak_allocated_mib": reference.as_ref().map(|r| r["peak_allocated_mib"].clone()),
            "torch_peak_reserved_mib": reference.as_ref().map(|r| r["peak_reserved_mib"].clone()),
            "host_syncs_per_step": t.syncs_per_step,
        });
        eprintln!("{row}");
        rows.push(row);
    }
    if let Some(path) = &args.json {
        let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    for r in &rows {
        if let Some(ex) = r["exchange_ms"].as_object().filter(|e| !e.is_empty()) {
            let plain = r["ours_ms"].as_f64().unwrap_or(f64::NAN);
            for (m, t) in ex {
                let t = t.as_f64().unwrap_or(f64::NAN);
                println!(
                    "{:<10} step with the {m} exchange (NCCL, one rank) {t:.1} ms = {:.3}x the plain step",
                    r["model"].as_str().unwrap_or("?"),
                    t / plain
                );
            }
            if let (Some(d), Some(g)) = (
                ex.get("dense").and_then(|v| v.as_f64()),
                ex.get("dgc").and_then(|v| v.as_f64()),
            ) {
                println!(
                    "{:<10} DGC's step / dense exchange's step: {:.3}x (issue 36's target: at most 1.10x)",
                    r["model"].as_str().unwrap_or("?"),
                    g / d
                );
            }
        }
    }
    println!(
        "{:<10} {:>6} {:>10} {:>10} {:>12} {:>14} {:>14} {:>11}",
        "model",
        "batch",
        "ours ms",
        "torch ms",
        "ours/torch",
        "peak MiB ours",
        "peak MiB torch",
        "host waits"
    );
    for r in &rows {
        let f = |v: &serde_json::Value| v.as_f64().map(|x| format!("{x:.1}")).unwrap_or("-".into());
        let f0 =
            |v: &serde_json::Value| v.as_f64().map(|x| format!("{x:.0}")).unwrap_or("-".into());
        println!(
            "{:<10} {:>6} {:>10} {:>10} {:>12} {:>14} {:>14} {:>11}",
            r["model"].as_str().unwrap_or("?"),
            r["batch"],
            f(&r["ours_ms"]),
            f(&r["torch_ms"]),
            r["ours_over_torch"]
                .as_f64()
                .map(|x| format!("{x:.2}x"))
                .unwrap_or("-".into()),
            f0(&r["peak_used_mib"]),
            f0(&r["torch_peak_allocated_mib"]),
            r["host_syncs_per_step"]
        );
    }
    println!(
        "peak MiB: memory held by live buffers at the high-water mark of the timed steps (ours: \
         the CUDA pool's used peak; PyTorch: max_memory_allocated); host waits: times one of \
         our steps waited for the GPU before its closing synchronisation"
    );
    Ok(())
}
