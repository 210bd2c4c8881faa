//! CUDA backend, first part (issue 8 is open): cudarc with dynamic loading (nothing CUDA
//! is needed to build or to run on a CPU machine), our kernels in `kernels/*.cu` compiled
//! by NVRTC for the device's architecture at first use and cached per process, cuBLAS
//! for matrix products, and [`Gpu`], a device handle that runs them on host buffers.
//!
//! Not yet: `CudaStorage` behind the `BackendStorage` trait, so tensors cannot live on
//! the GPU: `Device::cuda_if_available` still returns the CPU and `Device::Cuda(_)` is
//! an error (`UNAVAILABLE_REASON`). What exists is tested against the CPU on a GPU
//! (`tests/cuda.rs`, run by `scripts/gpu-check.sh`).

mod gpu;
pub mod kernels;

pub use gpu::{Gpu, GpuError};

/// Whether a CUDA driver and device `ordinal` are present. Never panics: cudarc's
/// dynamic loading panics when `libcuda` is missing, which is caught here.
pub fn driver_present(ordinal: usize) -> bool {
    std::panic::catch_unwind(|| cudarc::driver::CudaContext::new(ordinal).is_ok()).unwrap_or(false)
}

/// Whether tensors can be placed on CUDA device `ordinal`: not until `CudaStorage`
/// exists, whatever the hardware.
pub fn is_available(_ordinal: usize) -> bool {
    false
}

/// Why `Device::Cuda` cannot be used in this build.
pub(crate) const UNAVAILABLE_REASON: &str =
    "tensors cannot live on CUDA yet (the CUDA kernels exist, CudaStorage is issue 8's next part); use Device::Cpu or Device::cuda_if_available";
