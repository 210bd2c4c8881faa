//! The crate's error type. Every message names the operation and the shapes or values
//! involved, so that a user who passes a wrong shape learns which call and which shapes.

use crate::{DType, Shape};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{op}: shape mismatch between {lhs} and {rhs}")]
    ShapeMismatch {
        op: &'static str,
        lhs: Shape,
        rhs: Shape,
    },

    #[error("{op}: cannot broadcast {lhs} with {rhs}")]
    BroadcastIncompatible {
        op: &'static str,
        lhs: Shape,
        rhs: Shape,
    },

    #[error("{op}: {msg} (got shape {shape})")]
    BadShape {
        op: &'static str,
        msg: String,
        shape: Shape,
    },

    #[error("{op}: dtype mismatch, {lhs:?} vs {rhs:?}")]
    DTypeMismatch {
        op: &'static str,
        lhs: DType,
        rhs: DType,
    },

    #[error("{op}: dtype {dtype:?} is not supported (expected {expected})")]
    UnsupportedDType {
        op: &'static str,
        dtype: DType,
        expected: &'static str,
    },

    #[error("{op}: dimension {dim} is out of range for a tensor of rank {rank}")]
    DimOutOfRange {
        op: &'static str,
        dim: usize,
        rank: usize,
    },

    #[error("{op}: index {index} is out of range for size {size}")]
    IndexOutOfRange {
        op: &'static str,
        index: usize,
        size: usize,
    },

    #[error("{op}: {len} elements given for shape {shape} ({expected} expected)")]
    ElementCount {
        op: &'static str,
        len: usize,
        shape: Shape,
        expected: usize,
    },

    #[error("{op}: tensors live on different devices ({lhs} and {rhs})")]
    DeviceMismatch {
        op: &'static str,
        lhs: crate::Device,
        rhs: crate::Device,
    },

    #[error("CUDA device {0} requested, but the CUDA backend is not available: {1}")]
    CudaUnavailable(usize, String),

    #[error("{0}")]
    Msg(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn msg(m: impl Into<String>) -> Self {
        Error::Msg(m.into())
    }
}
