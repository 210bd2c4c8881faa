//! Selection by magnitude and DGC's accumulation on tensors, on the device where the
//! gradient lives: the primitives gradient compression is built from (crates/compress
//! composes them into methods), each with its CPU implementation beside the CUDA one
//! (kernels/sparsify.cu), which it must match bit for bit.
//!
//! Every function takes contiguous f32 tensors and works on their elements as one flat
//! vector; none is recorded by autograd (they run on gradients and optimizer state).
//! Magnitudes are ordered as `f32::total_cmp` orders them (NaN above +inf); ties go to the
//! lower index.
//!
//! These live in the tensor crate, beside the fused SGD step, because they need its
//! kernel compiler and buffers; they know nothing of wire formats or collectives.

use crate::cpu::CpuStorage;
use crate::cuda::{self, raw};
use crate::storage::Storage;
use crate::{DType, Device, Error, Result, Tensor};

/// Entries chosen from a flat tensor: their indices (U32, ascending) and values (F32, as
/// they were, signs kept), both of shape `[len]` on the input's device, and the element
/// count of the tensor they were chosen from.
#[derive(Clone, Debug)]
pub struct Selected {
    pub indices: Tensor,
    pub values: Tensor,
    /// Elements of the tensor the indices point into ([`zero_selected`] checks it).
    pub source_len: usize,
}

impl Selected {
    pub fn len(&self) -> usize {
        self.indices.elem_count()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Both on the host, for encoding.
    pub fn to_vecs(&self) -> Result<(Vec<u32>, Vec<f32>)> {
        Ok((self.indices.to_vec::<u32>()?, self.values.to_vec::<f32>()?))
    }
    fn from_cpu(indices: Vec<u32>, values: Vec<f32>, source_len: usize) -> Result<Selected> {
        let n = indices.len();
        Ok(Selected {
            indices: Tensor::from_vec(indices, n, Device::Cpu)?,
            values: Tensor::from_vec(values, n, Device::Cpu)?,
            source_len,
        })
    }
}

/// Indices of the `k` largest |values| (ties to the lower index), ascending, less those
/// whose value is zero: where fewer than `k` entries are nonzero (an all-zero gradient, a
/// residual just sent) zeros would travel and count as sent without carrying anything.
/// The CPU reference of [`topk_magnitude`]; selection (O(n) expected), never a full sort.
pub fn exact_topk(values: &[f32], k: usize) -> Vec<u32> {
    let k = k.min(values.len());
    if k == 0 {
        return Vec::new();
    }
    let mut idx: Vec<u32> = (0..values.len() as u32).collect();
    if k < values.len() {
        idx.select_nth_unstable_by(k - 1, |&a, &b| {
            values[b as usize]
                .abs()
                .total_cmp(&values[a as usize].abs())
                .then(a.cmp(&b))
        });
        idx.truncate(k);
    }
    // Zeros rank last, so they are among the chosen only where fewer than k are nonzero.
    idx.retain(|&i| values[i as usize] != 0.0);
    idx.sort_unstable();
    idx
}

/// The magnitude bits at or above which an entry passes `threshold` (a magnitude, ≥ 0):
/// as the CPU's `a >= threshold || a.is_nan()`, with a NaN threshold passing only NaN.
fn threshold_bits(threshold: f32) -> u32 {
    if threshold.is_nan() {
        0x7f80_0001
    } else if threshold <= 0.0 {
        // Every magnitude is ≥ a threshold ≤ 0; `passes` and the kernels leave zeros out.
        0
    } else {
        threshold.to_bits()
    }
}

fn passes(x: f32, tbits: u32) -> bool {
    let m = x.to_bits() & 0x7fff_ffff;
    m >= tbits && m != 0
}

pub(crate) fn check_f32(op: &'static str, t: &Tensor) -> Result<()> {
    raw::f32_range(op, t).map(|_| ())
}

/// Runs `f` on the elements of a contiguous f32 CPU tensor.
pub(crate) fn with_cpu<R>(op: &'static str, t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    let range = raw::f32_range(op, t)?;
    let s = t.storage();
    match &*s {
        Storage::Cpu(CpuStorage::F32(v)) => Ok(f(&v[range])),
        _ => Err(Error::msg(format!(
            "{op}: expected an f32 tensor on the CPU"
        ))),
    }
}

fn with_cpu_mut<R>(op: &'static str, t: &Tensor, f: impl FnOnce(&mut [f32]) -> R) -> Result<R> {
    let range = raw::f32_range(op, t)?;
    let mut s = t.storage_mut();
    match &mut *s {
        Storage::Cpu(CpuStorage::F32(v)) => Ok(f(&mut v[range])),
        _ => Err(Error::msg(format!(
            "{op}: expected an f32 tensor on the CPU"
        ))),
    }
}

pub(crate) fn cuda_device(d: Device) -> Result<std::sync::Arc<cuda::CudaDevice>> {
    match d {
        Device::Cuda(i) => cuda::device(i),
        Device::Cpu => Err(Error::msg("expected a CUDA tensor")),
    }
}

fn cuda_selected(
    d: &std::sync::Arc<cuda::CudaDevice>,
    (idx, val): (
        cudarc::driver::CudaSlice<u32>,
        cudarc::driver::CudaSlice<f32>,
    ),
    len: usize,
    source_len: usize,
) -> Selected {
    Selected {
        indices: Tensor::from_storage(
            Storage::Cuda(cuda::CudaStorage::new(idx, len, d)),
            len,
            None,
        ),
        values: Tensor::from_storage(
            Storage::Cuda(cuda::CudaStorage::new(val, len, d)),
            len,
            None,
        ),
        source_len,
    }
}

/// The `k` entries of largest magnitude (fewer where fewer are nonzero: zeros are never
/// chosen), indices ascending: [`exact_topk`] on the tensor's device.
pub fn topk_magnitude(x: &Tensor, k: usize) -> Result<Selected> {
    const OP: &str = "sparsify::topk_magnitude";
    check_f32(OP, x)?;
    let n = x.elem_count();
    check_u32_len(OP, n)?;
    let k = k.min(n);
    if x.device() == Device::Cpu {
        return with_cpu(OP, x, |v| {
            let idx = exact_topk(v, k);
            let vals = idx.iter().map(|&i| v[i as usize]).collect();
            Selected::from_cpu(idx, vals, n)
        })?;
    }
    let d = cuda_device(x.device())?;
    raw::with_f32_view(x, |v, _| -> Result<Selected> {
        if k == 0 {
            let p = cuda::sparsify::plan(&d, v, 0, u32::MAX, 0)?;
            return Ok(cuda_selected(
                &d,
                cuda::sparsify::write(&d, v, 0, &p)?,
                0,
                n,
            ));
        }
        let (tbits, take_eq) = cuda::sparsify::kth_largest_bits(&d, v, n, k)?;
        let p = cuda::sparsify::plan(&d, v, n, tbits, take_eq)?;
        let len = p.total;
        Ok(cuda_selected(
            &d,
            cuda::sparsify::write(&d, v, n, &p)?,
            len,
            n,
        ))
    })?
}

pub(crate) fn check_u32_len(op: &'static str, n: usize) -> Result<()> {
    if n > u32::MAX as usize {
        return Err(Error::msg(format!(
            "{op}: {n} elements; indices are u32, at most 2^32 − 1"
        )));
    }
    Ok(())
}

/// The `kth` largest magnitude (1 ≤ kth ≤ elements), as a non-negative float.
pub fn kth_largest_magnitude(x: &Tensor, kth: usize) -> Result<f32> {
    const OP: &str = "sparsify::kth_largest_magnitude";
    check_f32(OP, x)?;
    let n = x.elem_count();
    check_u32_len(OP, n)?;
    if kth == 0 || kth > n {
        return Err(Error::msg(format!("{OP}: kth = {kth} is not in 1..={n}")));
    }
    if x.device() == Device::Cpu {
        return with_cpu(OP, x, |v| {
            let mut m: Vec<u32> = v.iter().map(|a| a.to_bits() & 0x7fff_ffff).collect();
            let (_, t, _) = m.select_nth_unstable(n - kth);
            f32::from_bits(*t)
        });
    }
    let d = cuda_device(x.device())?;
    let (tbits, _) =
        raw::with_f32_view(x, |v, _| cuda::sparsify::kth_largest_bits(&d, v, n, kth))??;
    Ok(f32::from_bits(tbits))
}

/// The entries of a tensor that pass a threshold, counted and ready to be written by
/// [`take_counted`] (on the GPU the count is the tiles' counts and offsets, so writing
/// needs one more pass instead of two). Only for the tensor it was counted on, unchanged.
pub struct Counted {
    tensor: crate::TensorId,
    len: usize,
    inner: CountedOn,
}

enum CountedOn {
    Cpu(Vec<u32>),
    Cuda(cuda::sparsify::Plan),
}

impl Counted {
    /// How many entries passed.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Counts the entries that pass `threshold` (a magnitude): |x| ≥ threshold or NaN, and
/// not zero.
pub fn count_passing(x: &Tensor, threshold: f32) -> Result<Counted> {
    const OP: &str = "sparsify::count_passing";
    check_f32(OP, x)?;
    let tbits = threshold_bits(threshold);
    check_u32_len(OP, x.elem_count())?;
    if x.device() == Device::Cpu {
        let idx = with_cpu(OP, x, |v| {
            (0..v.len() as u32)
                .filter(|&i| passes(v[i as usize], tbits))
                .collect::<Vec<u32>>()
        })?;
        return Ok(Counted {
            tensor: x.id(),
            len: idx.len(),
            inner: CountedOn::Cpu(idx),
        });
    }
    let d = cuda_device(x.device())?;
    let n = x.elem_count();
    // m ≥ t is m > t − 1; with t = 0 that is m > 0, which also keeps zeros out.
    let plan = raw::with_f32_view(x, |v, _| {
        cuda::sparsify::plan(&d, v, n, tbits.saturating_sub(1), 0)
    })??;
    Ok(Counted {
        tensor: x.id(),
        len: plan.total,
        inner: CountedOn::Cuda(plan),
    })
}

/// The entries `counted` counted in `x` (the same tensor), indices ascending.
pub fn take_counted(x: &Tensor, counted: Counted) -> Result<Selected> {
    const OP: &str = "sparsify::take_counted";
    if counted.tensor != x.id() {
        return Err(Error::msg(format!(
            "{OP}: the count was taken on another tensor"
        )));
    }
    match counted.inner {
        CountedOn::Cpu(idx) => {
            let vals = with_cpu(OP, x, |v| idx.iter().map(|&i| v[i as usize]).collect())?;
            Selected::from_cpu(idx, vals, x.elem_count())
        }
        CountedOn::Cuda(plan) => {
            let d = cuda_device(x.device())?;
            let n = x.elem_count();
            let len = plan.total;
            let out = raw::with_f32_view(x, |v, _| cuda::sparsify::write(&d, v, n, &plan))??;
            Ok(cuda_selected(&d, out, len, n))
        }
    }
}

/// How many entries pass `threshold` ([`count_passing`]'s count).
pub fn count_at_least(x: &Tensor, threshold: f32) -> Result<usize> {
    count_passing(x, threshold).map(|c| c.len())
}

/// The entries that pass `threshold` (as [`count_passing`] counts them), indices ascending.
pub fn at_least(x: &Tensor, threshold: f32) -> Result<Selected> {
    take_counted(x, count_passing(x, threshold)?)
}

/// `x[start + j·stride]` for `j < count`, as a new `[count]` tensor on `x`'s device.
pub fn strided_sample(x: &Tensor, start: usize, stride: usize, count: usize) -> Result<Tensor> {
    const OP: &str = "sparsify::strided_sample";
    check_f32(OP, x)?;
    let n = x.elem_count();
    // The last sample's position, None where it overflows.
    let last = count
        .saturating_sub(1)
        .checked_mul(stride)
        .and_then(|o| o.checked_add(start));
    if count > 0 && (stride == 0 || last.is_none_or(|l| l >= n)) {
        return Err(Error::msg(format!(
            "{OP}: {count} samples from {start} every {stride} run past {n} elements"
        )));
    }
    if x.device() == Device::Cpu {
        let s = with_cpu(OP, x, |v| {
            (0..count).map(|j| v[start + j * stride]).collect()
        })?;
        return Tensor::from_vec::<f32>(s, count, Device::Cpu);
    }
    let d = cuda_device(x.device())?;
    let out = raw::with_f32_view(x, |v, _| {
        cuda::sparsify::gather_strided(&d, v, start, stride, count)
    })??;
    Ok(Tensor::from_storage(
        Storage::Cuda(cuda::CudaStorage::new(out, count, &d)),
        count,
        None,
    ))
}

/// Sets `x[i] = 0` for every i in `indices` (U32, each below x's element count), in
/// place; an index out of range is an error that leaves `x` as it was (on the GPU a
/// kernel counts them first, so this waits for the device).
pub fn zero_at(x: &Tensor, indices: &Tensor) -> Result<()> {
    zero_indices("sparsify::zero_at", x, indices, true)
}

/// Sets `x[i] = 0` for every entry of `sel`, chosen from a tensor of x's element count
/// (checked), without waiting for the device: the clearing step of a compressor.
pub fn zero_selected(x: &Tensor, sel: &Selected) -> Result<()> {
    const OP: &str = "sparsify::zero_selected";
    if sel.source_len != x.elem_count() {
        return Err(Error::msg(format!(
            "{OP}: the entries were chosen from {} elements, this tensor has {}",
            sel.source_len,
            x.elem_count()
        )));
    }
    zero_indices(OP, x, &sel.indices, false)
}

fn zero_indices(op: &'static str, x: &Tensor, indices: &Tensor, check: bool) -> Result<()> {
    check_f32(op, x)?;
    if indices.dtype() != DType::U32 || x.device() != indices.device() {
        return Err(Error::msg(format!(
            "{op}: indices must be U32 on the tensor's device ({:?}), got {:?} on {:?}",
            x.device(),
            indices.dtype(),
            indices.device()
        )));
    }
    let k = indices.elem_count();
    let n = x.elem_count();
    let bad = |count: usize| {
        Error::msg(format!(
            "{op}: {count} of {k} indices out of range for {n} elements"
        ))
    };
    if x.device() == Device::Cpu {
        let idx = indices.to_vec::<u32>()?;
        let out = idx.iter().filter(|&&i| i as usize >= n).count();
        if out > 0 {
            return Err(bad(out));
        }
        return with_cpu_mut(op, x, |v| idx.iter().for_each(|&i| v[i as usize] = 0.0));
    }
    let d = cuda_device(x.device())?;
    let idx = indices.contiguous()?;
    let skipped = raw::with_u32_view(&idx, |iv| {
        raw::with_f32_view_mut(x, |v, _| cuda::sparsify::zero_at(&d, v, n, iv, k, check))
    })???;
    if skipped > 0 {
        return Err(bad(skipped as usize));
    }
    Ok(())
}

/// Σ x² in f64, added in the same order on both devices, so the result is the same bit
/// for bit: DGC's clipping factor depends on it, and the GPU must choose what the CPU
/// chooses. The order is the GPU's (kernels/sparsify.cu `sum_sq_partial`): 1024 blocks of
/// 256 threads each add every 262,144th square from their own start, each block adds its
/// 256 sums in a halving tree, and one block of 256 adds the 1024 block sums, four each
/// in order, then the same tree. (Squares of f32 are exact in f64; only the additions'
/// order could differ.)
pub fn sum_of_squares(x: &Tensor) -> Result<f64> {
    const OP: &str = "sparsify::sum_of_squares";
    check_f32(OP, x)?;
    if x.device() == Device::Cpu {
        return with_cpu(OP, x, sum_of_squares_slice);
    }
    let d = cuda_device(x.device())?;
    let n = x.elem_count();
    raw::with_f32_view(x, |v, _| cuda::sparsify::sum_of_squares(&d, v, n))?
}

/// The kernel's grid for Σ x² (`sum_of_squares`): blocks × threads.
const SQ_BLOCKS: usize = 1024;
const SQ_THREADS: usize = 256;

/// [`sum_of_squares`] of a slice, in the GPU's order. Only the threads that get values
/// are simulated (at most one block's worth past `v.len()`): the others hold 0.0, and
/// adding 0.0 to a non-negative sum leaves it as it was, so leaving them out changes no
/// bit; a small tensor, which DGC clips every step, costs no 2 MiB of lanes.
pub fn sum_of_squares_slice(v: &[f32]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let lanes = v.len().min(SQ_BLOCKS * SQ_THREADS).div_ceil(SQ_THREADS) * SQ_THREADS;
    let mut acc = vec![0f64; lanes];
    for chunk in v.chunks(acc.len()) {
        for (a, &x) in acc.iter_mut().zip(chunk) {
            let x = x as f64;
            *a += x * x;
        }
    }
    let tree = |s: &mut [f64]| {
        let mut o = SQ_THREADS / 2;
        while o > 0 {
            for t in 0..o {
                s[t] += s[t + o];
            }
            o /= 2;
        }
        s[0]
    };
    let partial: Vec<f64> = acc.chunks_mut(SQ_THREADS).map(tree).collect();
    let mut last: Vec<f64> = (0..SQ_THREADS)
        .map(|t| {
            (t..partial.len())
                .step_by(SQ_THREADS)
                .fold(0.0, |a, b| a + partial[b])
        })
        .collect();
    tree(&mut last)
}

/// DGC's accumulation rule (paper 000): without momentum correction the gradient is added
/// to the accumulator; with it, to the velocity first (Eq. 7), or Nesterov's (Alg. 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccumulateRule {
    /// `v += s·g`.
    Plain,
    /// `u = m·u + (s·g + wd·w); v += u`.
    Momentum,
    /// `gi = s·g + wd·w; u = m·(u + gi); v += u + gi`.
    Nesterov,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Accumulate {
    pub rule: AccumulateRule,
    /// The clipping factor `s` on the gradient (1: none).
    pub scale: f32,
    pub momentum: f32,
    pub weight_decay: f32,
}

fn accumulate_cpu(
    u: Option<&Tensor>,
    v: &Tensor,
    g: &[f32],
    w: Option<&[f32]>,
    a: Accumulate,
) -> Result<()> {
    const OP: &str = "sparsify::accumulate";
    match u {
        Some(u) => with_cpu_mut(OP, u, |u| {
            with_cpu_mut(OP, v, |v| accumulate_slices(Some(u), v, g, w, a))
        })?,
        None => with_cpu_mut(OP, v, |v| accumulate_slices(None, v, g, w, a)),
    }
}

/// [`accumulate`] on slices: the CPU reference the kernel matches bit for bit. Zipped
/// iterators rather than indexing: no bounds checks, so the loops vectorize (measured with
/// compress_bench on 25 M values: DGC compression went from 42 to 193 M values/s). `u` is
/// used by the momentum rules only; lengths must agree (the shortest wins).
pub fn accumulate_slices(
    u: Option<&mut [f32]>,
    v: &mut [f32],
    g: &[f32],
    w: Option<&[f32]>,
    a: Accumulate,
) {
    let (s, mo, wd) = (a.scale, a.momentum, a.weight_decay);
    let u = match (a.rule, u) {
        (AccumulateRule::Plain, _) | (_, None) => {
            v.iter_mut().zip(g).for_each(|(v, &g)| *v += s * g);
            return;
        }
        (_, Some(u)) => u,
    };
    let nesterov = a.rule == AccumulateRule::Nesterov;
    // Without weights a constant zero stands in for them, as `s·g + wd·0` (not `s·g`):
    // the same operations as with weights, so -0.0 and +0.0 come out the same way.
    match w {
        Some(w) => momentum_pass(u, v, g, w.iter().copied(), s, mo, wd, nesterov),
        None => momentum_pass(u, v, g, std::iter::repeat(0.0), s, mo, wd, nesterov),
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn momentum_pass(
    u: &mut [f32],
    v: &mut [f32],
    g: &[f32],
    w: impl Iterator<Item = f32>,
    s: f32,
    mo: f32,
    wd: f32,
    nesterov: bool,
) {
    let uv = u.iter_mut().zip(v.iter_mut());
    let gw = g.iter().zip(w);
    if nesterov {
        for ((u, v), (&g, w)) in uv.zip(gw) {
            let gi = s * g + wd * w;
            *u = mo * (*u + gi);
            *v += *u + gi;
        }
    } else {
        for ((u, v), (&g, w)) in uv.zip(gw) {
            *u = mo * *u + (s * g + wd * w);
            *v += *u;
        }
    }
}

/// One pass of DGC's accumulation in place over `u` (velocity, for the momentum rules),
/// `v` (accumulator), reading `grad` and `weights` (absent: read as zeros). All of the
/// same element count, contiguous f32, on one device, `u` and `v` each their own storage.
pub fn accumulate(
    u: Option<&Tensor>,
    v: &Tensor,
    grad: &Tensor,
    weights: Option<&Tensor>,
    a: Accumulate,
) -> Result<()> {
    const OP: &str = "sparsify::accumulate";
    let n = v.elem_count();
    let needs_u = a.rule != AccumulateRule::Plain;
    if needs_u != u.is_some() {
        return Err(Error::msg(format!(
            "{OP}: the {:?} rule {} a velocity tensor",
            a.rule,
            if needs_u { "needs" } else { "takes no" }
        )));
    }
    let all: Vec<&Tensor> = [Some(v), Some(grad), u, weights]
        .into_iter()
        .flatten()
        .collect();
    for t in &all {
        check_f32(OP, t)?;
        if t.elem_count() != n || t.device() != v.device() {
            return Err(Error::msg(format!(
                "{OP}: every tensor must have {n} elements on {:?}; got {} on {:?}",
                v.device(),
                t.elem_count(),
                t.device()
            )));
        }
    }
    if let Some(u) = u {
        if u.shares_storage(v)
            || u.shares_storage(grad)
            || weights.is_some_and(|w| u.shares_storage(w))
        {
            return Err(Error::msg(format!(
                "{OP}: the velocity shares storage with another input"
            )));
        }
    }
    if v.shares_storage(grad) || weights.is_some_and(|w| v.shares_storage(w)) {
        return Err(Error::msg(format!(
            "{OP}: the accumulator shares storage with an input"
        )));
    }
    if v.device() == Device::Cpu {
        return with_cpu(OP, grad, |g| match weights {
            Some(w) => with_cpu(OP, w, |w| accumulate_cpu(u, v, g, Some(w), a))?,
            None => accumulate_cpu(u, v, g, None, a),
        })?;
    }
    let (s, mo, wd) = (a.scale, a.momentum, a.weight_decay);
    let d = cuda_device(v.device())?;
    let rule = match a.rule {
        AccumulateRule::Plain => 0,
        AccumulateRule::Momentum => 1,
        AccumulateRule::Nesterov => 2,
    };
    let run = |uv: Option<&mut cudarc::driver::CudaViewMut<'_, f32>>| -> Result<()> {
        raw::with_f32_view_mut(v, |vv, _| {
            raw::with_f32_view(grad, |gv, _| match weights {
                Some(w) => raw::with_f32_view(w, |wv, _| {
                    cuda::sparsify::dgc_accumulate(&d, uv, vv, gv, Some(wv), n, (s, mo, wd), rule)
                })?,
                None => cuda::sparsify::dgc_accumulate(&d, uv, vv, gv, None, n, (s, mo, wd), rule),
            })?
        })?
    };
    match u {
        Some(u) => raw::with_f32_view_mut(u, |uv, _| run(Some(uv)))?,
        None => run(None),
    }
}
