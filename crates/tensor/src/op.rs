//! The record each computed tensor keeps of the op that produced it. `inputs()` lists the
//! differentiable inputs only (labels, indices and conditions are carried but never get
//! gradients); `backprop.rs` returns one gradient per entry of `inputs()`, in order.

use crate::storage::{BatchNormParams, BinaryOp, Conv2dParams, Pool2dParams, UnaryOp};
use crate::Tensor;

pub(crate) enum Op {
    Unary(Tensor, UnaryOp),
    Binary(Tensor, Tensor, BinaryOp),
    /// (condition, on_true, on_false); the condition is not differentiable.
    Where(Tensor, Tensor, Tensor),
    /// Sum over dims, keepdim shape.
    Sum(Tensor),
    /// Max or min over dims, keepdim shape; the gradient is split evenly among the
    /// extremal elements.
    Extremum(Tensor),
    Matmul(Tensor, Tensor),
    Reshape(Tensor),
    Permute(Tensor, Vec<usize>),
    Narrow(Tensor, usize, usize),
    Broadcast(Tensor),
    Copy(Tensor),
    ToDType(Tensor),
    /// A copy to another device; the gradient goes back to the source's device.
    ToDevice(Tensor),
    Conv2d {
        input: Tensor,
        weight: Tensor,
        params: Conv2dParams,
    },
    Pool2d {
        input: Tensor,
        params: Pool2dParams,
    },
    BatchNorm {
        input: Tensor,
        weight: Tensor,
        bias: Tensor,
        mean: Tensor,
        invstd: Tensor,
        training: bool,
        params: BatchNormParams,
    },
    /// Over the last dimension of a contiguous input.
    Softmax {
        arg: Tensor,
        log: bool,
    },
    CrossEntropy {
        logits: Tensor,
        labels: Tensor,
        probs: Tensor,
        ignore_index: Option<u32>,
        /// How many labels were not ignored (one element, on the logits' device, so the
        /// backward needs no read to the host).
        count: Tensor,
    },
    IndexSelect {
        arg: Tensor,
        ids: Tensor,
        dim: usize,
    },
    Concat(Vec<Tensor>, usize),
    /// An op defined outside this crate (e.g. nn's CTC loss): its backward maps the
    /// output's gradient to one optional gradient per input.
    Custom {
        inputs: Vec<Tensor>,
        backward: crate::CustomBackward,
    },
}

impl Op {
    pub(crate) fn inputs(&self) -> Vec<&Tensor> {
        match self {
            Op::Unary(a, _)
            | Op::Sum(a)
            | Op::Extremum(a)
            | Op::Reshape(a)
            | Op::Permute(a, _)
            | Op::Narrow(a, _, _)
            | Op::Broadcast(a)
            | Op::Copy(a)
            | Op::ToDType(a)
            | Op::ToDevice(a)
            | Op::Pool2d { input: a, .. }
            | Op::Softmax { arg: a, .. }
            | Op::CrossEntropy { logits: a, .. }
            | Op::IndexSelect { arg: a, .. } => vec![a],
            Op::Binary(a, b, _)
            | Op::Matmul(a, b)
            | Op::Conv2d {
                input: a,
                weight: b,
                ..
            } => vec![a, b],
            Op::Where(_, t, f) => vec![t, f],
            Op::BatchNorm {
                input,
                weight,
                bias,
                ..
            } => vec![input, weight, bias],
            Op::Concat(xs, _) | Op::Custom { inputs: xs, .. } => xs.iter().collect(),
        }
    }
}
