//! Views (reshape, permute, transpose, narrow, broadcast, squeeze) that share storage, and
//! the copying shape ops: contiguous, concatenation, stacking, splitting.

use crate::op::Op;
use crate::storage::{BackendStorage, Storage};
use crate::{Error, Layout, Result, Shape, Tensor};

impl Tensor {
    /// A contiguous tensor that starts at offset 0 of its own storage: a no-op when this one
    /// already is, else a copy. Kernels that need dense input call this first.
    pub fn contiguous(&self) -> Result<Tensor> {
        let dense = self.is_contiguous()
            && self.layout().offset() == 0
            && self.storage().len() == self.elem_count();
        if dense {
            return Ok(self.clone());
        }
        let s = self.storage().copy_strided(self.layout())?;
        Ok(Tensor::from_storage(
            s,
            self.shape().clone(),
            Some(Op::Copy(self.clone())),
        ))
    }

    /// Same elements, new shape (a view when contiguous, else a copy). One dimension may be
    /// given as `usize::MAX` to be inferred.
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let mut dims = shape.into().dims().to_vec();
        if dims.iter().filter(|&&d| d == usize::MAX).count() > 1 {
            return Err(Error::BadShape {
                op: "reshape",
                msg: format!("{dims:?} asks to infer more than one dimension"),
                shape: self.shape().clone(),
            });
        }
        if let Some(pos) = dims.iter().position(|&d| d == usize::MAX) {
            let known = Shape::new(
                dims.iter()
                    .copied()
                    .filter(|&d| d != usize::MAX)
                    .collect::<Vec<_>>(),
            )
            .checked_elem_count("reshape")?;
            if known == 0 || !self.elem_count().is_multiple_of(known) {
                return Err(Error::BadShape {
                    op: "reshape",
                    msg: format!("cannot infer a dimension of {dims:?}"),
                    shape: self.shape().clone(),
                });
            }
            dims[pos] = self.elem_count() / known;
        }
        let shape = Shape::new(dims);
        if shape.checked_elem_count("reshape")? != self.elem_count() {
            return Err(Error::ShapeMismatch {
                op: "reshape",
                lhs: self.shape().clone(),
                rhs: shape,
            });
        }
        if &shape == self.shape() {
            return Ok(self.clone());
        }
        let src = if self.is_contiguous() {
            self.clone()
        } else {
            self.contiguous()?
        };
        let layout = src
            .layout()
            .reshape(shape)
            .ok_or_else(|| Error::msg("reshape: internal layout error"))?;
        Ok(src.view(layout, Some(Op::Reshape(src.clone()))))
    }
    pub fn flatten_all(&self) -> Result<Tensor> {
        self.reshape(self.elem_count())
    }
    /// Merges dimensions `start..` into one: `[N, C, H, W] -> [N, C*H*W]` for `start = 1`.
    pub fn flatten_from(&self, start: usize) -> Result<Tensor> {
        self.shape().check_dim(start, "flatten_from")?;
        let mut d = self.dims()[..start].to_vec();
        d.push(self.dims()[start..].iter().product());
        self.reshape(d)
    }
    pub fn unsqueeze(&self, dim: usize) -> Result<Tensor> {
        if dim > self.rank() {
            return Err(Error::DimOutOfRange {
                op: "unsqueeze",
                dim,
                rank: self.rank(),
            });
        }
        let mut d = self.dims().to_vec();
        d.insert(dim, 1);
        self.reshape(d)
    }
    pub fn squeeze(&self, dim: usize) -> Result<Tensor> {
        self.shape().check_dim(dim, "squeeze")?;
        if self.dims()[dim] != 1 {
            return Err(Error::BadShape {
                op: "squeeze",
                msg: format!("dimension {dim} is not of size 1"),
                shape: self.shape().clone(),
            });
        }
        let mut d = self.dims().to_vec();
        d.remove(dim);
        self.reshape(d)
    }

    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        let layout = self.layout().permute(perm)?;
        Ok(self.view(layout, Some(Op::Permute(self.clone(), perm.to_vec()))))
    }
    pub fn transpose(&self, a: usize, b: usize) -> Result<Tensor> {
        self.shape().check_dim(a, "transpose")?;
        self.shape().check_dim(b, "transpose")?;
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }
    /// Swaps the last two dimensions (a matrix transpose, batched).
    pub fn transpose_last(&self) -> Result<Tensor> {
        if self.rank() < 2 {
            return Err(Error::BadShape {
                op: "transpose_last",
                msg: "needs rank >= 2".into(),
                shape: self.shape().clone(),
            });
        }
        self.transpose(self.rank() - 2, self.rank() - 1)
    }
    /// `len` entries of `dim` from `start`, as a view.
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<Tensor> {
        let layout = self.layout().narrow(dim, start, len)?;
        if &layout == self.layout() {
            return Ok(self.clone());
        }
        Ok(self.view(layout, Some(Op::Narrow(self.clone(), dim, start))))
    }
    /// Splits `dim` into pieces of the given sizes (views).
    pub fn split(&self, sizes: &[usize], dim: usize) -> Result<Vec<Tensor>> {
        self.shape().check_dim(dim, "split")?;
        if sizes.iter().sum::<usize>() != self.dims()[dim] {
            return Err(Error::BadShape {
                op: "split",
                msg: format!("sizes {sizes:?} do not add up to dimension {dim}"),
                shape: self.shape().clone(),
            });
        }
        let mut start = 0;
        sizes
            .iter()
            .map(|&len| {
                let t = self.narrow(dim, start, len);
                start += len;
                t
            })
            .collect()
    }
    /// `n` equal pieces along `dim`.
    pub fn chunk(&self, n: usize, dim: usize) -> Result<Vec<Tensor>> {
        self.shape().check_dim(dim, "chunk")?;
        let size = self.dims()[dim];
        if n == 0 || !size.is_multiple_of(n) {
            return Err(Error::BadShape {
                op: "chunk",
                msg: format!("dimension {dim} does not split into {n} equal parts"),
                shape: self.shape().clone(),
            });
        }
        self.split(&vec![size / n; n], dim)
    }
    /// A stride-0 view with the (NumPy-)broadcast shape.
    pub fn broadcast_as(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if &shape == self.shape() {
            return Ok(self.clone());
        }
        let layout = self.layout().broadcast_as(&shape)?;
        Ok(self.view(layout, Some(Op::Broadcast(self.clone()))))
    }

    /// Concatenates along `dim`; all other dimensions must agree.
    pub fn cat(parts: &[Tensor], dim: usize) -> Result<Tensor> {
        let first = parts
            .first()
            .ok_or_else(|| Error::msg("cat: no tensors given"))?;
        first.shape().check_dim(dim, "cat")?;
        let mut out_dims = first.dims().to_vec();
        out_dims[dim] = 0;
        for p in parts {
            first.check_same_dtype(p, "cat")?;
            let ok = p.rank() == first.rank()
                && p.dims()
                    .iter()
                    .zip(first.dims())
                    .enumerate()
                    .all(|(i, (a, b))| i == dim || a == b);
            if !ok {
                return Err(Error::ShapeMismatch {
                    op: "cat",
                    lhs: first.shape().clone(),
                    rhs: p.shape().clone(),
                });
            }
            out_dims[dim] += p.dims()[dim];
        }
        let out_shape = Shape::new(out_dims);
        let mut storage =
            Storage::full(out_shape.elem_count(), 0.0, first.dtype(), first.device())?;
        let full = Layout::contiguous(out_shape.clone());
        let mut start = 0;
        for p in parts {
            let len = p.dims()[dim];
            let src = p.storage().copy_strided(p.layout())?;
            storage.copy_into(&full.narrow(dim, start, len)?, &src)?;
            start += len;
        }
        Ok(Tensor::from_storage(
            storage,
            out_shape,
            Some(Op::Concat(parts.to_vec(), dim)),
        ))
    }
    /// Stacks equal-shaped tensors along a new dimension `dim`.
    pub fn stack(parts: &[Tensor], dim: usize) -> Result<Tensor> {
        let parts = parts
            .iter()
            .map(|p| p.unsqueeze(dim))
            .collect::<Result<Vec<_>>>()?;
        Tensor::cat(&parts, dim)
    }
}
