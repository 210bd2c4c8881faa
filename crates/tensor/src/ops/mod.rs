//! The differentiable operations of `Tensor`, one file per family. Each checks its
//! arguments (shapes, dtypes, ranges) and returns an error that names them, calls the
//! backend through `BackendStorage` (a fused op: through its own `storage::fused::Fused`
//! impl, in its file), and records an `Op` for autograd.

mod conv;
mod ctc;
mod custom;
mod dropout;
mod elementwise;
mod index;
mod matmul;
mod norm;
mod optim;
mod pool;
mod reduce;
mod rnn;
mod select;
mod shape;
mod softmax;

pub use conv::Conv2dOptions;
pub use custom::CustomBackward;
pub(crate) use norm::batch_norm_grad;
pub use norm::BatchNormOutput;
pub use pool::Pool2dOptions;
pub use rnn::LstmSequence;
pub(crate) use softmax::{cross_entropy_grad, softmax_grad};

use crate::{DType, Error, Result, Tensor};

impl Tensor {
    pub(crate) fn check_same_dtype(&self, other: &Tensor, op: &'static str) -> Result<()> {
        if self.dtype() != other.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                lhs: self.dtype(),
                rhs: other.dtype(),
            });
        }
        if self.device() != other.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: other.device(),
            });
        }
        Ok(())
    }
    pub(crate) fn check_float(&self, op: &'static str) -> Result<()> {
        if !self.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: self.dtype(),
                expected: "f32 or f64",
            });
        }
        Ok(())
    }
    pub(crate) fn check_u32(&self, op: &'static str) -> Result<()> {
        if self.dtype() != DType::U32 {
            return Err(Error::UnsupportedDType {
                op,
                dtype: self.dtype(),
                expected: "u32",
            });
        }
        Ok(())
    }
}
