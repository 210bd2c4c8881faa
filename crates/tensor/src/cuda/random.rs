//! Launch code for counter-based random masks (kernels/random.cu): the dropout mask is a
//! pure function of (seed, element index), identical to the CPU's.

use super::device::CudaDevice;
use super::dtype::{launched, GpuFloat};
use crate::Result;
use cudarc::driver::{CudaSlice, PushKernelArg};

pub(crate) fn dropout_mask<T: GpuFloat>(
    d: &CudaDevice,
    n: usize,
    p: f64,
    seed: u64,
) -> Result<CudaSlice<T>> {
    let mut m = d.alloc::<T>(n)?;
    if n == 0 {
        return Ok(m);
    }
    let name = format!("dropout_mask_{}", T::SUFFIX);
    let f = d.func(&name)?;
    let keep = T::from_f64(1.0 / (1.0 - p));
    let n64 = n as u64;
    let mut b = d.stream.launch_builder(&f);
    b.arg(&mut m).arg(&n64).arg(&seed).arg(&p).arg(&keep);
    // SAFETY: writes m[0..n).
    launched(&name, unsafe { b.launch(CudaDevice::cfg(n)) })?;
    Ok(m)
}
