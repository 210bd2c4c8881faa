//! Softmax and log-softmax over the last dimension, and cross-entropy with integer
//! labels, fused (log-sum-exp with max subtraction) for stability and speed. Exponentials
//! are `cpu::fastmath`'s for f32 (vectorised; within 1.2 ulp of libm).

use super::{typed, unsupported, CpuStorage};
use crate::storage::BackendStorage;
use crate::{DType, Error, Float, Result};
use rayon::prelude::*;

/// Independent running results per row in [`lane_fold`] and [`lane_dot`]: a single
/// accumulator chains every step to the previous one (4 cycles each), eight let the loop
/// run as vector operations. The order is fixed, so results do not vary by thread.
const LANES: usize = 8;

/// `xs` folded by `f` from `init` in [`LANES`] running results, combined at the end.
#[inline(always)]
fn lane_fold<T: Float>(xs: &[T], init: T, f: impl Fn(T, T) -> T) -> T {
    let mut acc = [init; LANES];
    let chunks = xs.chunks_exact(LANES);
    let rest = chunks.remainder().iter().copied();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = f(*a, v);
        }
    }
    acc.into_iter().chain(rest).fold(init, f)
}

/// The row's maximum; NaN is skipped, as by `Float::max`.
fn row_max<T: Float>(row: &[T]) -> T {
    lane_fold(row, T::neg_infinity(), T::max)
}

/// Σ xs.
fn lane_sum<T: Float>(xs: &[T]) -> T {
    lane_fold(xs, T::zero(), |a, b| a + b)
}

/// Σ a⊙b in [`LANES`] partial sums.
fn lane_dot<T: Float>(a: &[T], b: &[T]) -> T {
    let mut acc = [T::zero(); LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let rest = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(&x, &y)| x * y);
    for (x, y) in ca.zip(cb) {
        for ((s, &x), &y) in acc.iter_mut().zip(x).zip(y) {
            *s += x * y;
        }
    }
    acc.into_iter().chain(rest).fold(T::zero(), |a, b| a + b)
}

/// Writes e^(v − max) of the row into `out` and returns their sum (exponentials first,
/// in a loop of their own, so it vectorises).
fn exp_shifted<T: Float>(row: &[T], max: T, out: &mut [T]) -> T {
    for (o, &v) in out.iter_mut().zip(row) {
        *o = (v - max).kernel_exp();
    }
    lane_sum(out)
}

pub(crate) fn softmax_last<T: Float>(x: &[T], cols: usize, log: bool) -> Vec<T> {
    let mut out = vec![T::zero(); x.len()];
    if cols == 0 {
        return out;
    }
    out.par_chunks_mut(cols)
        .zip(x.par_chunks(cols))
        .for_each(|(y, row)| {
            let max = row_max(row);
            let sum = exp_shifted(row, max, y);
            if log {
                let lse = sum.ln();
                for (yo, &v) in y.iter_mut().zip(row) {
                    *yo = v - max - lse;
                }
            } else {
                let inv = T::one() / sum;
                y.iter_mut().for_each(|v| *v *= inv);
            }
        });
    out
}

/// softmax: dx = y ⊙ (g − Σ g⊙y); log-softmax: dx = g − exp(y) Σ g.
pub(crate) fn softmax_last_backward<T: Float>(y: &[T], g: &[T], cols: usize, log: bool) -> Vec<T> {
    let mut dx = vec![T::zero(); y.len()];
    if cols == 0 {
        return dx;
    }
    dx.par_chunks_mut(cols)
        .zip(y.par_chunks(cols).zip(g.par_chunks(cols)))
        .for_each(|(d, (yr, gr))| {
            if log {
                let s = lane_sum(gr);
                for ((di, &yi), &gi) in d.iter_mut().zip(yr).zip(gr) {
                    *di = gi - yi.kernel_exp() * s;
                }
            } else {
                let s = lane_dot(yr, gr);
                for ((di, &yi), &gi) in d.iter_mut().zip(yr).zip(gr) {
                    *di = yi * (gi - s);
                }
            }
        });
    dx
}

fn check_labels(labels: &[u32], c: usize, ignore: Option<u32>) -> Result<usize> {
    let mut count = 0;
    for (i, &l) in labels.iter().enumerate() {
        if Some(l) == ignore {
            continue;
        }
        if l as usize >= c {
            return Err(Error::msg(format!(
                "cross_entropy: label {l} at position {i} is out of range for {c} classes"
            )));
        }
        count += 1;
    }
    Ok(count)
}

/// Returns (mean loss over non-ignored rows, softmax probabilities, non-ignored count).
///
/// One parallel pass per row: its max, `exp(x − max)` into the probabilities, their sum,
/// then the row's loss `−(x_label − max − ln sum)` and the probabilities scaled by
/// `1/sum`. No log-softmax buffer is made: at a language model's 10,000 classes a second
/// pass over the logits (and its exponentials) cost as much as the rest of the op.
pub(crate) fn cross_entropy<T: Float>(
    x: &[T],
    labels: &[u32],
    c: usize,
    ignore: Option<u32>,
) -> Result<(T, Vec<T>, usize)> {
    let count = check_labels(labels, c, ignore)?;
    let mut probs = vec![T::zero(); x.len()];
    if c == 0 {
        return Ok((T::zero(), probs, count));
    }
    // Row losses in row order, summed serially below: the mean does not depend on how
    // rayon split the rows.
    let mut row_loss = vec![0.0f64; labels.len()];
    probs
        .par_chunks_mut(c)
        .zip(x.par_chunks(c))
        .zip(labels.par_iter().zip(row_loss.par_iter_mut()))
        .for_each(|((p, row), (&l, loss))| {
            let max = row_max(row);
            let sum = exp_shifted(row, max, p);
            if Some(l) != ignore {
                *loss = -(row[l as usize] - max - sum.ln()).to_f64();
            }
            let inv = T::one() / sum;
            p.iter_mut().for_each(|v| *v *= inv);
        });
    let loss: f64 = row_loss.iter().sum();
    let mean = if count > 0 { loss / count as f64 } else { 0.0 };
    Ok((T::from_f64(mean), probs, count))
}

/// d loss / d logits = g · (p − onehot(label)) / count, zero on ignored rows.
pub(crate) fn cross_entropy_backward<T: Float>(
    probs: &[T],
    labels: &[u32],
    grad: f64,
    c: usize,
    ignore: Option<u32>,
    count: usize,
) -> Vec<T> {
    let scale = if count > 0 {
        T::from_f64(grad / count as f64)
    } else {
        T::zero()
    };
    let mut dx = vec![T::zero(); probs.len()];
    if c == 0 {
        return dx;
    }
    dx.par_chunks_mut(c)
        .zip(probs.par_chunks(c))
        .zip(labels.par_iter())
        .for_each(|((d, p), &l)| {
            if Some(l) == ignore {
                return;
            }
            for (di, &pi) in d.iter_mut().zip(p) {
                *di = pi * scale;
            }
            d[l as usize] -= scale;
        });
    dx
}

/// [`cross_entropy`] on storages: `(loss [1], probs [n, c], count [1])` in the logits'
/// dtype, from float logits and U32 labels.
pub(crate) fn run_cross_entropy(
    x: &CpuStorage,
    labels: &CpuStorage,
    c: usize,
    ignore: Option<u32>,
) -> Result<[CpuStorage; 3]> {
    let labels = labels.as_u32("cross_entropy labels")?;
    match x {
        CpuStorage::F32(x) => {
            let (l, p, n) = cross_entropy(x, labels, c, ignore)?;
            Ok([
                CpuStorage::F32(vec![l]),
                CpuStorage::F32(p),
                CpuStorage::F32(vec![n as f32]),
            ])
        }
        CpuStorage::F64(x) => {
            let (l, p, n) = cross_entropy(x, labels, c, ignore)?;
            Ok([
                CpuStorage::F64(vec![l]),
                CpuStorage::F64(p),
                CpuStorage::F64(vec![n as f64]),
            ])
        }
        CpuStorage::U32(_) => Err(unsupported("cross_entropy logits", DType::U32)),
    }
}

/// [`cross_entropy_backward`] on storages: the logits' gradient from the forward's
/// probabilities, the labels, the upstream gradient and the forward's count (one float
/// element each).
pub(crate) fn run_cross_entropy_backward(
    probs: &CpuStorage,
    labels: &CpuStorage,
    grad: &CpuStorage,
    count: &CpuStorage,
    c: usize,
    ignore: Option<u32>,
) -> Result<CpuStorage> {
    let labels = labels.as_u32("cross_entropy labels")?;
    let scalar = |s: &CpuStorage, what: &str| -> Result<f64> {
        match s {
            CpuStorage::F32(v) if v.len() == 1 => Ok(v[0] as f64),
            CpuStorage::F64(v) if v.len() == 1 => Ok(v[0]),
            _ => Err(Error::msg(format!(
                "cross_entropy backward: the {what} must be one float element"
            ))),
        }
    };
    let (grad, count) = (scalar(grad, "upstream gradient")?, scalar(count, "count")?);
    let count = count as usize;
    match probs {
        CpuStorage::F32(p) => Ok(CpuStorage::F32(cross_entropy_backward(
            p, labels, grad, c, ignore, count,
        ))),
        CpuStorage::F64(p) => Ok(CpuStorage::F64(cross_entropy_backward(
            p, labels, grad, c, ignore, count,
        ))),
        CpuStorage::U32(_) => Err(unsupported("cross_entropy backward", DType::U32)),
    }
}

/// [`softmax_last`] (inputs `[x]`) or [`softmax_last_backward`] (inputs `[y, grad of y]`,
/// `y` the forward's output) on storages of one float dtype, rows of `cols`.
pub(crate) fn run(inputs: &[&CpuStorage], cols: usize, log: bool) -> Result<CpuStorage> {
    const OP: &str = "softmax";
    Ok(match inputs[0].dtype() {
        DType::F32 => CpuStorage::F32(softmax_pass(
            &typed(inputs, OP, CpuStorage::f32s)?,
            cols,
            log,
        )),
        DType::F64 => CpuStorage::F64(softmax_pass(
            &typed(inputs, OP, CpuStorage::f64s)?,
            cols,
            log,
        )),
        DType::U32 => return Err(unsupported(OP, DType::U32)),
    })
}

fn softmax_pass<T: Float>(v: &[&[T]], cols: usize, log: bool) -> Vec<T> {
    match v {
        [x] => softmax_last(x, cols, log),
        [y, g] => softmax_last_backward(y, g, cols, log),
        _ => unreachable!("softmax takes one input, its backward two"),
    }
}
