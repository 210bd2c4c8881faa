//! Clipping by global norm, as `torch.nn.utils.clip_grad_norm_`.

use tensor::{no_grad, DType, Result, Tensor};

/// Scales every gradient by `max_norm / (total + 1e-6)` when the global L2 norm `total`
/// exceeds `max_norm`, or is NaN: then, as in PyTorch, every gradient becomes NaN, so the
/// divergence shows downstream (the exchange refuses a non-finite gradient, naming it)
/// instead of the finite gradients passing unclipped. Returns the norm before clipping as a
/// one-element f64 tensor on the gradients' device.
///
/// Nothing is read to the host, as in PyTorch: the scale is `min(max_norm / (total +
/// 1e-6), 1)` computed on the device and applied to every gradient (a multiply by exactly
/// 1 when no clipping is due, which leaves the values as they were). Reading the norm
/// per tensor, as a host-side loop would, waits for the GPU once per parameter tensor.
pub fn clip_grad_norm(grads: &mut [Tensor], max_norm: f64) -> Result<Tensor> {
    no_grad(|| {
        let device = grads.first().map_or(tensor::Device::Cpu, |g| g.device());
        let mut sq = Tensor::zeros((), DType::F64, device)?;
        for g in grads.iter() {
            sq = sq.add(&g.to_dtype(DType::F64)?.sqr()?.sum_all()?)?;
        }
        let total = sq.sqrt()?;
        let coef = Tensor::full(max_norm, (), DType::F64, device)?
            .div(&total.add_scalar(1e-6)?)?
            .clamp(f64::NEG_INFINITY, 1.0)?;
        for g in grads.iter_mut() {
            *g = g.mul(&coef.to_dtype(g.dtype())?)?;
        }
        Ok(total)
    })
}
