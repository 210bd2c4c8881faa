//! Reductions: sum, mean, max, min and argmax over axes or over everything.

use crate::op::Op;
use crate::storage::{BackendStorage, ReduceOp};
use crate::{Error, Result, Shape, Tensor};

impl Tensor {
    fn check_dims(&self, dims: &[usize], op: &'static str) -> Result<Vec<usize>> {
        let mut d = dims.to_vec();
        for &x in &d {
            self.shape().check_dim(x, op)?;
        }
        d.sort_unstable();
        d.dedup();
        Ok(d)
    }
    fn squeeze_dims(&self, t: Tensor, dims: &[usize], keepdim: bool) -> Result<Tensor> {
        if keepdim {
            return Ok(t);
        }
        let kept: Vec<usize> = self
            .dims()
            .iter()
            .enumerate()
            .filter(|(i, _)| !dims.contains(i))
            .map(|(_, &d)| d)
            .collect();
        t.reshape(kept)
    }

    /// Sum over `dims`; `keepdim` keeps them as size 1.
    pub fn sum(&self, dims: &[usize], keepdim: bool) -> Result<Tensor> {
        self.check_float("sum")?;
        let dims = self.check_dims(dims, "sum")?;
        let s = self.storage().reduce(self.layout(), &dims, ReduceOp::Sum)?;
        let out = Tensor::from_storage(
            s,
            keep_shape(self.shape(), &dims),
            Some(Op::Sum(self.clone())),
        );
        self.squeeze_dims(out, &dims, keepdim)
    }
    /// Sum of all elements, as a 0-d tensor.
    pub fn sum_all(&self) -> Result<Tensor> {
        let all: Vec<usize> = (0..self.rank()).collect();
        self.sum(&all, false)
    }
    pub fn mean(&self, dims: &[usize], keepdim: bool) -> Result<Tensor> {
        let n: usize = self
            .check_dims(dims, "mean")?
            .iter()
            .map(|&d| self.dims()[d])
            .product();
        self.sum(dims, keepdim)?.scale(1.0 / n.max(1) as f64)
    }
    pub fn mean_all(&self) -> Result<Tensor> {
        self.sum_all()?.scale(1.0 / self.elem_count().max(1) as f64)
    }
    fn extremum(
        &self,
        dims: &[usize],
        keepdim: bool,
        op: ReduceOp,
        name: &'static str,
    ) -> Result<Tensor> {
        self.check_float(name)?;
        let dims = self.check_dims(dims, name)?;
        // The extremum of no values is undefined (PyTorch refuses it too); an empty tensor
        // reduced over non-empty axes is simply an empty result.
        if let Some(&d) = dims.iter().find(|&&d| self.dims()[d] == 0) {
            return Err(Error::BadShape {
                op: name,
                msg: format!("cannot reduce over dimension {d}, which has size 0"),
                shape: self.shape().clone(),
            });
        }
        let s = self.storage().reduce(self.layout(), &dims, op)?;
        let out = Tensor::from_storage(
            s,
            keep_shape(self.shape(), &dims),
            Some(Op::Extremum(self.clone())),
        );
        self.squeeze_dims(out, &dims, keepdim)
    }
    /// Maximum over `dims`. The gradient is split evenly among the elements equal to the
    /// maximum (PyTorch's `amax`): `max([a, a])` sends half to each.
    pub fn max(&self, dims: &[usize], keepdim: bool) -> Result<Tensor> {
        self.extremum(dims, keepdim, ReduceOp::Max, "max")
    }
    /// Minimum over `dims`; ties share the gradient as in [`Tensor::max`].
    pub fn min(&self, dims: &[usize], keepdim: bool) -> Result<Tensor> {
        self.extremum(dims, keepdim, ReduceOp::Min, "min")
    }
    /// Index (U32) of the first maximum along `dim`.
    pub fn argmax(&self, dim: usize, keepdim: bool) -> Result<Tensor> {
        self.check_float("argmax")?;
        self.shape().check_dim(dim, "argmax")?;
        if self.dims()[dim] == 0 || self.dims()[dim] > u32::MAX as usize {
            return Err(Error::BadShape {
                op: "argmax",
                msg: format!(
                    "cannot take the arg-max over dimension {dim} of size {} (indices are u32: 1 to 2^32 − 1 entries)",
                    self.dims()[dim]
                ),
                shape: self.shape().clone(),
            });
        }
        let s = self
            .storage()
            .reduce(self.layout(), &[dim], ReduceOp::ArgMax)?;
        let out = Tensor::from_storage(s, keep_shape(self.shape(), &[dim]), None);
        self.squeeze_dims(out, &[dim], keepdim)
    }

    /// Sums a broadcast result back to `shape` (the gradient of broadcasting).
    pub fn sum_to(&self, shape: &Shape) -> Result<Tensor> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        let lead =
            self.rank()
                .checked_sub(shape.rank())
                .ok_or_else(|| Error::BroadcastIncompatible {
                    op: "sum_to",
                    lhs: self.shape().clone(),
                    rhs: shape.clone(),
                })?;
        let mut dims: Vec<usize> = (0..lead).collect();
        for (i, &d) in shape.dims().iter().enumerate() {
            if d == 1 && self.dims()[lead + i] != 1 {
                dims.push(lead + i);
            }
        }
        self.sum(&dims, true)?.reshape(shape.clone())
    }
}

fn keep_shape(shape: &Shape, dims: &[usize]) -> Shape {
    let mut d = shape.dims().to_vec();
    for &x in dims {
        d[x] = 1;
    }
    Shape::new(d)
}
