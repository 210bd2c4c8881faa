//! Batch normalisation over dimension 1 (`[N, C]`, `[N, C, L]` or `[N, C, H, W]`).

use crate::op::Op;
use crate::storage::{BackendStorage, BatchNormParams};
use crate::{Error, Result, Tensor};

/// The normalised output and the statistics it used.
#[derive(Debug)]
pub struct BatchNormOutput {
    pub output: Tensor,
    /// Per-channel mean used (the batch's in training, the running one in evaluation).
    pub mean: Tensor,
    /// Per-channel biased variance used.
    pub var: Tensor,
    /// Number of values per channel the batch statistics were computed over (N · spatial);
    /// unbiased variance for running statistics is `var · count / (count − 1)`.
    pub count: usize,
}

impl Tensor {
    /// Training (`running = None`): normalises with batch statistics, through which the
    /// gradient flows. Evaluation (`running = Some((mean, var))`): uses the given statistics.
    pub fn batch_norm(
        &self,
        weight: &Tensor,
        bias: &Tensor,
        running: Option<(&Tensor, &Tensor)>,
        eps: f64,
    ) -> Result<BatchNormOutput> {
        self.check_float("batch_norm")?;
        let d = self.dims();
        if d.len() < 2 {
            return Err(Error::BadShape {
                op: "batch_norm",
                msg: "needs [N, C, ...] input".into(),
                shape: self.shape().clone(),
            });
        }
        let c = d[1];
        let mut per_channel = vec![weight, bias];
        if let Some((m, v)) = running {
            per_channel.extend([m, v]);
        }
        for t in &per_channel {
            self.check_same_dtype(t, "batch_norm")?;
            if t.dims() != [c] {
                return Err(Error::ShapeMismatch {
                    op: "batch_norm (per-channel parameter vs input)",
                    lhs: t.shape().clone(),
                    rhs: self.shape().clone(),
                });
            }
        }
        let params = BatchNormParams {
            n: d[0],
            c,
            spatial: d[2..].iter().product(),
            eps,
        };
        let count = params.n * params.spatial;
        if running.is_none() && count < 2 {
            return Err(Error::BadShape {
                op: "batch_norm",
                msg: "training needs more than one value per channel".into(),
                shape: self.shape().clone(),
            });
        }
        let (x, w, b) = (self.contiguous()?, weight.contiguous()?, bias.contiguous()?);
        let running = match running {
            Some((m, v)) => Some((m.contiguous()?, v.contiguous()?)),
            None => None,
        };
        let (out, mean, invstd) = {
            let rs = running.as_ref().map(|(m, v)| (m.storage(), v.storage()));
            let stats = rs.as_ref().map(|(m, v)| (&**m, &**v));
            x.storage()
                .batch_norm(&w.storage(), &b.storage(), stats, &params)?
        };
        let mean = Tensor::from_storage(mean, c, None);
        let invstd = Tensor::from_storage(invstd, c, None);
        let var = crate::no_grad(|| invstd.sqr()?.recip()?.add_scalar(-eps))?;
        let op = Op::BatchNorm {
            input: self.clone(),
            weight: weight.clone(),
            bias: bias.clone(),
            mean: mean.clone(),
            invstd,
            training: running.is_none(),
            params,
        };
        Ok(BatchNormOutput {
            output: Tensor::from_storage(out, self.shape().clone(), Some(op)),
            mean,
            var,
            count,
        })
    }
}
