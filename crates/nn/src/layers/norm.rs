//! Normalisation layers: batch norm (over dimension 1, for `[N, C]`, `[N, C, L]` and
//! `[N, C, H, W]`), layer norm (over trailing dimensions), and Caffe/AlexNet's local
//! response normalisation across channels.

use crate::init;
use crate::module::{Ctx, Module, NamedTensor};
use tensor::{no_grad, Error, Pool2dOptions, Result, Tensor};

/// Batch normalisation with running statistics, PyTorch's `BatchNorm1d/2d` semantics:
/// running statistics use momentum 0.1 by default and the unbiased batch variance.
pub struct BatchNorm {
    pub weight: Tensor,
    pub bias: Tensor,
    pub running_mean: Tensor,
    pub running_var: Tensor,
    pub eps: f64,
    pub momentum: f64,
}

impl BatchNorm {
    pub fn new(channels: usize) -> Result<Self> {
        Ok(BatchNorm {
            weight: init::constant(&[channels], 1.0)?,
            bias: init::constant(&[channels], 0.0)?,
            running_mean: Tensor::zeros(channels, init::default_dtype(), init::default_device())?,
            running_var: Tensor::ones(channels, init::default_dtype(), init::default_device())?,
            eps: 1e-5,
            momentum: 0.1,
        })
    }
}

impl Module for BatchNorm {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx) -> Result<Tensor> {
        if !ctx.training {
            return Ok(x
                .batch_norm(
                    &self.weight,
                    &self.bias,
                    Some((&self.running_mean, &self.running_var)),
                    self.eps,
                )?
                .output);
        }
        let out = x.batch_norm(&self.weight, &self.bias, None, self.eps)?;
        no_grad(|| -> Result<()> {
            let m = self.momentum;
            let n = out.count as f64;
            let unbiased = out.var.scale(n / (n - 1.0))?;
            self.running_mean.assign(
                &self
                    .running_mean
                    .scale(1.0 - m)?
                    .add(&out.mean.scale(m)?.to_dtype(self.running_mean.dtype())?)?,
            )?;
            self.running_var.assign(
                &self
                    .running_var
                    .scale(1.0 - m)?
                    .add(&unbiased.scale(m)?.to_dtype(self.running_var.dtype())?)?,
            )
        })?;
        Ok(out.output)
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        out.push(NamedTensor::at(prefix, "weight", &self.weight));
        out.push(NamedTensor::at(prefix, "bias", &self.bias));
    }
    fn buffers(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        out.push(NamedTensor::at(prefix, "running_mean", &self.running_mean));
        out.push(NamedTensor::at(prefix, "running_var", &self.running_var));
    }
}

/// Layer normalisation over the last `normalized.len()` dimensions, with affine parameters.
pub struct LayerNorm {
    pub weight: Tensor,
    pub bias: Tensor,
    pub normalized: Vec<usize>,
    pub eps: f64,
}

impl LayerNorm {
    pub fn new(normalized: &[usize]) -> Result<Self> {
        Ok(LayerNorm {
            weight: init::constant(normalized, 1.0)?,
            bias: init::constant(normalized, 0.0)?,
            normalized: normalized.to_vec(),
            eps: 1e-5,
        })
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor, _ctx: &mut Ctx) -> Result<Tensor> {
        let r = x.rank();
        let k = self.normalized.len();
        if r < k || x.dims()[r - k..] != *self.normalized {
            return Err(Error::BadShape {
                op: "LayerNorm",
                msg: format!("trailing dimensions must be {:?}", self.normalized),
                shape: x.shape().clone(),
            });
        }
        let dims: Vec<usize> = (r - k..r).collect();
        let centered = x.sub(&x.mean(&dims, true)?)?;
        let var = centered.sqr()?.mean(&dims, true)?;
        centered
            .div(&var.add_scalar(self.eps)?.sqrt()?)?
            .mul(&self.weight)?
            .add(&self.bias)
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        out.push(NamedTensor::at(prefix, "weight", &self.weight));
        out.push(NamedTensor::at(prefix, "bias", &self.bias));
    }
}

/// Local response normalisation across channels (AlexNet; Caffe's `ACROSS_CHANNELS`):
/// `b_c = a_c / (k + α/n · Σ_{c' in window} a_{c'}²)^β`, as PyTorch's
/// `LocalResponseNorm`. Composed of primitives: the channel-window sum is an average
/// pooling over the channel axis. Odd window sizes only (AlexNet uses 5).
pub struct LocalResponseNorm {
    pub size: usize,
    pub alpha: f64,
    pub beta: f64,
    pub k: f64,
}

impl Module for LocalResponseNorm {
    fn forward(&self, x: &Tensor, _ctx: &mut Ctx) -> Result<Tensor> {
        if self.size.is_multiple_of(2) || x.rank() != 4 {
            return Err(Error::BadShape {
                op: "LocalResponseNorm",
                msg: format!("needs NCHW input and an odd size (got {})", self.size),
                shape: x.shape().clone(),
            });
        }
        let d = x.dims().to_vec();
        let sq = x.sqr()?.reshape(vec![d[0], 1, d[1], d[2] * d[3]])?;
        let window = Pool2dOptions {
            kernel: (self.size, 1),
            stride: (1, 1),
            padding: (self.size / 2, 0),
        };
        // avg_pool counts the zero padding in the divisor: exactly α/n · Σ.
        let avg = sq.avg_pool2d(window)?.reshape(d)?;
        x.div(&avg.affine(self.alpha, self.k)?.powf(self.beta)?)
    }
    fn params(&self, _prefix: &str, _out: &mut Vec<NamedTensor>) {}
}
