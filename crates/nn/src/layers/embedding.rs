//! Embedding table: U32 token ids of any shape to vectors.

use crate::init;
use crate::module::{Ctx, Module, NamedTensor};
use tensor::{Result, Rng, Tensor};

pub struct Embedding {
    pub weight: Tensor,
}

impl Embedding {
    /// N(0, 1) as PyTorch's default; language models re-initialise with `uniform`.
    pub fn new(vocab: usize, dim: usize, rng: &mut Rng) -> Result<Self> {
        Ok(Embedding {
            weight: init::normal(&[vocab, dim], 1.0, rng)?,
        })
    }
}

impl Module for Embedding {
    fn forward(&self, ids: &Tensor, _ctx: &mut Ctx) -> Result<Tensor> {
        self.weight.embedding(ids)
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        out.push(NamedTensor::at(prefix, "weight", &self.weight));
    }
}
