//! CUDA backend: NOT IMPLEMENTED YET (issue 8).
//!
//! This module marks where `CudaStorage` will live: it will implement
//! `crate::storage::BackendStorage`, exactly as `crate::cpu::CpuStorage` does, with
//! cudarc (dynamic loading, so nothing CUDA is needed to build), cuBLAS for matrix
//! products and NVRTC-compiled kernels from `kernels/*.cu`. Until then `is_available`
//! reports `false`, so `Device::cuda_if_available` returns the CPU, and any attempt to
//! place a tensor on `Device::Cuda(_)` returns `Error::CudaUnavailable`.

/// Whether CUDA device `ordinal` can be used. Always false until issue 8 lands.
pub fn is_available(_ordinal: usize) -> bool {
    false
}

/// Why `Device::Cuda` cannot be used in this build.
pub(crate) const UNAVAILABLE_REASON: &str =
    "this build has no CUDA backend yet (tracked as issue 8); use Device::Cpu or Device::cuda_if_available";
