//! Raw access to a tensor's device buffer, for libraries that queue their own GPU work on
//! it (comm's NCCL backend). Everything here runs on the device's compute stream, so work
//! queued through these views is ordered with the tensor ops before and after it, and no
//! extra synchronisation is needed.
//!
//! The views cover exactly the tensor's elements (a contiguous f32 tensor, possibly an
//! offset view into a larger buffer). Writing through [`with_f32_view_mut`] changes every
//! tensor that shares the storage, like an in-place optimizer step, and is invisible to
//! autograd: use it on gradients and buffers, not on tensors a graph still reads.

use super::device::{device, CudaDevice};
use super::dtype::CudaData;
use crate::storage::Storage;
use crate::{DType, Device, Error, Result, Tensor};
use cudarc::driver::{CudaStream, CudaView, CudaViewMut};
use std::ops::Range;
use std::sync::Arc;

fn cuda_device(op: &'static str, d: Device) -> Result<Arc<CudaDevice>> {
    match d {
        Device::Cuda(i) => device(i),
        Device::Cpu => Err(Error::msg(format!(
            "{op}: the tensor is on the CPU; this needs a CUDA tensor"
        ))),
    }
}

/// The stream every tensor op on `device` runs on.
pub fn compute_stream(device: Device) -> Result<Arc<CudaStream>> {
    Ok(cuda_device("compute_stream", device)?.stream.clone())
}

/// The element range of `t` in its buffer, after checking it is a contiguous f32 tensor.
pub(crate) fn f32_range(op: &'static str, t: &Tensor) -> Result<Range<usize>> {
    typed_range(op, t, DType::F32, "f32")
}

/// The element range of `t` in its buffer, after checking it is a contiguous tensor of
/// `dtype` (named `expected` in the error).
fn typed_range(
    op: &'static str,
    t: &Tensor,
    dtype: DType,
    expected: &'static str,
) -> Result<Range<usize>> {
    if t.dtype() != dtype {
        return Err(Error::UnsupportedDType {
            op,
            dtype: t.dtype(),
            expected,
        });
    }
    t.layout().contiguous_range().ok_or_else(|| {
        Error::msg(format!(
            "{op}: the tensor (shape {:?}) is not contiguous; call .contiguous() first",
            t.dims()
        ))
    })
}

/// Runs `f` with a read-only view of `t`'s elements (contiguous, f32, on a CUDA device)
/// and the device's compute stream.
pub fn with_f32_view<R>(
    t: &Tensor,
    f: impl FnOnce(&CudaView<'_, f32>, &Arc<CudaStream>) -> R,
) -> Result<R> {
    const OP: &str = "cuda::with_f32_view";
    let dev = cuda_device(OP, t.device())?;
    let range = f32_range(OP, t)?;
    let storage = t.storage();
    let Storage::Cuda(s) = &*storage else {
        return Err(Error::msg(format!(
            "{OP}: the tensor's storage is not on a CUDA device"
        )));
    };
    let CudaData::F32(slice) = &s.data else {
        return Err(Error::msg(format!("{OP}: the buffer is not f32")));
    };
    let view = slice.slice(range);
    Ok(f(&view, &dev.stream))
}

/// Runs `f` with a writable view of `t`'s elements (contiguous, f32, on a CUDA device)
/// and the device's compute stream. See the module comment on what writing means.
pub fn with_f32_view_mut<R>(
    t: &Tensor,
    f: impl FnOnce(&mut CudaViewMut<'_, f32>, &Arc<CudaStream>) -> R,
) -> Result<R> {
    const OP: &str = "cuda::with_f32_view_mut";
    let dev = cuda_device(OP, t.device())?;
    let range = f32_range(OP, t)?;
    let mut storage = t.storage_mut();
    let Storage::Cuda(s) = &mut *storage else {
        return Err(Error::msg(format!(
            "{OP}: the tensor's storage is not on a CUDA device"
        )));
    };
    let CudaData::F32(slice) = &mut s.data else {
        return Err(Error::msg(format!("{OP}: the buffer is not f32")));
    };
    let mut view = slice.slice_mut(range);
    Ok(f(&mut view, &dev.stream))
}

/// Runs `f` with a read-only view of `t`'s elements (contiguous, U32, on a CUDA device):
/// indices produced on the device (crate::sparsify), and collectives that move them.
pub fn with_u32_view<R>(t: &Tensor, f: impl FnOnce(&CudaView<'_, u32>) -> R) -> Result<R> {
    const OP: &str = "cuda::with_u32_view";
    let range = u32_range(OP, t)?;
    let storage = t.storage();
    let Storage::Cuda(s) = &*storage else {
        return Err(Error::msg(format!(
            "{OP}: the tensor's storage is not on a CUDA device"
        )));
    };
    let CudaData::U32(slice) = &s.data else {
        return Err(Error::msg(format!("{OP}: the buffer is not u32")));
    };
    Ok(f(&slice.slice(range)))
}

/// The element range of `t` (on a CUDA device, contiguous, U32) for a u32 view.
fn u32_range(op: &'static str, t: &Tensor) -> Result<Range<usize>> {
    cuda_device(op, t.device())?;
    typed_range(op, t, DType::U32, "u32")
}

/// Runs `f` with a writable view of `t`'s elements (contiguous, U32, on a CUDA device):
/// indices received by a collective. See the module comment on what writing means.
pub fn with_u32_view_mut<R>(
    t: &Tensor,
    f: impl FnOnce(&mut CudaViewMut<'_, u32>) -> R,
) -> Result<R> {
    const OP: &str = "cuda::with_u32_view_mut";
    let range = u32_range(OP, t)?;
    let mut storage = t.storage_mut();
    let Storage::Cuda(s) = &mut *storage else {
        return Err(Error::msg(format!(
            "{OP}: the tensor's storage is not on a CUDA device"
        )));
    };
    let CudaData::U32(slice) = &mut s.data else {
        return Err(Error::msg(format!("{OP}: the buffer is not u32")));
    };
    Ok(f(&mut slice.slice_mut(range)))
}
