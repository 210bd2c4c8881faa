//! Batch normalisation over dimension 1 (`[N, C]`, `[N, C, L]` or `[N, C, H, W]`).

use crate::cpu::CpuStorage;
use crate::cuda::CudaStorage;
use crate::op::Op;
use crate::storage::fused::Fused;
use crate::storage::{BatchNormParams, Storage};
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
        let [out, mean, invstd] = {
            let rs = running.as_ref().map(|(m, v)| (m.storage(), v.storage()));
            let stats = rs.as_ref().map(|(m, v)| (&**m, &**v));
            let (xs, ws, bs) = (x.storage(), w.storage(), b.storage());
            let mut inputs = vec![&*xs, &*ws, &*bs];
            inputs.extend(stats.into_iter().flat_map(|(m, v)| [m, v]));
            Storage::run(&BatchNorm(params), &inputs)?
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

/// The gradients of [`Tensor::batch_norm`]'s input, weight and bias from the output's
/// `grad` and the forward's saved `mean` and `invstd` (`training`: batch statistics, so
/// the input's gradient flows through them too).
pub(crate) fn batch_norm_grad(
    input: &Tensor,
    grad: &Tensor,
    weight: &Tensor,
    (mean, invstd): (&Tensor, &Tensor),
    training: bool,
    params: BatchNormParams,
) -> Result<[Tensor; 3]> {
    let (x, g, w) = (
        input.contiguous()?,
        grad.contiguous()?,
        weight.contiguous()?,
    );
    let s = [
        x.storage(),
        g.storage(),
        w.storage(),
        mean.storage(),
        invstd.storage(),
    ];
    let kernel = BatchNormBackward { params, training };
    let [dx, dw, db] = Storage::run(&kernel, &s.each_ref().map(|s| &**s))?;
    Ok([
        Tensor::from_storage(dx, input.shape().clone(), None),
        Tensor::from_storage(dw, weight.shape().clone(), None),
        Tensor::from_storage(db, weight.shape().clone(), None),
    ])
}

/// Batch normalisation over dimension 1 of contiguous input: inputs `[x, weight, bias]`
/// normalise with the batch statistics (training), `[x, weight, bias, running mean,
/// running var]` with those (evaluation); outputs `[out, mean, invstd]`.
struct BatchNorm(BatchNormParams);
impl Fused for BatchNorm {
    const NAME: &'static str = "batch_norm";
    fn cpu(&self, inputs: &[&CpuStorage]) -> Result<Vec<CpuStorage>> {
        Ok(crate::cpu::norm::run(inputs, &self.0)?.into())
    }
    fn cuda(&self, inputs: &[&CudaStorage]) -> Result<Vec<CudaStorage>> {
        Ok(crate::cuda::norm::run(inputs, &self.0)?.into())
    }
}

/// Inputs `[x, grad of out, weight, mean, invstd]`; outputs `[d x, d weight, d bias]`.
struct BatchNormBackward {
    params: BatchNormParams,
    training: bool,
}
impl Fused for BatchNormBackward {
    const NAME: &'static str = "batch_norm backward";
    fn cpu(&self, inputs: &[&CpuStorage]) -> Result<Vec<CpuStorage>> {
        Ok(crate::cpu::norm::run_backward(inputs, self.training, &self.params)?.into())
    }
    fn cuda(&self, inputs: &[&CudaStorage]) -> Result<Vec<CudaStorage>> {
        Ok(crate::cuda::norm::run_backward(inputs, self.training, &self.params)?.into())
    }
}
