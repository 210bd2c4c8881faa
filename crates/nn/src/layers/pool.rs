//! Pooling layers.

use crate::module::{Ctx, Module, NamedTensor};
use tensor::{Error, Pool2dOptions, Result, Tensor};

pub struct MaxPool2d(pub Pool2dOptions);
pub struct AvgPool2d(pub Pool2dOptions);

impl Module for MaxPool2d {
    fn forward(&self, x: &Tensor, _ctx: &mut Ctx) -> Result<Tensor> {
        x.max_pool2d(self.0)
    }
    fn params(&self, _prefix: &str, _out: &mut Vec<NamedTensor>) {}
}

impl Module for AvgPool2d {
    fn forward(&self, x: &Tensor, _ctx: &mut Ctx) -> Result<Tensor> {
        x.avg_pool2d(self.0)
    }
    fn params(&self, _prefix: &str, _out: &mut Vec<NamedTensor>) {}
}

/// Average pooling to a fixed output size. Supported where the input size is a multiple
/// of the output size (every model here: global pooling, or identity); otherwise an error
/// rather than PyTorch's overlapping windows.
pub struct AdaptiveAvgPool2d(pub (usize, usize));

impl Module for AdaptiveAvgPool2d {
    fn forward(&self, x: &Tensor, _ctx: &mut Ctx) -> Result<Tensor> {
        let (oh, ow) = self.0;
        let d = x.dims();
        if d.len() != 4
            || oh == 0
            || ow == 0
            || !d[2].is_multiple_of(oh)
            || !d[3].is_multiple_of(ow)
        {
            return Err(Error::BadShape {
                op: "AdaptiveAvgPool2d",
                msg: format!(
                    "input size must be a multiple of the output size {:?}",
                    self.0
                ),
                shape: x.shape().clone(),
            });
        }
        if (oh, ow) == (1, 1) {
            return x.mean(&[2, 3], true);
        }
        let k = (d[2] / oh, d[3] / ow);
        x.avg_pool2d(Pool2dOptions {
            kernel: k,
            stride: k,
            padding: (0, 0),
        })
    }
    fn params(&self, _prefix: &str, _out: &mut Vec<NamedTensor>) {}
}
