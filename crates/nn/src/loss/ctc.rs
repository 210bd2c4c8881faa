//! Connectionist temporal classification loss (Graves et al. 2006) with blank = 0, as
//! `torch.nn.functional.ctc_loss`: the negative log-likelihood of each target sequence
//! under per-frame log-probabilities, by the forward-backward recursions in log space
//! (f64), and its exact gradient with respect to the log-probabilities.
//!
//! Reductions: `Sum` adds the per-sample losses; `Mean` divides each by its target length
//! (at least 1) and averages over the batch, PyTorch's `reduction='mean'`. A sample whose
//! target cannot be aligned in its input length has infinite loss; with `zero_infinity`
//! its loss and gradient become 0, as PyTorch's flag of that name.

use std::sync::Arc;
use tensor::{no_grad, DType, Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtcReduction {
    Mean,
    Sum,
}

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
fn sample(lp: &[f64], classes: usize, frames: usize, target: &[u32]) -> (f64, Vec<f64>) {
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

/// CTC loss of `log_probs: [T, N, C]` (log-softmax outputs; blank is class 0) against
/// `targets[n]` (labels in 1..C), using the first `input_lengths[n]` frames of sample n.
pub fn ctc_loss(
    log_probs: &Tensor,
    targets: &[Vec<u32>],
    input_lengths: &[usize],
    reduction: CtcReduction,
    zero_infinity: bool,
) -> Result<Tensor> {
    let d = log_probs.dims();
    if d.len() != 3 {
        return Err(Error::BadShape {
            op: "ctc_loss",
            msg: "log_probs must be [T, N, C]".into(),
            shape: log_probs.shape().clone(),
        });
    }
    let (frames, n, classes) = (d[0], d[1], d[2]);
    if targets.len() != n || input_lengths.len() != n {
        return Err(Error::msg(format!(
            "ctc_loss: batch of {n}, but {} targets and {} input lengths",
            targets.len(),
            input_lengths.len()
        )));
    }
    for (i, (tg, &len)) in targets.iter().zip(input_lengths).enumerate() {
        if len == 0 || len > frames {
            return Err(Error::msg(format!(
                "ctc_loss: input length {len} of sample {i} is not in 1..={frames}"
            )));
        }
        if let Some(&bad) = tg.iter().find(|&&l| l == 0 || l as usize >= classes) {
            return Err(Error::msg(format!(
                "ctc_loss: label {bad} in target {i} is not in 1..{classes} (0 is the blank)"
            )));
        }
    }
    // [N, T, C] in f64 for the recursions.
    let lp = no_grad(|| {
        log_probs
            .transpose(0, 1)?
            .to_dtype(DType::F64)?
            .to_vec::<f64>()
    })?;
    let mut total = 0.0;
    let mut grad = vec![0.0; n * frames * classes];
    for i in 0..n {
        let frames_i = input_lengths[i];
        let (mut nll, mut g) = sample(
            &lp[i * frames * classes..(i * frames + frames_i) * classes],
            classes,
            frames_i,
            &targets[i],
        );
        if !nll.is_finite() {
            if zero_infinity {
                nll = 0.0;
            } else {
                g.iter_mut().for_each(|v| *v = f64::NAN);
            }
        }
        let scale = match reduction {
            CtcReduction::Sum => 1.0,
            CtcReduction::Mean => 1.0 / (targets[i].len().max(1) as f64 * n as f64),
        };
        total += nll * scale;
        for (dst, src) in grad[i * frames * classes..].iter_mut().zip(g) {
            *dst = src * scale;
        }
    }
    let device = log_probs.device();
    let dtype = log_probs.dtype();
    let value = Tensor::from_vec(vec![total], (), device)?.to_dtype(dtype)?;
    // [N, T, C] back to [T, N, C].
    let grad = Tensor::from_vec(grad, vec![n, frames, classes], device)?
        .transpose(0, 1)?
        .contiguous()?
        .to_dtype(dtype)?;
    let backward =
        Arc::new(move |g: &Tensor| -> Result<Vec<Option<Tensor>>> { Ok(vec![Some(grad.mul(g)?)]) });
    Ok(Tensor::custom_op(&value, &[log_probs.clone()], backward))
}
