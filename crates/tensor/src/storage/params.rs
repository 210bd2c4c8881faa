//! What the kernels take besides tensors: the element-wise and reduction operations,
//! and the geometry of convolution, pooling, batch norm, a fused SGD step and a recurrent
//! cell.

use crate::Shape;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    Neg,
    Abs,
    Sign,
    Sqrt,
    Exp,
    Log,
    Tanh,
    Sigmoid,
    Relu,
    /// 1 where x > 0, else 0 (the ReLU gradient mask); zero gradient.
    Step,
    Sqr,
    Recip,
    /// `x * mul + add`.
    Affine {
        mul: f64,
        add: f64,
    },
    Powf(f64),
    Clamp {
        min: f64,
        max: f64,
    },
    /// 1 where `min <= x <= max`, else 0 (the gradient mask of `Clamp`).
    InRange {
        min: f64,
        max: f64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
    /// Comparisons produce 1 or 0 in the inputs' dtype.
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinaryOp {
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }
}

/// One in-place SGD step with momentum (see `Tensor::sgd_momentum_`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdStep {
    pub lr: f64,
    pub momentum: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
    /// The buffer is set to the step's direction instead of decayed into (torch's first step).
    pub first: bool,
}

/// A fused recurrent cell (the pointwise part of one time step; see kernels/rnn.cu).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RnnCell {
    /// Inputs `[gates [n, 4h], c_prev [n, h]]`, output `[2, n, h]` (h′ then c′).
    Lstm,
    /// Inputs `[gx [n, 3h], gh [n, 3h], h_prev [n, h]]`, output h′ `[n, h]`.
    Gru,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    /// Index of the first maximum, as U32.
    ArgMax,
}

/// Geometry of a 2-d convolution over NCHW input and OIHW weights (I = C_in / groups).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conv2dParams {
    pub batch: usize,
    pub in_channels: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_channels: usize,
    pub k_h: usize,
    pub k_w: usize,
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub dilation: (usize, usize),
    pub groups: usize,
}

impl Conv2dParams {
    pub fn out_h(&self) -> usize {
        (self.in_h + 2 * self.padding.0 - self.dilation.0 * (self.k_h - 1) - 1) / self.stride.0 + 1
    }
    pub fn out_w(&self) -> usize {
        (self.in_w + 2 * self.padding.1 - self.dilation.1 * (self.k_w - 1) - 1) / self.stride.1 + 1
    }
    pub fn out_shape(&self) -> Shape {
        Shape::new([self.batch, self.out_channels, self.out_h(), self.out_w()])
    }
    pub fn in_shape(&self) -> Shape {
        Shape::new([self.batch, self.in_channels, self.in_h, self.in_w])
    }
    pub fn weight_shape(&self) -> Shape {
        Shape::new([
            self.out_channels,
            self.in_channels / self.groups,
            self.k_h,
            self.k_w,
        ])
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    Max,
    /// Average; padded positions count in the divisor (PyTorch's `count_include_pad=True`).
    Avg,
}

/// Geometry of 2-d pooling over NCHW input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2dParams {
    pub kind: PoolKind,
    pub batch: usize,
    pub channels: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub padding: (usize, usize),
}

impl Pool2dParams {
    pub fn out_h(&self) -> usize {
        (self.in_h + 2 * self.padding.0 - self.kernel.0) / self.stride.0 + 1
    }
    pub fn out_w(&self) -> usize {
        (self.in_w + 2 * self.padding.1 - self.kernel.1) / self.stride.1 + 1
    }
    pub fn out_shape(&self) -> Shape {
        Shape::new([self.batch, self.channels, self.out_h(), self.out_w()])
    }
}

/// Batch normalisation over dimension 1 of a contiguous `[N, C, rest...]` input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNormParams {
    pub n: usize,
    pub c: usize,
    /// Product of the dimensions after C (1 for `[N, C]` input).
    pub spatial: usize,
    pub eps: f64,
}
