//! Gathers along a dimension (`index_select`, `embedding`) and the scatter-add that is
//! their gradient.

use crate::op::Op;
use crate::storage::BackendStorage;
use crate::{Error, Result, Shape, Tensor};

impl Tensor {
    /// Rows (entries of `dim`) picked by the 1-d U32 tensor `ids`, in order, repeats allowed.
    pub fn index_select(&self, ids: &Tensor, dim: usize) -> Result<Tensor> {
        ids.check_u32("index_select indices")?;
        self.shape().check_dim(dim, "index_select")?;
        if ids.rank() != 1 {
            return Err(Error::BadShape {
                op: "index_select",
                msg: "indices must be 1-d".into(),
                shape: ids.shape().clone(),
            });
        }
        let (x, i) = (self.contiguous()?, ids.contiguous()?);
        let s = x.storage().index_select(self.shape(), &i.storage(), dim)?;
        let mut out = self.dims().to_vec();
        out[dim] = ids.elem_count();
        Ok(Tensor::from_storage(
            s,
            out,
            Some(Op::IndexSelect {
                arg: self.clone(),
                ids: i.clone(),
                dim,
            }),
        ))
    }

    /// Embedding lookup: `self` is the `[vocab, dim]` table, `ids` any U32 shape; the result
    /// has shape `ids.shape + [dim]`.
    pub fn embedding(&self, ids: &Tensor) -> Result<Tensor> {
        if self.rank() != 2 {
            return Err(Error::BadShape {
                op: "embedding",
                msg: "table must be [vocab, dim]".into(),
                shape: self.shape().clone(),
            });
        }
        let mut out = ids.dims().to_vec();
        out.push(self.dims()[1]);
        self.index_select(&ids.flatten_all()?, 0)?.reshape(out)
    }

    /// Scatter-add: zeros of `out_shape`, with the entries of `self` along `dim` added at
    /// `ids` (repeats accumulate). The gradient of `index_select`; not itself recorded.
    pub fn index_add_into(&self, ids: &Tensor, dim: usize, out_shape: &Shape) -> Result<Tensor> {
        ids.check_u32("index_add indices")?;
        self.check_float("index_add")?;
        self.shape().check_dim(dim, "index_add")?;
        let agrees = out_shape.rank() == self.rank()
            && self.dims()[dim] == ids.elem_count()
            && self
                .dims()
                .iter()
                .zip(out_shape.dims())
                .enumerate()
                .all(|(i, (a, b))| i == dim || a == b);
        if !agrees {
            return Err(Error::ShapeMismatch {
                op: "index_add (source vs output)",
                lhs: self.shape().clone(),
                rhs: out_shape.clone(),
            });
        }
        let (x, i) = (self.contiguous()?, ids.contiguous()?);
        let s = x
            .storage()
            .index_add(self.shape(), &i.storage(), dim, out_shape)?;
        Ok(Tensor::from_storage(s, out_shape.clone(), None))
    }
}
