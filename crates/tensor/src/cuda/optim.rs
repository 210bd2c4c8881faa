//! Launch code for the in-place SGD step (kernels/optim.cu).

use super::device::CudaDevice;
use super::dtype::{mismatch, CudaData, GpuFloat};
use super::launch::launch;
use super::CudaStorage;
use crate::storage::SgdStep;
use crate::Result;
use cudarc::driver::CudaSlice;

pub(crate) fn sgd<T: GpuFloat>(
    d: &CudaDevice,
    p: &mut CudaSlice<T>,
    g: &CudaSlice<T>,
    b: &mut CudaSlice<T>,
    n: usize,
    h: SgdStep,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let name = format!("sgd_momentum_{}", T::SUFFIX);
    let (n64, lr, m, wd) = (
        n as u64,
        T::from_f64(h.lr),
        T::from_f64(h.momentum),
        T::from_f64(h.weight_decay),
    );
    let (nesterov, first) = (h.nesterov as i32, h.first as i32);
    // SAFETY: p, g and b are dense buffers of at least n elements (checked by the caller).
    unsafe { launch!(d, &name, CudaDevice::cfg(n); p, g, b, &n64, &lr, &m, &wd, &nesterov, &first) }
}

/// [`sgd`] on storages of one float dtype: parameter and momentum buffer in place,
/// `n` elements.
pub(crate) fn run(
    p: &mut CudaStorage,
    g: &CudaStorage,
    b: &mut CudaStorage,
    n: usize,
    h: SgdStep,
) -> Result<()> {
    let d = p.dev.clone();
    match (&mut p.data, &g.data, &mut b.data) {
        (CudaData::F32(p), CudaData::F32(g), CudaData::F32(b)) => sgd(&d, p, g, b, n, h),
        (CudaData::F64(p), CudaData::F64(g), CudaData::F64(b)) => sgd(&d, p, g, b, n, h),
        _ => Err(mismatch("sgd_momentum", p, g)),
    }
}
