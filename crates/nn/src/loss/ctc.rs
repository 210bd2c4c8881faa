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
    let device = log_probs.device();
    let dtype = log_probs.dtype();
    // The recursions run where the log-probabilities live (tensor's cpu/ctc.rs or
    // kernels/ctc.cu), and so does the reduction below: the per-sample losses never come
    // to the host (on a GPU that read would wait for the whole forward pass).
    let (nll, grad) = log_probs.ctc_forward_backward(targets, input_lengths)?;
    // Each sample's share of the reduction, known on the host from the target lengths.
    let shares: Vec<f64> = targets
        .iter()
        .map(|t| match reduction {
            CtcReduction::Sum => 1.0,
            CtcReduction::BatchMean => 1.0 / n as f64,
            CtcReduction::Mean => 1.0 / (t.len().max(1) as f64 * n as f64),
        })
        .collect();
    let (value, scales) = no_grad(|| -> Result<(Tensor, Tensor)> {
        let shares = Tensor::from_vec(shares, vec![n], device)?;
        // A sample's gradient is scaled by its share, or NaN when its loss is not finite
        // (as PyTorch): l - l is 0 for a finite loss and NaN for ±inf and NaN.
        let mut scales = shares.add(&nll.sub(&nll)?)?;
        let mut contrib = nll.mul(&shares)?;
        if zero_infinity {
            // An unalignable sample (+inf only: a NaN from diverged log-probabilities
            // stays NaN, so a diverged run shows) counts 0 in loss and gradient.
            let inf = Tensor::full(f64::INFINITY, vec![n], tensor::DType::F64, device)?;
            let unalignable = nll.eq(&inf)?;
            let zeros = nll.zeros_like()?;
            scales = unalignable.where_cond(&zeros, &scales)?;
            contrib = unalignable.where_cond(&zeros, &contrib)?;
        }
        let value = contrib.sum_all()?.to_dtype(dtype)?;
        Ok((value, scales.reshape(vec![1, n, 1])?.to_dtype(dtype)?))
    })?;
    let grad = no_grad(|| grad.mul(&scales))?;
    let backward =
        Arc::new(move |g: &Tensor| -> Result<Vec<Option<Tensor>>> { Ok(vec![Some(grad.mul(g)?)]) });
    Ok(Tensor::custom_op(
        &value,
        std::slice::from_ref(log_probs),
        backward,
    ))
}
