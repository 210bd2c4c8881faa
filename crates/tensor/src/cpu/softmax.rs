//! Softmax and log-softmax over the last dimension, and cross-entropy with integer
//! labels, fused (log-sum-exp with max subtraction) for stability and speed.

use crate::Float;
use crate::{Error, Result};
use rayon::prelude::*;

pub(crate) fn softmax_last<T: Float>(x: &[T], cols: usize, log: bool) -> Vec<T> {
    let mut out = vec![T::zero(); x.len()];
    if cols == 0 {
        return out;
    }
    out.par_chunks_mut(cols)
        .zip(x.par_chunks(cols))
        .for_each(|(y, row)| {
            let max = row.iter().copied().fold(T::neg_infinity(), T::max);
            let mut sum = T::zero();
            for (yo, &v) in y.iter_mut().zip(row) {
                *yo = (v - max).exp();
                sum += *yo;
            }
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
                let s: T = gr.iter().copied().sum();
                for ((di, &yi), &gi) in d.iter_mut().zip(yr).zip(gr) {
                    *di = gi - yi.exp() * s;
                }
            } else {
                let s: T = yr.iter().zip(gr).map(|(&a, &b)| a * b).sum();
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
pub(crate) fn cross_entropy<T: Float>(
    x: &[T],
    labels: &[u32],
    c: usize,
    ignore: Option<u32>,
) -> Result<(T, Vec<T>, usize)> {
    let count = check_labels(labels, c, ignore)?;
    let logp = softmax_last(x, c, true);
    let mut loss = 0.0;
    for (row, &l) in logp.chunks(c.max(1)).zip(labels) {
        if Some(l) != ignore {
            loss -= row[l as usize].to_f64();
        }
    }
    let probs = logp.iter().map(|v| v.exp()).collect();
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
