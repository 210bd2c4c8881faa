//! Connectionist temporal classification loss (Graves et al. 2006) with blank = 0, as
//! `torch.nn.functional.ctc_loss`: the negative log-likelihood of each target sequence
//! under per-frame log-probabilities, by the forward-backward recursions in log space
//! (f64), and its exact gradient with respect to the log-probabilities.
//!
//! Reductions: `Sum` adds the per-sample losses; `Mean` divides each by its target length
//! (at least 1) and averages over the batch, PyTorch's `reduction='mean'`; `BatchMean`
//! averages the per-sample losses over the batch (deepspeech.pytorch's
//! `reduction='sum'` then `loss / inputs.size(0)`, the loss its learning rates are for). A sample whose
//! target cannot be aligned in its input length has infinite loss; with `zero_infinity`
//! its loss and gradient become 0, as PyTorch's flag of that name.

use std::sync::Arc;
use tensor::{no_grad, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtcReduction {
    Mean,
    Sum,
    BatchMean,
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
    // Shapes, lengths and labels are checked by ctc_forward_backward (errors say "ctc").
    let n = log_probs.dims().get(1).copied().unwrap_or(0);
    // The recursions run where the log-probabilities live (tensor's cpu/ctc.rs or
    // kernels/ctc.cu); only the per-sample losses come to the host.
    let (nll, grad) = log_probs.ctc_forward_backward(targets, input_lengths)?;
    let mut total = 0.0;
    let mut scales = Vec::with_capacity(n);
    for (i, &l) in nll.iter().enumerate() {
        let scale = match reduction {
            CtcReduction::Sum => 1.0,
            CtcReduction::BatchMean => 1.0 / n as f64,
            CtcReduction::Mean => 1.0 / (targets[i].len().max(1) as f64 * n as f64),
        };
        if l.is_finite() {
            total += l * scale;
            scales.push(scale);
        } else if zero_infinity && l == f64::INFINITY {
            // Loss and gradient 0 (the gradient of an unalignable sample already is).
            // Only +inf, as PyTorch: a NaN (diverged log-probabilities) stays NaN, so a
            // diverged run shows instead of reporting a loss of 0.
            scales.push(0.0);
        } else {
            total += l * scale;
            scales.push(f64::NAN);
        }
    }
    let device = log_probs.device();
    let dtype = log_probs.dtype();
    let value = Tensor::from_vec(vec![total], (), device)?.to_dtype(dtype)?;
    // Each sample's gradient scaled by its share of the reduction (NaN for an unalignable
    // sample without zero_infinity, as PyTorch).
    let scales = Tensor::from_vec(scales, vec![1, n, 1], device)?.to_dtype(dtype)?;
    let grad = no_grad(|| grad.mul(&scales))?;
    let backward =
        Arc::new(move |g: &Tensor| -> Result<Vec<Option<Tensor>>> { Ok(vec![Some(grad.mul(g)?)]) });
    Ok(Tensor::custom_op(
        &value,
        std::slice::from_ref(log_probs),
        backward,
    ))
}
