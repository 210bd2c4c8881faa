//! Launch code for counter-based random masks (kernels/random.cu): the dropout mask is a
//! pure function of (seed, element index), identical to the CPU's.

use super::device::CudaDevice;
use super::dtype::GpuFloat;
use super::launch::launch;
use crate::Result;
use cudarc::driver::CudaSlice;

pub(crate) fn dropout_mask<T: GpuFloat>(
    d: &CudaDevice,
    n: usize,
    p: f64,
    seed: u64,
) -> Result<CudaSlice<T>> {
    d.output::<T>(n, |m| {
        let name = format!("dropout_mask_{}", T::SUFFIX);
        let keep = T::from_f64(1.0 / (1.0 - p));
        let n64 = n as u64;
        // SAFETY: writes m[0..n).
        unsafe { launch!(d, &name, CudaDevice::cfg(n); m, &n64, &seed, &p, &keep) }
    })
}
