//! The set of kernels a device backend provides.

use super::params::{BinaryOp, Conv2dParams, Pool2dParams, ReduceOp, UnaryOp};
use crate::cpu::CpuStorage;
use crate::{DType, Device, Layout, Result, Shape};

/// Kernels a device backend provides. Outputs are always contiguous.
pub trait BackendStorage: Sized {
    fn dtype(&self) -> DType;
    fn device(&self) -> Device;
    fn to_cpu(&self) -> Result<CpuStorage>;

    /// Contiguous copy of the elements of `layout`.
    fn copy_strided(&self, layout: &Layout) -> Result<Self>;
    /// Writes the elements of `src` (contiguous) into the strided view `dst_layout` of self.
    fn copy_into(&mut self, dst_layout: &Layout, src: &Self) -> Result<()>;
    fn to_dtype(&self, layout: &Layout, dtype: DType) -> Result<Self>;

    fn unary(&self, layout: &Layout, op: UnaryOp) -> Result<Self>;
    /// Both layouts already have the (broadcast) output shape.
    fn binary(&self, lhs: &Layout, rhs: &Self, rhs_l: &Layout, op: BinaryOp) -> Result<Self>;
    fn where_cond(
        &self,
        cond: &Layout,
        t: &Self,
        t_l: &Layout,
        f: &Self,
        f_l: &Layout,
    ) -> Result<Self>;
    /// Reduces `dims` to size 1 (keepdim form).
    fn reduce(&self, layout: &Layout, dims: &[usize], op: ReduceOp) -> Result<Self>;

    /// `[b, m, k] x [b, k, n]`, any strides within each matrix; `rhs` batch stride may be 0.
    fn matmul(
        &self,
        lhs: &Layout,
        rhs: &Self,
        rhs_l: &Layout,
        bmnk: (usize, usize, usize, usize),
    ) -> Result<Self>;

    fn conv2d(&self, weight: &Self, p: &Conv2dParams) -> Result<Self>;
    /// Gradient with respect to the input, from `self` = gradient of the output.
    fn conv2d_backward_input(&self, weight: &Self, p: &Conv2dParams) -> Result<Self>;
    /// Gradient with respect to the weight, from `self` = input and the output's gradient.
    fn conv2d_backward_weight(&self, grad_out: &Self, p: &Conv2dParams) -> Result<Self>;

    fn pool2d(&self, p: &Pool2dParams) -> Result<Self>;
    /// Gradient with respect to the input, from `self` = input and the output's gradient.
    fn pool2d_backward(&self, grad_out: &Self, p: &Pool2dParams) -> Result<Self>;

    /// Selects `ids` (U32, contiguous) along `dim` of a contiguous `shape`.
    fn index_select(&self, shape: &Shape, ids: &Self, dim: usize) -> Result<Self>;
    /// The transpose of `index_select`: zeros of `out_shape`, plus `self` added at `ids` along `dim`.
    fn index_add(
        &self,
        src_shape: &Shape,
        ids: &Self,
        dim: usize,
        out_shape: &Shape,
    ) -> Result<Self>;
}
