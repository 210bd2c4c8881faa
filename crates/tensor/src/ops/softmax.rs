//! Softmax, log-softmax and cross-entropy with integer labels.

use crate::op::Op;
use crate::storage::BackendStorage;
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
        let s = x.storage().softmax_last(rows, cols, log)?;
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
        let (loss, probs, count) =
            x.storage()
                .cross_entropy(&l.storage(), d[0], d[1], ignore_index)?;
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
