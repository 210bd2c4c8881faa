//! Fully connected layer `y = x Wᵀ + b` over the last dimension.

use crate::init;
use crate::module::{Ctx, Module, NamedTensor};
use tensor::{Result, Rng, Tensor};

pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    /// When the weight is tied to another module's (an embedding), it is listed there only.
    tied: bool,
}

impl Linear {
    /// PyTorch's default initialisation: weight and bias U(−1/√in, 1/√in).
    pub fn new(inputs: usize, outputs: usize, bias: bool, rng: &mut Rng) -> Result<Self> {
        let bound = 1.0 / (inputs.max(1) as f64).sqrt();
        Ok(Linear {
            weight: init::uniform(&[outputs, inputs], bound, rng)?,
            bias: if bias {
                Some(init::uniform(&[outputs], bound, rng)?)
            } else {
                None
            },
            tied: false,
        })
    }
    /// A decoder that shares `weight` (`[outputs, inputs]`) with another module, e.g. an
    /// embedding table; only the bias is listed as this layer's parameter.
    pub fn tied(weight: Tensor, bias: bool, rng: &mut Rng) -> Result<Self> {
        let &[outputs, inputs] = weight.dims() else {
            return Err(tensor::Error::BadShape {
                op: "Linear::tied",
                msg: "the shared weight must be [outputs, inputs]".into(),
                shape: weight.shape().clone(),
            });
        };
        let bound = 1.0 / (inputs.max(1) as f64).sqrt();
        Ok(Linear {
            weight,
            bias: if bias {
                Some(init::uniform(&[outputs], bound, rng)?)
            } else {
                None
            },
            tied: true,
        })
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor, _ctx: &mut Ctx) -> Result<Tensor> {
        let y = x.matmul(&self.weight.transpose_last()?)?;
        match &self.bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        if !self.tied {
            out.push(NamedTensor::at(prefix, "weight", &self.weight));
        }
        if let Some(b) = &self.bias {
            out.push(NamedTensor::at(prefix, "bias", b));
        }
    }
}
