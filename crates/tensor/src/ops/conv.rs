//! 2-d convolution over NCHW input and OIHW weights.

use crate::op::Op;
use crate::storage::{BackendStorage, Conv2dParams};
use crate::{Error, Result, Tensor};

/// Stride, padding, dilation (each (h, w)) and groups, as in `torch.nn.functional.conv2d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dOptions {
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub dilation: (usize, usize),
    pub groups: usize,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Conv2dOptions {
            stride: (1, 1),
            padding: (0, 0),
            dilation: (1, 1),
            groups: 1,
        }
    }
}

impl Tensor {
    /// `self`: `[N, C_in, H, W]`; `weight`: `[C_out, C_in / groups, kH, kW]`. No bias: add it
    /// with a broadcast `[1, C_out, 1, 1]` tensor.
    pub fn conv2d(&self, weight: &Tensor, o: Conv2dOptions) -> Result<Tensor> {
        self.check_float("conv2d")?;
        self.check_same_dtype(weight, "conv2d")?;
        let (x, w) = (self.dims(), weight.dims());
        if x.len() != 4 || w.len() != 4 {
            return Err(Error::ShapeMismatch {
                op: "conv2d (input must be NCHW, weight OIHW)",
                lhs: self.shape().clone(),
                rhs: weight.shape().clone(),
            });
        }
        let bad = |msg: String| {
            Err(Error::BadShape {
                op: "conv2d",
                msg,
                shape: self.shape().clone(),
            })
        };
        if o.groups == 0
            || o.stride.0 == 0
            || o.stride.1 == 0
            || o.dilation.0 == 0
            || o.dilation.1 == 0
        {
            return bad(format!(
                "groups, stride and dilation must be positive, got {o:?}"
            ));
        }
        // Only the batch may be empty (PyTorch's rule too): a convolution with no input or
        // output channels, or an input plane with no pixels, has no meaningful output, and
        // the kernels split their buffers per image and channel.
        if x[1] == 0 || w[0] == 0 || x[2] == 0 || x[3] == 0 {
            return bad(format!(
                "input channels, output channels (weight {}) and the input's height and \
                 width must be non-zero; only the batch may be empty",
                weight.shape()
            ));
        }
        if x[1] != w[1] * o.groups || w[0] % o.groups != 0 {
            return bad(format!(
                "weight {} with groups={} needs {} input channels and output channels divisible by groups",
                weight.shape(),
                o.groups,
                w[1] * o.groups
            ));
        }
        let reach = |k: usize, d: usize| d * (k - 1) + 1;
        if w[2] == 0
            || w[3] == 0
            || x[2] + 2 * o.padding.0 < reach(w[2], o.dilation.0)
            || x[3] + 2 * o.padding.1 < reach(w[3], o.dilation.1)
        {
            return bad(format!(
                "kernel {}x{} (dilation {:?}) does not fit the padded input",
                w[2], w[3], o.dilation
            ));
        }
        let params = Conv2dParams {
            batch: x[0],
            in_channels: x[1],
            in_h: x[2],
            in_w: x[3],
            out_channels: w[0],
            k_h: w[2],
            k_w: w[3],
            stride: o.stride,
            padding: o.padding,
            dilation: o.dilation,
            groups: o.groups,
        };
        let (xc, wc) = (self.contiguous()?, weight.contiguous()?);
        let s = xc.storage().conv2d(&wc.storage(), &params)?;
        Ok(Tensor::from_storage(
            s,
            params.out_shape(),
            Some(Op::Conv2d {
                input: self.clone(),
                weight: weight.clone(),
                params,
            }),
        ))
    }
}
