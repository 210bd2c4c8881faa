//! Wire codecs shared by the methods. Every encoder has a decoder that returns
//! [`CodecError`] on malformed or truncated input: a peer's bytes never cause a panic or
//! an allocation larger than the tensor the receiver expects.
//!
//! - [`zero_run`]: DGC's format, 32-bit values each preceded by a 16-bit count of the
//!   zeros before it (with an escape for runs longer than 65,534).
//! - [`golomb`]: SBC's positions, gaps Golomb–Rice coded with the paper's optimal b*.
//! - [`elias`]: Elias ω (recursive) integer code, and QSGD's stream of norm, gaps, signs
//!   and levels.
//!
//! The other wire forms live where their collectives are: TopKAllReduce's and gTop-k's
//! sparse vectors are `comm::SparseVec::encode` (count, indices, values), and the dense
//! method's f16 wire is `comm::Communicator::allreduce_f16`.

mod bits;
pub mod elias;
pub mod golomb;
pub mod zero_run;

pub use bits::{BitReader, BitWriter};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("truncated: {0}")]
    Truncated(&'static str),
    #[error("invalid: {0}")]
    Invalid(String),
}

pub type Result<T> = std::result::Result<T, CodecError>;
