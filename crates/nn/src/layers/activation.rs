//! Parameter-free elementwise layers, and `Flatten`.

use crate::module::{Ctx, Module, NamedTensor};
use std::sync::Arc;
use tensor::{Result, Tensor};

#[derive(Clone, Copy, Debug)]
pub enum Activation {
    Relu,
    Tanh,
    Sigmoid,
    /// Clamp into `[min, max]` (DeepSpeech uses `Hardtanh(0, 20)`), with PyTorch's
    /// gradient: zero at the bounds themselves (see `hardtanh` below).
    Hardtanh {
        min: f64,
        max: f64,
    },
}

impl Module for Activation {
    fn forward(&self, x: &Tensor, _ctx: &mut Ctx) -> Result<Tensor> {
        match *self {
            Activation::Relu => x.relu(),
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => x.sigmoid(),
            Activation::Hardtanh { min, max } => hardtanh(x, min, max),
        }
    }
    fn params(&self, _prefix: &str, _out: &mut Vec<NamedTensor>) {}
}

/// `x.clamp(min, max)` with the gradient of PyTorch's `hardtanh_backward`, which passes
/// only where `min < x < max` strictly. `clamp` keeps `torch.clamp`'s inclusive mask,
/// which differs exactly at the bounds: an input of exactly 0 at DeepSpeech's
/// `Hardtanh(0, 20)` gets no gradient in PyTorch, and must not here, for the gradients
/// to match the reference. The mask is built in the backward only, so the forward costs
/// one pass as before.
fn hardtanh(x: &Tensor, min: f64, max: f64) -> Result<Tensor> {
    let y = tensor::no_grad(|| x.clamp(min, max))?;
    if !x.tracks_grad() || !tensor::is_grad_enabled() {
        return Ok(y);
    }
    let saved = x.detach();
    Ok(Tensor::custom_op(
        &y,
        std::slice::from_ref(x),
        Arc::new(move |g| {
            // The bounds convert to the element type as `clamp`'s do, so the mask agrees
            // with the forward at values that round.
            let bound = |v| Tensor::scalar(v, saved.dtype(), saved.device());
            let inside = saved.gt(&bound(min)?)?.mul(&saved.lt(&bound(max)?)?)?;
            Ok(vec![Some(g.mul(&inside)?)])
        }),
    ))
}

/// Merges every dimension after the first: `[N, ...] -> [N, prod(...)]`.
pub struct Flatten;

impl Module for Flatten {
    fn forward(&self, x: &Tensor, _ctx: &mut Ctx) -> Result<Tensor> {
        x.flatten_from(1)
    }
    fn params(&self, _prefix: &str, _out: &mut Vec<NamedTensor>) {}
}
