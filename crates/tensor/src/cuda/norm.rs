//! Launch code for batch normalisation (kernels/norm.cu): per-channel statistics (or
//! the running ones), the affine normalisation, and the backward pass.

use super::device::CudaDevice;
use super::dtype::{launched, GpuFloat};
use crate::storage::BatchNormParams;
use crate::Result;
use cudarc::driver::{CudaSlice, PushKernelArg};

type Triple<T> = (CudaSlice<T>, CudaSlice<T>, CudaSlice<T>);

/// Returns `(out, mean, invstd)`; with `running` the statistics are the running ones.
pub(crate) fn forward<T: GpuFloat>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    w: &CudaSlice<T>,
    b: &CudaSlice<T>,
    running: Option<(&CudaSlice<T>, &CudaSlice<T>)>,
    p: &BatchNormParams,
) -> Result<Triple<T>> {
    let total = p.n * p.c * p.spatial;
    let (n, c, sp) = (p.n as i64, p.c as i64, p.spatial.max(1) as i64);
    let mut st = d.alloc_zeros::<f64>(2 * p.c)?;
    let mut mean = d.alloc_zeros::<T>(p.c)?;
    let mut invstd = d.alloc_zeros::<T>(p.c)?;
    let mut out = d.alloc::<T>(total)?;
    if total == 0 {
        return Ok((out, mean, invstd));
    }
    match running {
        None => {
            let name = format!("bn_stats_{}", T::SUFFIX);
            let f = d.func(&name)?;
            let mut l = d.stream.launch_builder(&f);
            l.arg(x)
                .arg(&n)
                .arg(&c)
                .arg(&sp)
                .arg(&p.eps)
                .arg(&mut st)
                .arg(&mut mean)
                .arg(&mut invstd);
            // SAFETY: one block per channel over contiguous [N, C, spatial] input.
            launched(&name, unsafe {
                l.launch(CudaDevice::cfg_rows(p.c, p.n * p.spatial, 2))
            })?;
        }
        Some((rm, rv)) => {
            let name = format!("bn_eval_stats_{}", T::SUFFIX);
            let f = d.func(&name)?;
            let mut l = d.stream.launch_builder(&f);
            l.arg(rm)
                .arg(rv)
                .arg(&c)
                .arg(&p.eps)
                .arg(&mut st)
                .arg(&mut mean)
                .arg(&mut invstd);
            // SAFETY: running statistics hold C elements.
            launched(&name, unsafe { l.launch(CudaDevice::cfg(p.c)) })?;
        }
    }
    {
        let name = format!("bn_apply_{}", T::SUFFIX);
        let f = d.func(&name)?;
        let t = total as i64;
        let mut l = d.stream.launch_builder(&f);
        l.arg(x)
            .arg(w)
            .arg(b)
            .arg(&st)
            .arg(&mut out)
            .arg(&t)
            .arg(&c)
            .arg(&sp);
        // SAFETY: elementwise over `total` elements; per-channel arrays hold C.
        launched(&name, unsafe { l.launch(CudaDevice::cfg(total)) })?;
    }
    Ok((out, mean, invstd))
}

/// Returns `(d_input, d_weight, d_bias)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward<T: GpuFloat>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    gy: &CudaSlice<T>,
    w: &CudaSlice<T>,
    mean: &CudaSlice<T>,
    invstd: &CudaSlice<T>,
    training: bool,
    p: &BatchNormParams,
) -> Result<Triple<T>> {
    let total = p.n * p.c * p.spatial;
    let (n, c, sp) = (p.n as i64, p.c as i64, p.spatial.max(1) as i64);
    let mut sums = d.alloc_zeros::<f64>(2 * p.c)?;
    let mut dw = d.alloc_zeros::<T>(p.c)?;
    let mut db = d.alloc_zeros::<T>(p.c)?;
    let mut dx = d.alloc::<T>(total)?;
    if total == 0 {
        return Ok((dx, dw, db));
    }
    let name = format!("bn_bwd_sums_{}", T::SUFFIX);
    let f = d.func(&name)?;
    let mut l = d.stream.launch_builder(&f);
    l.arg(x)
        .arg(gy)
        .arg(mean)
        .arg(invstd)
        .arg(&n)
        .arg(&c)
        .arg(&sp)
        .arg(&mut sums)
        .arg(&mut dw)
        .arg(&mut db);
    // SAFETY: one block per channel, as in forward.
    launched(&name, unsafe {
        l.launch(CudaDevice::cfg_rows(p.c, p.n * p.spatial, 2))
    })?;
    {
        let name = format!("bn_bwd_dx_{}", T::SUFFIX);
        let f = d.func(&name)?;
        let (t, tr) = (total as i64, training as i32);
        let mut l = d.stream.launch_builder(&f);
        l.arg(x)
            .arg(gy)
            .arg(w)
            .arg(mean)
            .arg(invstd)
            .arg(&sums)
            .arg(&mut dx)
            .arg(&t)
            .arg(&c)
            .arg(&sp)
            .arg(&tr);
        // SAFETY: elementwise over `total` elements.
        launched(&name, unsafe { l.launch(CudaDevice::cfg(total)) })?;
    }
    Ok((dx, dw, db))
}
