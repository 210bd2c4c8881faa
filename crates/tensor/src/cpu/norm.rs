//! Batch normalisation over dimension 1 of contiguous `[N, C, spatial]` data, fused so
//! that forward and backward each read the input twice at most. Statistics accumulate in
//! f64 whatever the element type, so large batches do not lose precision.

use crate::storage::BatchNormParams;
use crate::Float;
use rayon::prelude::*;

/// Sum over (n, s) of `f(x[n, c, s])` for one channel.
fn channel_sum<T: Float>(x: &[T], p: &BatchNormParams, c: usize, f: impl Fn(T) -> f64) -> f64 {
    let mut s = 0.0;
    for n in 0..p.n {
        let base = (n * p.c + c) * p.spatial;
        s += x[base..base + p.spatial].iter().map(|&v| f(v)).sum::<f64>();
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
                for i in base..base + p.spatial {
                    let g = gy[i].to_f64();
                    sg += g;
                    sgx += g * (x[i].to_f64() - m) * s;
                }
            }
            (sg, sgx)
        })
        .collect();
    let mut dx = vec![T::zero(); x.len()];
    dx.par_chunks_mut(p.spatial.max(1))
        .enumerate()
        .for_each(|(row, d)| {
            let c = row % p.c;
            let (m, s, wc) = (mean[c].to_f64(), invstd[c].to_f64(), w[c].to_f64());
            let (sg, sgx) = sums[c];
            let base = row * p.spatial;
            for (j, di) in d.iter_mut().enumerate() {
                let g = gy[base + j].to_f64();
                *di = T::from_f64(if training {
                    let xhat = (x[base + j].to_f64() - m) * s;
                    wc * s * (g - sg / count - xhat * sgx / count)
                } else {
                    wc * s * g
                });
            }
        });
    let dw = sums.iter().map(|&(_, sgx)| T::from_f64(sgx)).collect();
    let db = sums.iter().map(|&(sg, _)| T::from_f64(sg)).collect();
    (dx, dw, db)
}
