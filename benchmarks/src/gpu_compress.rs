//! `compress_bench --device cuda`: DGC's compression and the selections it is built from,
//! on one gradient on CUDA device 0, against a device-to-device copy of the same tensor
//! (ours) and PyTorch's `torch.topk`, copy and sum on the same GPU, measured in the same
//! run by `reference/gpu_select.py`.
//!
//! Then every method of `--methods` (the default: all) through its whole exchange on
//! tensors (`Method::exchange_tensor`, and `after_step_tensor` for the methods that
//! synchronise after the step) on a one-rank job whose TCP group holds GPU tensors: the
//! method's device work, its host reads and writes, and the one-rank collective's round
//! trip of the message through the host.
//!
//! Every row is the median of `repeats` runs timed with CUDA events on the compute stream
//! after `warmup` untimed ones (the whole exchanges: at most 5). Rows whose code reads a count back to the host (the
//! selections, to size their output and to apply DGC's 0.8–1.3·k rule) include that
//! wait: it is part of their cost.

use crate::run_reference;
use anyhow::{ensure, Context as _, Result};
use comm::{CommConfig, Communicator};
use compress::methods::dgc::{DgcConfig, DgcOnDevice};
use compress::{ParamSpec, StepInfo, TensorAfterStep, TensorExchange};
use serde_json::{json, Value};
use tensor::sparsify::{self, Accumulate, AccumulateRule};
use tensor::{cuda, DType, Device, Rng, Tensor};

fn time_ms(
    dev: Device,
    warmup: usize,
    repeats: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    if dev == Device::Cpu {
        // The rows' own tests run on CPU tensors: wall-clock there.
        let mut t = Vec::with_capacity(repeats);
        for _ in 0..repeats.max(1) {
            let start = std::time::Instant::now();
            f()?;
            t.push(start.elapsed().as_secs_f64() * 1e3);
        }
        return Ok(crate::median(t));
    }
    cuda::synchronize(dev)?;
    let mut t = Vec::with_capacity(repeats);
    for _ in 0..repeats.max(1) {
        let a = cuda::record_timed_event(dev)?;
        f()?;
        let b = cuda::record_timed_event(dev)?;
        b.synchronize()?;
        t.push(a.elapsed_ms(&b)? as f64);
    }
    Ok(crate::median(t))
}

/// DGC as the paper runs it: momentum correction with weight decay, masking, the sampled
/// threshold (1 % sample), no warm-up.
fn dgc_config(density: f64, sampling: bool) -> DgcConfig {
    DgcConfig {
        density,
        momentum: 0.9,
        weight_decay: 1e-4,
        momentum_correction: true,
        masking: true,
        sampling,
        sample_fraction: 0.01,
        ..DgcConfig::all_off(density)
    }
}

/// Each method's whole exchange on tensors of `g` (weights `w`) on one rank, timed: rows
/// of (label, ms, values sent).
fn method_rows(
    methods: &[String],
    g: &Tensor,
    w: &Tensor,
    repeats: usize,
) -> Result<Vec<(String, f64, Option<usize>)>> {
    let dev = g.device();
    let n = g.elem_count();
    let mut comm = Communicator::connect(&CommConfig {
        max_frame: 1 << 34,
        ..CommConfig::loopback(0, 1, 0, b"bench")
    })?;
    comm.set_device(dev);
    let mut rows = Vec::new();
    for label in methods {
        let mut m = crate::one_rank_method(label).with_context(|| format!("--methods {label}"))?;
        m.init(&[ParamSpec::new("grad", &[n])])?;
        m.place(dev)?;
        // Its own weights: SBC and FedAvg overwrite them after the step.
        let weights = w.scale(1.0)?;
        let (mut step, mut sent) = (0u64, 0);
        let t = time_ms(dev, 1, repeats.min(5), || {
            m.begin_step(StepInfo { step, epoch: 100.0 });
            step += 1;
            let u =
                m.exchange_tensor(TensorExchange::new(&mut comm, 0, g).with_weights(&weights))?;
            sent = u.stats.sent_values;
            // A step of learning rate 1, so that a delayed method has an update to send.
            weights.assign(&weights.sub(&u.values.flatten_all()?)?)?;
            if let Some(s) = m.after_step_tensor(TensorAfterStep::new(&mut comm, 0, &weights))? {
                sent = s.sent_values;
            }
            Ok(())
        })
        .with_context(|| format!("{label} on tensors"))?;
        rows.push((format!("{label}: whole exchange, 1 rank"), t, Some(sent)));
    }
    Ok(rows)
}

/// Runs the GPU rows on `grad` (host values, uploaded once) and prints a table (or JSON).
pub fn run(
    grad: &[f32],
    density: f64,
    repeats: usize,
    methods: &[String],
    as_json: bool,
) -> Result<()> {
    let dev = Device::Cuda(0);
    ensure!(
        cuda::is_available(0),
        "--device cuda: no usable CUDA device 0 (driver, cuBLAS and NVRTC must load; see crates/tensor/CUDA.md)"
    );
    let n = grad.len();
    let k = ((n as f64) * density).ceil() as usize;
    let g = Tensor::from_vec(grad.to_vec(), n, dev)?;
    let w = Tensor::randn(n, 0.0, 0.05, DType::F32, dev, &mut Rng::new(3))?;
    let dst = Tensor::zeros(n, DType::F32, dev)?;
    let warmup = 3;
    let mut rows: Vec<(String, f64, Option<usize>)> = Vec::new();

    let copy = time_ms(dev, warmup, repeats, || {
        cuda::raw::with_f32_view_mut(&dst, |d, stream| {
            cuda::raw::with_f32_view(&g, |s, _| stream.memcpy_dtod(s, d))
        })??
        .context("device copy")
    })?;
    rows.push(("device copy (ours, cuMemcpy)".into(), copy, None));

    let (u, v) = (
        Tensor::zeros(n, DType::F32, dev)?,
        Tensor::zeros(n, DType::F32, dev)?,
    );
    let acc = Accumulate {
        rule: AccumulateRule::Momentum,
        scale: 1.0,
        momentum: 0.9,
        weight_decay: 1e-4,
    };
    let t = time_ms(dev, warmup, repeats, || {
        Ok(sparsify::accumulate(Some(&u), &v, &g, Some(&w), acc)?)
    })?;
    rows.push(("DGC accumulation alone (u, v; reads g, w)".into(), t, None));

    let mut kept = 0;
    let t = time_ms(dev, warmup, repeats, || {
        kept = sparsify::topk_magnitude(&g, k)?.len();
        Ok(())
    })?;
    rows.push((format!("exact top-k of |g| (k = {k})"), t, Some(kept)));

    let mut rng = Rng::new(7);
    let t = time_ms(dev, warmup, repeats, || {
        kept = compress::select::sampled_threshold_tensor(&g, k, 0.01, &mut rng)?.len();
        Ok(())
    })?;
    rows.push((
        "sampled threshold of |g| (1 % strided sample)".into(),
        t,
        Some(kept),
    ));

    for sampling in [true, false] {
        let mut dgc = DgcOnDevice::new(dgc_config(density, sampling), 1, Rng::new(1))?;
        dgc.init(&[ParamSpec::new("w", &[n])], dev)?;
        dgc.begin_step(StepInfo::default());
        let t = time_ms(dev, warmup, repeats, || {
            kept = dgc.compress(0, Some(&w), &g)?.len();
            Ok(())
        })?;
        let what = if sampling { "sampled" } else { "exact" };
        rows.push((
            format!("DGC compression, {what} (accumulate, select, clear)"),
            t,
            Some(kept),
        ));
        let t = time_ms(dev, warmup, repeats, || {
            let sel = dgc.compress(0, Some(&w), &g)?;
            kept = sel.to_vecs()?.0.len();
            Ok(())
        })?;
        rows.push((
            "  the same, pairs copied to the host".to_string(),
            t,
            Some(kept),
        ));
    }

    rows.extend(method_rows(methods, &g, &w, repeats)?);

    let reference = run_reference("gpu_select.py", &[format!("--n={n}"), format!("--k={k}")]);
    let torch: Option<Value> = match reference {
        Ok(v) => Some(v),
        Err(e) => {
            eprintln!("PyTorch reference not run: {e:#}");
            None
        }
    };
    let torch_ms = |key: &str| torch.as_ref().and_then(|t| t[key].as_f64());
    let (topk, tcopy) = (torch_ms("topk_ms"), torch_ms("copy_ms"));
    if as_json {
        let out: Vec<Value> = rows
            .iter()
            .map(|(name, ms, kept)| json!({"row": name, "ms": ms, "kept": kept, "ours_copy_ms": copy}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"device": cuda::device(0)?.name(), "n": n, "k": k, "rows": out, "torch": torch})
            )?
        );
        return Ok(());
    }
    println!(
        "{n} values on {}, k = {k}, median of {repeats} (CUDA events)",
        cuda::device(0)?.name()
    );
    if let Some(t) = &torch {
        println!(
            "PyTorch {}: torch.topk(|g|, k) {:.3} ms, copy {:.3} ms ({:.0} GB/s), torch.sum {:.3} ms",
            t["torch_version"].as_str().unwrap_or("?"),
            topk.unwrap_or(f64::NAN),
            tcopy.unwrap_or(f64::NAN),
            t["copy_gbps"].as_f64().unwrap_or(f64::NAN),
            t["sum_ms"].as_f64().unwrap_or(f64::NAN)
        );
    }
    println!(
        "{:<56} {:>9} {:>11} {:>10} {:>12} {:>7}",
        "row", "ms", "x our copy", "x torch cp", "topk/ours", "kept"
    );
    let fmt = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.2}"));
    for (name, ms, kept) in &rows {
        println!(
            "{name:<56} {ms:>9.4} {:>11.2} {:>10} {:>12} {:>7}",
            ms / copy,
            fmt(tcopy.map(|c| ms / c)),
            fmt(topk.map(|t| t / ms)),
            kept.map_or("-".to_string(), |k| k.to_string()),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-method rows on CPU tensors: one row per method, the half-precision dense
    /// too, each having sent what the method sends.
    #[test]
    fn every_method_on_tensors_gets_a_row() {
        let n = 20_000;
        let mut r = Rng::new(1);
        let g = Tensor::randn(n, 0.0, 1.0, DType::F32, Device::Cpu, &mut r).unwrap();
        let w = Tensor::randn(n, 0.0, 0.05, DType::F32, Device::Cpu, &mut r).unwrap();
        let methods: Vec<String> = [
            "dense",
            "dense:wire=f16",
            "dgc:density=0.01,warmup_epochs=0",
            "sbc:delay=1,density=0.01",
            "qsgd:preset=4bit",
            "terngrad",
            "onebit",
        ]
        .map(String::from)
        .to_vec();
        let rows = method_rows(&methods, &g, &w, 2).unwrap();
        let labels: Vec<&str> = rows
            .iter()
            .map(|r| r.0.split(':').next().unwrap())
            .collect();
        assert_eq!(
            labels,
            ["dense", "dense", "dgc", "sbc", "qsgd", "terngrad", "onebit"]
        );
        let sent: Vec<usize> = rows.iter().map(|r| r.2.unwrap()).collect();
        assert_eq!(&sent[..2], &[n, n]);
        // DGC's sampled threshold keeps between 0.8·k and 1.3·k.
        assert!((160..=260).contains(&sent[2]), "{}", sent[2]);
        assert_eq!(sent[3], 200);
        assert!(rows.iter().all(|r| r.1 >= 0.0));
    }
}
