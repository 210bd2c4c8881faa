//! Launch code for batch normalisation (kernels/norm.cu): per-channel statistics (or
//! the running ones), the affine normalisation, and the backward pass. In training mode
//! cuDNN runs both passes where it is loaded (cudnn_bn.rs); these kernels run the rest.

use super::cudnn_bn;
use super::device::CudaDevice;
use super::dtype::{slices, unsupported, GpuFloat};
use super::launch::launch;
use super::CudaStorage;
use crate::storage::BackendStorage;
use crate::storage::BatchNormParams;
use crate::DType;
use crate::Result;
use cudarc::driver::CudaSlice;
use std::sync::Arc;

pub(crate) type Triple<T> = (CudaSlice<T>, CudaSlice<T>, CudaSlice<T>);

/// Returns `(out, mean, invstd)`; with `running` the statistics are the running ones.
pub(crate) fn forward<T: GpuFloat>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    w: &CudaSlice<T>,
    b: &CudaSlice<T>,
    running: Option<(&CudaSlice<T>, &CudaSlice<T>)>,
    p: &BatchNormParams,
) -> Result<Triple<T>> {
    if running.is_none() {
        if let Some(r) = cudnn_bn::forward_training(d, x, w, b, p)? {
            return Ok(r);
        }
    }
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
            // SAFETY: one block per channel over contiguous [N, C, spatial] input.
            unsafe {
                launch!(d, &name, CudaDevice::cfg_rows(p.c, p.n * p.spatial, 2); x, &n, &c,
                    &sp, &p.eps, &mut st, &mut mean, &mut invstd)
            }?;
        }
        Some((rm, rv)) => {
            let name = format!("bn_eval_stats_{}", T::SUFFIX);
            // SAFETY: running statistics hold C elements.
            unsafe {
                launch!(d, &name, CudaDevice::cfg(p.c); rm, rv, &c, &p.eps, &mut st, &mut mean,
                    &mut invstd)
            }?;
        }
    }
    {
        let name = format!("bn_apply_{}", T::SUFFIX);
        let t = total as i64;
        // SAFETY: elementwise over `total` elements; per-channel arrays hold C.
        unsafe { launch!(d, &name, CudaDevice::cfg(total); x, w, b, &st, &mut out, &t, &c, &sp) }?;
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
    if training {
        if let Some(r) = cudnn_bn::backward_training(d, x, gy, w, mean, invstd, p)? {
            return Ok(r);
        }
    }
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
    // SAFETY: one block per channel, as in forward.
    unsafe {
        launch!(d, &name, CudaDevice::cfg_rows(p.c, p.n * p.spatial, 2); x, gy, mean, invstd,
            &n, &c, &sp, &mut sums, &mut dw, &mut db)
    }?;
    {
        let name = format!("bn_bwd_dx_{}", T::SUFFIX);
        let (t, tr) = (total as i64, training as i32);
        // SAFETY: elementwise over `total` elements.
        unsafe {
            launch!(d, &name, CudaDevice::cfg(total); x, gy, w, mean, invstd, &sums, &mut dx,
                &t, &c, &sp, &tr)
        }?;
    }
    Ok((dx, dw, db))
}

/// [`forward`] on storages of one float dtype: inputs `[x, weight, bias]` (training) or
/// `[x, weight, bias, running mean, running var]` (evaluation); `[out, mean, invstd]`.
pub(crate) fn run(inputs: &[&CudaStorage], p: &BatchNormParams) -> Result<[CudaStorage; 3]> {
    fn go<T: GpuFloat>(
        d: &Arc<CudaDevice>,
        v: &[&CudaSlice<T>],
        p: &BatchNormParams,
    ) -> Result<[CudaStorage; 3]> {
        let running = (v.len() == 5).then(|| (v[3], v[4]));
        let (o, m, s) = forward(d, v[0], v[1], v[2], running, p)?;
        Ok(outputs(d, (o, m, s), p))
    }
    const OP: &str = "batch_norm";
    let d = &inputs[0].dev;
    match inputs[0].dtype() {
        DType::F32 => go(d, &slices(inputs, OP, CudaStorage::f32s)?, p),
        DType::F64 => go(d, &slices(inputs, OP, CudaStorage::f64s)?, p),
        DType::U32 => Err(unsupported(OP, DType::U32)),
    }
}

/// [`backward`] on storages of one float dtype: inputs `[x, grad of out, weight, mean,
/// invstd]`; `[d x, d weight, d bias]`.
pub(crate) fn run_backward(
    inputs: &[&CudaStorage],
    training: bool,
    p: &BatchNormParams,
) -> Result<[CudaStorage; 3]> {
    fn go<T: GpuFloat>(
        d: &Arc<CudaDevice>,
        v: &[&CudaSlice<T>],
        training: bool,
        p: &BatchNormParams,
    ) -> Result<[CudaStorage; 3]> {
        let r = backward(d, v[0], v[1], v[2], v[3], v[4], training, p)?;
        Ok(outputs(d, r, p))
    }
    const OP: &str = "batch_norm backward";
    let d = &inputs[0].dev;
    match inputs[0].dtype() {
        DType::F32 => go(d, &slices(inputs, OP, CudaStorage::f32s)?, training, p),
        DType::F64 => go(d, &slices(inputs, OP, CudaStorage::f64s)?, training, p),
        DType::U32 => Err(unsupported(OP, DType::U32)),
    }
}

/// An activation-shaped buffer and two per-channel ones, as storages.
fn outputs<T: GpuFloat>(
    d: &Arc<CudaDevice>,
    (a, b, c): Triple<T>,
    p: &BatchNormParams,
) -> [CudaStorage; 3] {
    [
        CudaStorage::new(a, p.n * p.c * p.spatial, d),
        CudaStorage::new(b, p.c, d),
        CudaStorage::new(c, p.c, d),
    ]
}
