//! Clipping by global norm, as `torch.nn.utils.clip_grad_norm_`.

use tensor::{no_grad, DType, Result, Tensor};

/// Scales every gradient by `max_norm / (total + 1e-6)` when the global L2 norm `total`
/// exceeds `max_norm`, or is NaN: then, as in PyTorch, every gradient becomes NaN, so the
/// divergence shows downstream (the exchange refuses a non-finite gradient, naming it)
/// instead of the finite gradients passing unclipped. Returns the norm before clipping as a
/// one-element f64 tensor on the gradients' device.
///
/// Nothing is read to the host, as in PyTorch: the scale is computed on the device and
/// applied to every gradient, 1 when `total <= max_norm` (a multiply by exactly 1, which
/// leaves every value as it was) and `max_norm / (total + 1e-6)` otherwise (NaN fails the
/// comparison, so a NaN norm scales too). Reading the norm per tensor, as a host-side
/// loop would, waits for the GPU once per parameter tensor. (PyTorch scales by
/// `min(max_norm / (total + 1e-6), 1)`, which also shrinks a norm within 1e-6 below
/// `max_norm`; here a norm at or below the limit leaves the gradients untouched.)
pub fn clip_grad_norm(grads: &mut [Tensor], max_norm: f64) -> Result<Tensor> {
    no_grad(|| {
        let device = grads.first().map_or(tensor::Device::Cpu, |g| g.device());
        let mut sq = Tensor::zeros((), DType::F64, device)?;
        for g in grads.iter() {
            sq = sq.add(&g.to_dtype(DType::F64)?.sqr()?.sum_all()?)?;
        }
        let total = sq.sqrt()?;
        let limit = Tensor::full(max_norm, (), DType::F64, device)?;
        let coef = total.le(&limit)?.where_cond(
            &Tensor::ones((), DType::F64, device)?,
            &limit.div(&total.add_scalar(1e-6)?)?,
        )?;
        // The coefficient in the gradients' dtype, converted once per dtype (one, as a
        // rule), not once per gradient.
        let mut cast: Option<Tensor> = None;
        for g in grads.iter_mut() {
            let c = match &cast {
                Some(c) if c.dtype() == g.dtype() => c.clone(),
                _ => cast.insert(coef.to_dtype(g.dtype())?).clone(),
            };
            *g = g.mul(&c)?;
        }
        Ok(total)
    })
}
