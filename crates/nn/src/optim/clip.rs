//! Clipping by global norm, as `torch.nn.utils.clip_grad_norm_`.

use tensor::{no_grad, Result, Tensor};

/// Scales every gradient by `max_norm / (total + 1e-6)` when the global L2 norm `total`
/// exceeds `max_norm`, or is NaN: then, as in PyTorch, every gradient becomes NaN, so the
/// divergence shows downstream (the exchange refuses a non-finite gradient, naming it)
/// instead of the finite gradients passing unclipped. Returns the norm before clipping.
pub fn clip_grad_norm(grads: &mut [Tensor], max_norm: f64) -> Result<f64> {
    no_grad(|| {
        let mut sq = 0.0;
        for g in grads.iter() {
            sq += g
                .to_dtype(tensor::DType::F64)?
                .sqr()?
                .sum_all()?
                .to_scalar::<f64>()?;
        }
        let total = sq.sqrt();
        if total.is_nan() || total > max_norm {
            let s = max_norm / (total + 1e-6);
            for g in grads.iter_mut() {
                *g = g.scale(s)?;
            }
        }
        Ok(total)
    })
}
