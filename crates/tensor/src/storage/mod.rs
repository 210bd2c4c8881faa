//! The backend interface. `BackendStorage` is the set of kernels a device must provide;
//! `CpuStorage` and `CudaStorage` implement it, and `Storage` dispatches to whichever
//! holds the data, so autograd and the tensor API never look at which device they run on.
//!
//! Kernels receive the layout of every strided input. The heavy kernels (matmul aside)
//! take contiguous inputs: the tensor layer makes them contiguous first, which keeps each
//! backend's kernels simple and fast.
//!
//! Here: the kernels' parameter types (`params.rs`), the backend trait (`backend.rs`),
//! the dispatching `Storage` (`dispatch.rs`), and the interface of the fused ops that
//! carry their own CPU and CUDA forward instead of widening the trait (`fused.rs`).

mod backend;
mod dispatch;
pub(crate) mod fused;
mod params;

pub use backend::BackendStorage;
pub use dispatch::Storage;
pub use params::{
    BatchNormParams, BinaryOp, Conv2dParams, Pool2dParams, PoolKind, ReduceOp, RnnCell, SgdStep,
    UnaryOp,
};
