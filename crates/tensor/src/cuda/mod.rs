//! The CUDA backend: [`CudaStorage`] implements `BackendStorage` on NVIDIA GPUs, so a
//! tensor on `Device::Cuda(i)` runs every op of the CPU backend on the GPU and autograd
//! works unchanged.
//!
//! - cudarc with dynamic loading: nothing CUDA is needed to build, and on a machine
//!   without a driver [`is_available`] is false (no panic) and `Device::cuda_if_available`
//!   returns the CPU.
//! - Device allocations from the driver's stream-ordered pool, kept when freed and reused
//!   (the caching allocator, [`memory`]; never managed memory); large host<->device copies
//!   are staged through a reused pinned buffer ([`device`]).
//! - No hidden synchronisations: kernels report bad labels and indices through a fault
//!   word read at the next synchronisation ([`fault`]) instead of checking them on the
//!   host, and [`CudaDevice::host_syncs`] counts every wait.
//! - cuBLAS for matrix products; convolutions through cuDNN with the algorithm measured
//!   once per shape ([`cudnn`]), else im2col + cuBLAS ([`conv`]); TF32 only when asked
//!   for ([`set_allow_tf32`]).
//! - Our kernels live in `kernels/*.cu`, are compiled by NVRTC for the device's
//!   architecture at first use and cached for the process ([`kernels`]).
//! - A second stream beside the compute stream, and events ([`SideStream`], [`Event`]).
//! - [`raw`]: a tensor's device buffer and the compute stream, for code that queues its own
//!   GPU work (comm's NCCL collectives).
//!
//! crates/tensor/CUDA.md says how to build, test on a GPU machine and what was measured.

mod blas;
mod conv;
pub(crate) mod ctc;
mod cudnn;
mod cudnn_bn;
mod device;
mod dtype;
mod elementwise;
mod fault;
mod index;
pub mod kernels;
mod launch;
mod matmul;
mod memory;
pub(crate) mod norm;
pub(crate) mod optim;
mod pool;
pub(crate) mod quantize;
mod random;
pub mod raw;
mod reduce;
pub(crate) mod rnn;
pub(crate) mod select;
pub(crate) mod softmax;
pub(crate) mod sparsify;
mod storage;
mod stream;

pub use blas::{set_allow_tf32, tf32_allowed};
pub use device::{device, device_count, driver_library_present, CudaDevice};
pub(crate) use dtype::GpuType;
pub use kernels::nvrtc_available;
pub use memory::MemoryStats;
pub use storage::CudaStorage;
pub use stream::{record_compute_event, record_timed_event, synchronize, Event, SideStream};

/// Whether tensors can live on CUDA device `ordinal`: a driver is loadable, the device
/// exists, a context opens and cuBLAS loads. Never panics; the first call opens the
/// device (later calls are cheap).
pub fn is_available(ordinal: usize) -> bool {
    device(ordinal).is_ok()
}

/// The GPU tests' gate: CUDA device 0 when it is usable; else `None`, after saying why on
/// standard error. With `REQUIRE_GPU=1` (scripts/gpu-check.sh sets it) a missing GPU is
/// a failure instead, so that a GPU machine cannot skip the GPU half silently.
pub fn gpu_for_tests() -> Option<crate::Device> {
    if is_available(0) {
        return Some(crate::Device::Cuda(0));
    }
    let why = device(0).err().map(|e| e.to_string()).unwrap_or_default();
    let required = std::env::var("REQUIRE_GPU").is_ok_and(|v| v == "1");
    assert!(!required, "REQUIRE_GPU=1 but no usable CUDA device: {why}");
    eprintln!("GPU half skipped: no usable CUDA device ({why})");
    None
}

/// The devices a test that runs on both runs on: the CPU, and GPU 0 where
/// [`gpu_for_tests`] finds it.
pub fn devices_for_tests() -> Vec<crate::Device> {
    std::iter::once(crate::Device::Cpu)
        .chain(gpu_for_tests())
        .collect()
}
