//! 2-d convolution layer (NCHW), with groups for Caffe's AlexNet.

use crate::init;
use crate::module::{Ctx, Module, NamedTensor};
use tensor::{Conv2dOptions, Error, Result, Rng, Tensor};

pub struct Conv2d {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    pub options: Conv2dOptions,
}

/// `[outputs, inputs / groups, kh, kw]`; channels that `groups` does not divide are an
/// error here, as in PyTorch's constructor, rather than at the first forward pass.
fn weight_shape(
    inputs: usize,
    outputs: usize,
    kernel: (usize, usize),
    options: &Conv2dOptions,
) -> Result<[usize; 4]> {
    let g = options.groups.max(1);
    if !inputs.is_multiple_of(g) || !outputs.is_multiple_of(g) {
        return Err(Error::msg(format!(
            "Conv2d: {inputs} input and {outputs} output channels must both be divisible by groups = {g}"
        )));
    }
    Ok([outputs, inputs / g, kernel.0, kernel.1])
}

impl Conv2d {
    /// PyTorch's default initialisation (U(−1/√fan_in, 1/√fan_in) for weight and bias).
    pub fn new(
        inputs: usize,
        outputs: usize,
        kernel: (usize, usize),
        options: Conv2dOptions,
        bias: bool,
        rng: &mut Rng,
    ) -> Result<Self> {
        let shape = weight_shape(inputs, outputs, kernel, &options)?;
        let bound = 1.0 / (init::fans(&shape).0.max(1) as f64).sqrt();
        Ok(Conv2d {
            weight: init::uniform(&shape, bound, rng)?,
            bias: if bias {
                Some(init::uniform(&[outputs], bound, rng)?)
            } else {
                None
            },
            options,
        })
    }
    /// He initialisation N(0, 2/fan_out), as torchvision and the CIFAR ResNets use.
    pub fn kaiming(
        inputs: usize,
        outputs: usize,
        kernel: (usize, usize),
        options: Conv2dOptions,
        bias: bool,
        rng: &mut Rng,
    ) -> Result<Self> {
        let shape = weight_shape(inputs, outputs, kernel, &options)?;
        Ok(Conv2d {
            weight: init::kaiming_normal(&shape, init::fans(&shape).1, rng)?,
            bias: if bias {
                Some(init::constant(&[outputs], 0.0)?)
            } else {
                None
            },
            options,
        })
    }
}

impl Module for Conv2d {
    fn forward(&self, x: &Tensor, _ctx: &mut Ctx) -> Result<Tensor> {
        let y = x.conv2d(&self.weight, self.options)?;
        match &self.bias {
            Some(b) => y.add(&b.reshape(vec![1, b.elem_count(), 1, 1])?),
            None => Ok(y),
        }
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        out.push(NamedTensor::at(prefix, "weight", &self.weight));
        if let Some(b) = &self.bias {
            out.push(NamedTensor::at(prefix, "bias", b));
        }
    }
}
