//! Tensors on the CPU and on CUDA GPUs with reverse-mode autograd and gradient-ready
//! hooks: the foundation of the stack.
//!
//! - [`Tensor`]: a strided view of shared storage; views (reshape, transpose, narrow,
//!   broadcast) share data, ops return new tensors.
//! - Autograd: every op records its inputs; [`Tensor::backward`] returns a [`GradStore`];
//!   [`no_grad`] turns recording off; [`Tensor::register_grad_hook`] calls back the moment
//!   a variable's gradient is final, so gradient exchange can overlap backward.
//! - Backends implement [`storage::BackendStorage`]: the CPU ([`cpu`]), parallel with
//!   rayon (honouring `RAYON_NUM_THREADS`) and `gemm` for products, and CUDA ([`cuda`]:
//!   cuBLAS and NVRTC-compiled kernels, see crates/tensor/CUDA.md). `Device::cuda_if_available`
//!   picks the GPU only when a driver, a device, cuBLAS and NVRTC are really there.
//!
//! ```
//! use tensor::{Conv2dOptions, DType, Device, Rng, Tensor};
//! # fn main() -> tensor::Result<()> {
//! let mut rng = Rng::new(42);
//! let x = Tensor::randn(vec![8, 3, 32, 32], 0.0, 1.0, DType::F32, Device::Cpu, &mut rng)?;
//! let w = Tensor::randn(vec![16, 3, 3, 3], 0.0, 0.1, DType::F32, Device::Cpu, &mut rng)?.to_var();
//! let (tx, rx) = std::sync::mpsc::channel();
//! w.register_grad_hook(move |g| tx.send(g.dims().to_vec()).unwrap())?;
//!
//! let y = x.conv2d(&w, Conv2dOptions { padding: (1, 1), ..Default::default() })?;
//! let labels = Tensor::from_vec(vec![0u32, 1, 2, 3, 4, 5, 6, 7], 8, Device::Cpu)?;
//! let loss = y.mean(&[2, 3], false)?.cross_entropy(&labels, None)?;
//! let grads = loss.backward()?; // the hook fires during this call
//! assert_eq!(rx.recv().unwrap(), [16, 3, 3, 3]);
//! assert_eq!(grads.get(&w).unwrap().dims(), [16, 3, 3, 3]);
//! # Ok(())
//! # }
//! ```

mod backprop;
pub mod cpu;
pub mod cuda;
mod device;
pub mod dtype;
mod error;
mod op;
mod ops;
pub mod quantize;
mod rng;
mod shape;
pub mod sparsify;
pub mod storage;
mod tensor;

pub use backprop::{GradHook, GradStore};
pub use device::Device;
pub use dtype::{DType, Float};
pub use error::{Error, Result};
pub use ops::{BatchNormOutput, Conv2dOptions, CustomBackward, LstmSequence, Pool2dOptions};
pub use rng::Rng;
pub use shape::{Layout, Shape, StridedIndex};
pub use storage::SgdStep;
pub use tensor::{host_reads, is_grad_enabled, no_grad, Tensor, TensorId, WithDType};
