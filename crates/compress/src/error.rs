//! Errors of a gradient exchange: the collective failed, a peer sent bytes that do not
//! decode, or the method was configured or called wrongly.

use crate::codec::CodecError;

#[derive(Debug, thiserror::Error)]
pub enum CompressError {
    #[error(transparent)]
    Comm(#[from] comm::CommError),
    #[error("rank {peer} sent a malformed {method} message for parameter {param}: {source}")]
    Decode {
        method: &'static str,
        peer: usize,
        param: usize,
        source: CodecError,
    },
    #[error("method configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Usage(String),
    /// A tensor operation of a method running on tensors (allocation, a kernel, a copy).
    #[error("tensor operation: {0}")]
    Tensor(#[from] tensor::Error),
}

pub type Result<T> = std::result::Result<T, CompressError>;
