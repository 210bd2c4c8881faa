//! Launch code for 2-d max/average pooling and its gradient (kernels/pool.cu).

use super::device::CudaDevice;
use super::dtype::GpuFloat;
use super::launch::launch;
use crate::storage::{Pool2dParams, PoolKind};
use crate::Result;
use cudarc::driver::{CudaSlice, DeviceRepr};

/// `PoolGeom` in kernels/pool.cu, field for field.
#[repr(C)]
#[derive(Clone, Copy)]
struct PoolGeom {
    planes: i64,
    h: i64,
    w: i64,
    kh: i64,
    kw: i64,
    sh: i64,
    sw: i64,
    ph: i64,
    pw: i64,
    oh: i64,
    ow: i64,
    is_max: i64,
}
// SAFETY: plain old data with the C layout the kernel declares.
unsafe impl DeviceRepr for PoolGeom {}

fn geom(p: &Pool2dParams) -> PoolGeom {
    PoolGeom {
        planes: (p.batch * p.channels) as i64,
        h: p.in_h as i64,
        w: p.in_w as i64,
        kh: p.kernel.0 as i64,
        kw: p.kernel.1 as i64,
        sh: p.stride.0 as i64,
        sw: p.stride.1 as i64,
        ph: p.padding.0 as i64,
        pw: p.padding.1 as i64,
        oh: p.out_h() as i64,
        ow: p.out_w() as i64,
        is_max: (p.kind == PoolKind::Max) as i64,
    }
}

pub(crate) fn forward<T: GpuFloat>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    p: &Pool2dParams,
) -> Result<CudaSlice<T>> {
    let n = p.out_shape().elem_count();
    d.output::<T>(n, |y| {
        let name = format!("pool_fwd_{}", T::SUFFIX);
        let g = geom(p);
        // SAFETY: x is contiguous NCHW of the geometry's size; y holds every output.
        unsafe { launch!(d, &name, CudaDevice::cfg(n); x, y, &g) }
    })
}

pub(crate) fn backward<T: GpuFloat>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    gy: &CudaSlice<T>,
    p: &Pool2dParams,
) -> Result<CudaSlice<T>> {
    let n = p.batch * p.channels * p.in_h * p.in_w;
    let mut gx = d.alloc_zeros::<T>(n)?;
    if n == 0 || p.out_shape().elem_count() == 0 {
        return Ok(gx);
    }
    let name = format!("pool_bwd_{}", T::SUFFIX);
    let g = geom(p);
    // SAFETY: as in forward; gx holds every input pixel.
    unsafe { launch!(d, &name, CudaDevice::cfg(n); x, gy, &mut gx, &g) }?;
    Ok(gx)
}
