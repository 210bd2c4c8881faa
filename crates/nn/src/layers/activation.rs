//! Parameter-free elementwise layers, and `Flatten`.

use crate::module::{Ctx, Module, NamedTensor};
use tensor::{Result, Tensor};

#[derive(Clone, Copy, Debug)]
pub enum Activation {
    Relu,
    Tanh,
    Sigmoid,
    /// Clamp into `[min, max]` (DeepSpeech uses `Hardtanh(0, 20)`).
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
            Activation::Hardtanh { min, max } => x.clamp(min, max),
        }
    }
    fn params(&self, _prefix: &str, _out: &mut Vec<NamedTensor>) {}
}

/// Merges every dimension after the first: `[N, ...] -> [N, prod(...)]`.
pub struct Flatten;

impl Module for Flatten {
    fn forward(&self, x: &Tensor, _ctx: &mut Ctx) -> Result<Tensor> {
        x.flatten_from(1)
    }
    fn params(&self, _prefix: &str, _out: &mut Vec<NamedTensor>) {}
}
