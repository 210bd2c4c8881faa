//! Launch code for the in-place SGD step (kernels/optim.cu).

use super::device::CudaDevice;
use super::dtype::{launched, GpuFloat};
use crate::storage::SgdStep;
use crate::Result;
use cudarc::driver::{CudaSlice, PushKernelArg};

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
    let f = d.func(&name)?;
    let (n64, lr, m, wd) = (
        n as u64,
        T::from_f64(h.lr),
        T::from_f64(h.momentum),
        T::from_f64(h.weight_decay),
    );
    let (nesterov, first) = (h.nesterov as i32, h.first as i32);
    let mut l = d.stream.launch_builder(&f);
    l.arg(p)
        .arg(g)
        .arg(b)
        .arg(&n64)
        .arg(&lr)
        .arg(&m)
        .arg(&wd)
        .arg(&nesterov)
        .arg(&first);
    // SAFETY: p, g and b are dense buffers of at least n elements (checked by the caller).
    launched(&name, unsafe { l.launch(CudaDevice::cfg(n)) })
}
