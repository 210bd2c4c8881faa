//! Tensors on the CPU (and on CUDA GPUs once issue 8 lands) with reverse-mode autograd
//! and gradient-ready hooks: the foundation of the stack.
//!
//! - [`Tensor`]: a strided view of shared storage; views (reshape, transpose, narrow,
//!   broadcast) share data, ops return new tensors.
//! - Autograd: every op records its inputs; [`Tensor::backward`] returns a [`GradStore`];
//!   [`no_grad`] turns recording off; [`Tensor::register_grad_hook`] calls back the moment
//!   a variable's gradient is final, so gradient exchange can overlap backward.
//! - Backends implement [`storage::BackendStorage`]; today that is the CPU ([`cpu`]),
//!   parallel with rayon (honouring `RAYON_NUM_THREADS`) and `gemm` for products.

mod backprop;
pub mod cpu;
pub mod cuda;
mod device;
pub mod dtype;
mod error;
mod op;
mod ops;
mod rng;
mod shape;
pub mod storage;
mod tensor;

pub use backprop::{GradHook, GradStore};
pub use device::Device;
pub use dtype::{DType, Float};
pub use error::{Error, Result};
pub use ops::{BatchNormOutput, Conv2dOptions, Pool2dOptions};
pub use rng::Rng;
pub use shape::{Layout, Shape, StridedIndex};
pub use tensor::{is_grad_enabled, no_grad, Tensor, TensorId, WithDType};
