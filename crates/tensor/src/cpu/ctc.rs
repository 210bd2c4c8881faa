//! CTC's forward-backward recursions on the CPU (Graves et al. 2006, blank = 0), in log
//! space and f64: per sample the negative log-likelihood and its exact gradient with
//! respect to the log-probabilities. kernels/ctc.cu computes the same on the GPU; the
//! loss itself (reductions, zero_infinity, checks) is `nn::loss::ctc_loss`.

use super::CpuStorage;
use crate::{DType, Float, Result};
use rayon::prelude::*;

fn log_add(a: f64, b: f64) -> f64 {
    if a == f64::NEG_INFINITY {
        return b;
    }
    if b == f64::NEG_INFINITY {
        return a;
    }
    let m = a.max(b);
    m + ((a - m).exp() + (b - m).exp()).ln()
}

/// Negative log-likelihood of one sample and d nll / d log_probs for its frames `[t, C]`.
pub(crate) fn sample(lp: &[f64], classes: usize, frames: usize, target: &[u32]) -> (f64, Vec<f64>) {
    // Extended label sequence with blanks: b, l1, b, l2, …, b.
    let ext: Vec<usize> = std::iter::once(0)
        .chain(target.iter().flat_map(|&l| [l as usize, 0]))
        .collect();
    let s_len = ext.len();
    let at = |t: usize, k: usize| lp[t * classes + k];
    let can_skip = |s: usize| s >= 2 && ext[s] != 0 && ext[s] != ext[s - 2];
    let ninf = f64::NEG_INFINITY;
    // alpha_t(s) includes frame t's emission; beta_t(s) covers frames after t only.
    let mut alpha = vec![ninf; frames * s_len];
    let mut beta = vec![ninf; frames * s_len];
    alpha[0] = at(0, ext[0]);
    if s_len > 1 {
        alpha[1] = at(0, ext[1]);
    }
    for t in 1..frames {
        for s in 0..s_len {
            let mut a = alpha[(t - 1) * s_len + s];
            if s >= 1 {
                a = log_add(a, alpha[(t - 1) * s_len + s - 1]);
            }
            if can_skip(s) {
                a = log_add(a, alpha[(t - 1) * s_len + s - 2]);
            }
            alpha[t * s_len + s] = a + at(t, ext[s]);
        }
    }
    let last = frames - 1;
    beta[last * s_len + s_len - 1] = 0.0;
    if s_len > 1 {
        beta[last * s_len + s_len - 2] = 0.0;
    }
    for t in (0..last).rev() {
        for s in 0..s_len {
            let next = |s2: usize| beta[(t + 1) * s_len + s2] + at(t + 1, ext[s2]);
            let mut b = next(s);
            if s + 1 < s_len {
                b = log_add(b, next(s + 1));
            }
            if s + 2 < s_len && can_skip(s + 2) {
                b = log_add(b, next(s + 2));
            }
            beta[t * s_len + s] = b;
        }
    }
    let mut log_p = alpha[last * s_len + s_len - 1];
    if s_len > 1 {
        log_p = log_add(log_p, alpha[last * s_len + s_len - 2]);
    }
    let nll = -log_p;
    let mut grad = vec![0.0; frames * classes];
    if nll.is_finite() {
        for t in 0..frames {
            // d nll / d lp_t(k) = −(1/P) Σ_{s: ext[s] = k} α_t(s) β_t(s)
            let mut acc = vec![ninf; classes];
            for s in 0..s_len {
                acc[ext[s]] = log_add(acc[ext[s]], alpha[t * s_len + s] + beta[t * s_len + s]);
            }
            for k in 0..classes {
                if acc[k] > ninf {
                    grad[t * classes + k] = -(acc[k] + nll).exp();
                }
            }
        }
    }
    (nll, grad)
}

/// `log_probs [T, N, C]` (contiguous) → per-sample nll and d nll / d log_probs `[T, N, C]`
/// (zero past a sample's frames, and for a sample whose target cannot be aligned).
pub(crate) fn ctc<T: Float>(
    lp: &[T],
    (frames, n, classes): (usize, usize, usize),
    targets: &[Vec<u32>],
    lengths: &[usize],
) -> (Vec<f64>, Vec<T>) {
    let per: Vec<(f64, Vec<f64>)> = (0..n)
        .into_par_iter()
        .map(|i| {
            let f = lengths[i];
            let mut rows = Vec::with_capacity(f * classes);
            for t in 0..f {
                let base = (t * n + i) * classes;
                rows.extend(lp[base..base + classes].iter().map(|&v| Float::to_f64(v)));
            }
            sample(&rows, classes, f, &targets[i])
        })
        .collect();
    let mut grad = vec![T::zero(); frames * n * classes];
    let mut nll = Vec::with_capacity(n);
    for (i, (l, g)) in per.into_iter().enumerate() {
        nll.push(l);
        for t in 0..lengths[i] {
            let (dst, src) = ((t * n + i) * classes, t * classes);
            for k in 0..classes {
                grad[dst + k] = <T as Float>::from_f64(g[src + k]);
            }
        }
    }
    (nll, grad)
}

/// [`ctc`] on a storage: the nll in f64 and the gradient in the log-probabilities' dtype.
pub(crate) fn run(
    lp: &CpuStorage,
    dims: (usize, usize, usize),
    targets: &[Vec<u32>],
    lengths: &[usize],
) -> Result<(CpuStorage, CpuStorage)> {
    match lp {
        CpuStorage::F32(x) => {
            let (l, g) = ctc(x, dims, targets, lengths);
            Ok((CpuStorage::F64(l), CpuStorage::F32(g)))
        }
        CpuStorage::F64(x) => {
            let (l, g) = ctc(x, dims, targets, lengths);
            Ok((CpuStorage::F64(l), CpuStorage::F64(g)))
        }
        CpuStorage::U32(_) => Err(super::unsupported("ctc", DType::U32)),
    }
}
