//! Softmax, log-softmax and cross-entropy with integer labels.

use crate::cpu::CpuStorage;
use crate::cuda::CudaStorage;
use crate::op::Op;
use crate::storage::fused::Fused;
use crate::storage::Storage;
use crate::{Error, Result, Tensor};

impl Tensor {
    fn softmax_impl(&self, dim: usize, log: bool) -> Result<Tensor> {
        self.check_float("softmax")?;
        self.shape().check_dim(dim, "softmax")?;
        let last = self.rank() - 1;
        if dim != last {
            return self
                .transpose(dim, last)?
                .softmax_impl(last, log)?
                .transpose(dim, last);
        }
        let x = self.contiguous()?;
        let cols = self.dims()[last];
        let rows = self.elem_count() / cols.max(1);
        let [s] = Storage::run(&Softmax { rows, cols, log }, &[&x.storage()])?;
        Ok(Tensor::from_storage(
            s,
            self.shape().clone(),
            Some(Op::Softmax {
                arg: x.clone(),
                log,
            }),
        ))
    }
    pub fn softmax(&self, dim: usize) -> Result<Tensor> {
        self.softmax_impl(dim, false)
    }
    pub fn log_softmax(&self, dim: usize) -> Result<Tensor> {
        self.softmax_impl(dim, true)
    }

    /// Mean cross-entropy of `[N, C]` logits against `[N]` U32 labels. Rows whose label is
    /// `ignore_index` count neither in the sum nor in the mean (PyTorch's convention).
    pub fn cross_entropy(&self, labels: &Tensor, ignore_index: Option<u32>) -> Result<Tensor> {
        self.check_float("cross_entropy logits")?;
        labels.check_u32("cross_entropy labels")?;
        let d = self.dims();
        if d.len() != 2 || labels.dims() != [d[0]] {
            return Err(Error::ShapeMismatch {
                op: "cross_entropy (logits [N, C] vs labels [N])",
                lhs: self.shape().clone(),
                rhs: labels.shape().clone(),
            });
        }
        let (x, l) = (self.contiguous()?, labels.contiguous()?);
        let kernel = CrossEntropy {
            n: d[0],
            c: d[1],
            ignore: ignore_index,
        };
        let [loss, probs, count] = Storage::run(&kernel, &[&x.storage(), &l.storage()])?;
        let probs = Tensor::from_storage(probs, self.shape().clone(), None);
        let count = Tensor::from_storage(count, (), None);
        let op = Op::CrossEntropy {
            logits: self.clone(),
            labels: l.clone(),
            probs,
            ignore_index,
            count,
        };
        Ok(Tensor::from_storage(loss, (), Some(op)))
    }
}

/// The gradient of [`Tensor::cross_entropy`]'s logits from the forward's saved `probs`
/// and `count`, the labels and the upstream gradient (one element, left on the device).
pub(crate) fn cross_entropy_grad(
    probs: &Tensor,
    labels: &Tensor,
    upstream: &Tensor,
    count: &Tensor,
    ignore: Option<u32>,
) -> Result<Tensor> {
    let (n, c) = (probs.dims()[0], probs.dims()[1]);
    let kernel = CrossEntropyBackward(CrossEntropy { n, c, ignore });
    let inputs = [
        &probs.storage(),
        &labels.storage(),
        &upstream.storage(),
        &count.storage(),
    ];
    let [grad] = Storage::run(&kernel, &inputs.map(|s| &**s))?;
    Ok(Tensor::from_storage(grad, probs.shape().clone(), None))
}

/// Softmax and the mean negative log-likelihood of `[n, c]` float logits against U32
/// labels in one pass: outputs `(loss [1], probs [n, c], count [1])`, count being the
/// labels that are not `ignore`, in the logits' dtype. A backend may report a label out
/// of range late (the GPU's next synchronisation), never by reading out of bounds.
#[derive(Clone, Copy)]
struct CrossEntropy {
    n: usize,
    c: usize,
    ignore: Option<u32>,
}
impl Fused for CrossEntropy {
    const NAME: &'static str = "cross_entropy";
    fn cpu(&self, x: &[&CpuStorage]) -> Result<Vec<CpuStorage>> {
        Ok(crate::cpu::softmax::run_cross_entropy(x[0], x[1], self.c, self.ignore)?.into())
    }
    fn cuda(&self, x: &[&CudaStorage]) -> Result<Vec<CudaStorage>> {
        let (n, c, ignore) = (self.n, self.c, self.ignore);
        Ok(crate::cuda::softmax::run_cross_entropy(x[0], x[1], n, c, ignore)?.into())
    }
}

/// The logits' gradient from inputs `[probs, labels, upstream gradient, count]`.
struct CrossEntropyBackward(CrossEntropy);
impl Fused for CrossEntropyBackward {
    const NAME: &'static str = "cross_entropy backward";
    fn cpu(&self, x: &[&CpuStorage]) -> Result<Vec<CpuStorage>> {
        let CrossEntropy { c, ignore, .. } = self.0;
        let grad =
            crate::cpu::softmax::run_cross_entropy_backward(x[0], x[1], x[2], x[3], c, ignore)?;
        Ok(vec![grad])
    }
    fn cuda(&self, x: &[&CudaStorage]) -> Result<Vec<CudaStorage>> {
        let CrossEntropy { n, c, ignore } = self.0;
        let grad =
            crate::cuda::softmax::run_cross_entropy_backward(x[0], x[1], x[2], x[3], n, c, ignore)?;
        Ok(vec![grad])
    }
}

/// The gradient of [`Tensor::softmax`] or [`Tensor::log_softmax`] along the last
/// dimension from the forward's output `y` and its gradient.
pub(crate) fn softmax_grad(y: &Tensor, grad: &Tensor, log: bool) -> Result<Tensor> {
    let cols = y.dims().last().copied().unwrap_or(1);
    let rows = y.elem_count() / cols.max(1);
    let g = grad.contiguous()?;
    let kernel = Softmax { rows, cols, log };
    let [s] = Storage::run(&kernel, &[&y.storage(), &g.storage()])?;
    Ok(Tensor::from_storage(s, y.shape().clone(), None))
}

/// Softmax (or log-softmax) over the last dimension of a contiguous `[rows, cols]` float
/// input `[x]`; with inputs `[y, grad of y]` (`y` the forward's output), its backward.
struct Softmax {
    rows: usize,
    cols: usize,
    log: bool,
}
impl Fused for Softmax {
    const NAME: &'static str = "softmax";
    fn cpu(&self, inputs: &[&CpuStorage]) -> Result<Vec<CpuStorage>> {
        Ok(vec![crate::cpu::softmax::run(inputs, self.cols, self.log)?])
    }
    fn cuda(&self, inputs: &[&CudaStorage]) -> Result<Vec<CudaStorage>> {
        let (rows, cols, log) = (self.rows, self.cols, self.log);
        Ok(vec![crate::cuda::softmax::run(inputs, rows, cols, log)?])
    }
}
