//! Dropout: active in training mode only, drawing its mask from the context's seeded RNG.
//! A probability outside [0, 1] is an error at the first training forward (the layer is
//! a plain tuple struct, built where the models are).

use crate::module::{Ctx, Module, NamedTensor};
use tensor::{Result, Tensor};

pub struct Dropout(pub f64);

impl Module for Dropout {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx) -> Result<Tensor> {
        if ctx.training {
            x.dropout(self.0, &mut ctx.rng)
        } else {
            Ok(x.clone())
        }
    }
    fn params(&self, _prefix: &str, _out: &mut Vec<NamedTensor>) {}
}
