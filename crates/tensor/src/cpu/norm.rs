//! Batch normalisation over dimension 1 of contiguous `[N, C, spatial]` data, fused so
//! that each pass is one sweep per channel: the training forward reads the input three
//! times (mean, variance, normalise), evaluation and backward twice. Statistics accumulate in
//! f64 whatever the element type, so large batches do not lose precision.

use super::{typed, unsupported, CpuStorage};
use crate::storage::{BackendStorage, BatchNormParams};
use crate::{DType, Float, Result};
use rayon::prelude::*;

/// Partial sums per reduction. One f64 accumulator makes every add wait for the previous
/// one (a serial chain the compiler may not reorder); eight independent ones pipeline and
/// vectorise. They are combined in a fixed order, so results do not depend on threads.
const LANES: usize = 8;
// `lane_sums` folds the lanes with eight literal indices (a fixed order, as above).
const _: () = assert!(LANES == 8);

/// `Σ f(a[i], b[i])` of two pairs of f64 sums over equal-length slices, in LANES partial
/// sums per output.
#[inline]
fn lane_sums<T: Float>(a: &[T], b: &[T], f: impl Fn(T, T) -> (f64, f64)) -> (f64, f64) {
    debug_assert_eq!(a.len(), b.len());
    let (mut s0, mut s1) = ([0.0f64; LANES], [0.0f64; LANES]);
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (xa, xb) in ca.zip(cb) {
        for i in 0..LANES {
            let (u, v) = f(xa[i], xb[i]);
            s0[i] += u;
            s1[i] += v;
        }
    }
    for (i, (&u, &v)) in ra.iter().zip(rb).enumerate() {
        let (u, v) = f(u, v);
        s0[i] += u;
        s1[i] += v;
    }
    let fold = |s: [f64; LANES]| ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    (fold(s0), fold(s1))
}

/// Sum over (n, s) of `f(x[n, c, s])` for one channel.
fn channel_sum<T: Float>(x: &[T], p: &BatchNormParams, c: usize, f: impl Fn(T) -> f64) -> f64 {
    let mut s = 0.0;
    for n in 0..p.n {
        let base = (n * p.c + c) * p.spatial;
        let row = &x[base..base + p.spatial];
        s += lane_sums(row, row, |v, _| (f(v), 0.0)).0;
    }
    s
}

/// Returns `(out, mean, invstd)`. With `stats` (running mean, running var), evaluation mode.
pub(crate) fn batch_norm<T: Float>(
    x: &[T],
    w: &[T],
    b: &[T],
    stats: Option<(&[T], &[T])>,
    p: &BatchNormParams,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let count = (p.n * p.spatial) as f64;
    let per_channel: Vec<(f64, f64)> = (0..p.c)
        .into_par_iter()
        .map(|c| match stats {
            Some((rm, rv)) => (rm[c].to_f64(), 1.0 / (rv[c].to_f64() + p.eps).sqrt()),
            None => {
                let mean = channel_sum(x, p, c, |v| v.to_f64()) / count;
                let var = channel_sum(x, p, c, |v| (v.to_f64() - mean).powi(2)) / count;
                (mean, 1.0 / (var + p.eps).sqrt())
            }
        })
        .collect();
    let mut out = vec![T::zero(); x.len()];
    // Rows of `spatial` values; an empty input (evaluation of `[N, C, 0]`) has none, and
    // chunks of length 0 would panic.
    out.par_chunks_mut(p.spatial.max(1))
        .enumerate()
        .for_each(|(row, y)| {
            let c = row % p.c;
            let (mean, invstd) = per_channel[c];
            let scale = T::from_f64(invstd * w[c].to_f64());
            let shift = T::from_f64(b[c].to_f64() - mean * invstd * w[c].to_f64());
            for (yo, &xi) in y.iter_mut().zip(&x[row * p.spatial..(row + 1) * p.spatial]) {
                *yo = xi * scale + shift;
            }
        });
    let mean = per_channel.iter().map(|&(m, _)| T::from_f64(m)).collect();
    let invstd = per_channel.iter().map(|&(_, s)| T::from_f64(s)).collect();
    (out, mean, invstd)
}

/// Returns `(dx, dw, db)`.
pub(crate) fn batch_norm_backward<T: Float>(
    x: &[T],
    gy: &[T],
    w: &[T],
    mean: &[T],
    invstd: &[T],
    training: bool,
    p: &BatchNormParams,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let count = (p.n * p.spatial) as f64;
    // Per channel: sum(gy) and sum(gy * xhat).
    let sums: Vec<(f64, f64)> = (0..p.c)
        .into_par_iter()
        .map(|c| {
            let (m, s) = (mean[c].to_f64(), invstd[c].to_f64());
            let (mut sg, mut sgx) = (0.0, 0.0);
            for n in 0..p.n {
                let base = (n * p.c + c) * p.spatial;
                let r = base..base + p.spatial;
                let (a, b) = lane_sums(&gy[r.clone()], &x[r], |g, x| {
                    let g = g.to_f64();
                    (g, g * (x.to_f64() - m))
                });
                sg += a;
                sgx += b;
            }
            (sg, sgx * s)
        })
        .collect();
    // dx = w·s·(g − Σg/count − x̂·Σ(g·x̂)/count), with x̂ = (x − mean)·s: the per-channel
    // factors are formed in f64, the per-element arithmetic runs in T (as PyTorch's).
    let factors: Vec<(T, T, T, T)> = (0..p.c)
        .map(|c| {
            let (m, s, wc) = (mean[c].to_f64(), invstd[c].to_f64(), w[c].to_f64());
            let (sg, sgx) = sums[c];
            if training {
                (
                    T::from_f64(wc * s),
                    T::from_f64(sg / count),
                    T::from_f64(wc * s * s * sgx / count),
                    T::from_f64(m),
                )
            } else {
                (T::from_f64(wc * s), T::zero(), T::zero(), T::zero())
            }
        })
        .collect();
    let mut dx = vec![T::zero(); x.len()];
    dx.par_chunks_mut(p.spatial.max(1))
        .enumerate()
        .for_each(|(row, d)| {
            let (k, mean_g, k_x, m) = factors[row % p.c];
            let base = row * p.spatial;
            let (g, xs) = (&gy[base..base + d.len()], &x[base..base + d.len()]);
            if training {
                for ((di, &g), &xv) in d.iter_mut().zip(g).zip(xs) {
                    *di = k * (g - mean_g) - k_x * (xv - m);
                }
            } else {
                // Running statistics are constants: x plays no part (a non-finite x must
                // not reach dx through a 0 · x term).
                for (di, &g) in d.iter_mut().zip(g) {
                    *di = k * g;
                }
            }
        });
    let dw = sums.iter().map(|&(_, sgx)| T::from_f64(sgx)).collect();
    let db = sums.iter().map(|&(sg, _)| T::from_f64(sg)).collect();
    (dx, dw, db)
}

/// [`batch_norm`] on storages of one float dtype: inputs `[x, weight, bias]` (training) or
/// `[x, weight, bias, running mean, running var]` (evaluation); `[out, mean, invstd]`.
pub(crate) fn run(inputs: &[&CpuStorage], p: &BatchNormParams) -> Result<[CpuStorage; 3]> {
    fn go<T: Float>(v: &[&[T]], p: &BatchNormParams) -> (Vec<T>, Vec<T>, Vec<T>) {
        let stats = (v.len() == 5).then(|| (v[3], v[4]));
        batch_norm(v[0], v[1], v[2], stats, p)
    }
    const OP: &str = "batch_norm";
    Ok(match inputs[0].dtype() {
        DType::F32 => {
            let (o, m, s) = go(&typed(inputs, OP, CpuStorage::f32s)?, p);
            [CpuStorage::F32(o), CpuStorage::F32(m), CpuStorage::F32(s)]
        }
        DType::F64 => {
            let (o, m, s) = go(&typed(inputs, OP, CpuStorage::f64s)?, p);
            [CpuStorage::F64(o), CpuStorage::F64(m), CpuStorage::F64(s)]
        }
        DType::U32 => return Err(unsupported(OP, DType::U32)),
    })
}

/// [`batch_norm_backward`] on storages of one float dtype: inputs `[x, grad of out,
/// weight, mean, invstd]`; `[d x, d weight, d bias]`.
pub(crate) fn run_backward(
    inputs: &[&CpuStorage],
    training: bool,
    p: &BatchNormParams,
) -> Result<[CpuStorage; 3]> {
    const OP: &str = "batch_norm backward";
    Ok(match inputs[0].dtype() {
        DType::F32 => {
            let v = typed(inputs, OP, CpuStorage::f32s)?;
            let (a, b, c) = batch_norm_backward(v[0], v[1], v[2], v[3], v[4], training, p);
            [CpuStorage::F32(a), CpuStorage::F32(b), CpuStorage::F32(c)]
        }
        DType::F64 => {
            let v = typed(inputs, OP, CpuStorage::f64s)?;
            let (a, b, c) = batch_norm_backward(v[0], v[1], v[2], v[3], v[4], training, p);
            [CpuStorage::F64(a), CpuStorage::F64(b), CpuStorage::F64(c)]
        }
        DType::U32 => return Err(unsupported(OP, DType::U32)),
    })
}
