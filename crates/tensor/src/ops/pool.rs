//! Max and average pooling over NCHW input.

use crate::op::Op;
use crate::storage::{BackendStorage, Pool2dParams, PoolKind};
use crate::{Error, Result, Tensor};

/// Kernel, stride and padding, each (h, w), as in `torch.nn.functional.max_pool2d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2dOptions {
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub padding: (usize, usize),
}

impl Pool2dOptions {
    /// A square window whose stride equals its size, without padding.
    pub fn square(k: usize) -> Self {
        Pool2dOptions {
            kernel: (k, k),
            stride: (k, k),
            padding: (0, 0),
        }
    }
}

impl Tensor {
    fn pool2d(&self, kind: PoolKind, o: Pool2dOptions, name: &'static str) -> Result<Tensor> {
        self.check_float(name)?;
        let x = self.dims();
        let bad = |msg: String| {
            Err(Error::BadShape {
                op: name,
                msg,
                shape: self.shape().clone(),
            })
        };
        if x.len() != 4 {
            return bad("input must be NCHW".into());
        }
        // Only the batch may be empty, as in PyTorch: an empty plane under a padded window
        // would have outputs with no input to take them from (or give their gradient to).
        if x[1] == 0 || x[2] == 0 || x[3] == 0 {
            return bad(
                "channels, height and width must be non-zero; only the batch may be empty".into(),
            );
        }
        if o.kernel.0 == 0 || o.kernel.1 == 0 || o.stride.0 == 0 || o.stride.1 == 0 {
            return bad(format!("kernel and stride must be positive, got {o:?}"));
        }
        if 2 * o.padding.0 > o.kernel.0 || 2 * o.padding.1 > o.kernel.1 {
            return bad(format!(
                "padding {:?} must be at most half the kernel {:?}",
                o.padding, o.kernel
            ));
        }
        if x[2] + 2 * o.padding.0 < o.kernel.0 || x[3] + 2 * o.padding.1 < o.kernel.1 {
            return bad(format!(
                "kernel {:?} is larger than the padded input",
                o.kernel
            ));
        }
        let params = Pool2dParams {
            kind,
            batch: x[0],
            channels: x[1],
            in_h: x[2],
            in_w: x[3],
            kernel: o.kernel,
            stride: o.stride,
            padding: o.padding,
        };
        let xc = self.contiguous()?;
        let s = xc.storage().pool2d(&params)?;
        Ok(Tensor::from_storage(
            s,
            params.out_shape(),
            Some(Op::Pool2d {
                input: self.clone(),
                params,
            }),
        ))
    }
    pub fn max_pool2d(&self, o: Pool2dOptions) -> Result<Tensor> {
        self.pool2d(PoolKind::Max, o, "max_pool2d")
    }
    /// Average pooling; padded positions count in the divisor (`count_include_pad=True`).
    pub fn avg_pool2d(&self, o: Pool2dOptions) -> Result<Tensor> {
        self.pool2d(PoolKind::Avg, o, "avg_pool2d")
    }
}
