//! Launch code for the elementwise kernels (kernels/elementwise.cu): fill, strided copies
//! in both directions, casts, unary and binary maps and where. Every input is read
//! through its layout, so views and broadcasts need no copy first.

use super::device::CudaDevice;
use super::dtype::{GpuFloat, GpuType};
use super::kernels::{binary_code, unary_code, Strided};
use super::launch::launch;
use crate::storage::{BinaryOp, UnaryOp};
use crate::{Layout, Result};
use cudarc::driver::CudaSlice;

pub(crate) fn fill<T: GpuType>(d: &CudaDevice, n: usize, v: T) -> Result<CudaSlice<T>> {
    let mut y = d.alloc::<T>(n)?;
    let name = format!("fill_{}", T::SUFFIX);
    let n64 = n.max(1) as u64;
    // SAFETY: the kernel writes y[0..n) and y holds max(n, 1) elements.
    unsafe { launch!(d, &name, CudaDevice::cfg(n); &mut y, &n64, &v) }?;
    Ok(y)
}

/// A contiguous copy of the view `l` of `x`.
pub(crate) fn copy_strided<T: GpuType>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    l: &Layout,
) -> Result<CudaSlice<T>> {
    let n = l.elem_count();
    let mut y = d.alloc::<T>(n)?;
    if n == 0 {
        return Ok(y);
    }
    if l.is_contiguous() {
        let src = x.slice(l.offset()..l.offset() + n);
        let mut dst = y.slice_mut(0..n);
        d.stream
            .memcpy_dtod(&src, &mut dst)
            .map_err(super::device::cuda_err("copy"))?;
        return Ok(y);
    }
    let name = format!("copy_{}", T::SUFFIX);
    let (xs, n64) = (Strided::of(l)?, n as u64);
    // SAFETY: the layout addresses elements inside x (layouts are validated by the tensor layer).
    unsafe { launch!(d, &name, CudaDevice::cfg(n); x, &xs, &mut y, &n64) }?;
    Ok(y)
}

/// Writes contiguous `src` into the view `dst_l` of `dst`.
pub(crate) fn copy_into<T: GpuType>(
    d: &CudaDevice,
    dst: &mut CudaSlice<T>,
    dst_l: &Layout,
    src: &CudaSlice<T>,
) -> Result<()> {
    let n = dst_l.elem_count();
    if n == 0 {
        return Ok(());
    }
    let name = format!("scatter_{}", T::SUFFIX);
    let (ds, n64) = (Strided::of(dst_l)?, n as u64);
    // SAFETY: as in copy_strided; src holds n contiguous elements.
    unsafe { launch!(d, &name, CudaDevice::cfg(n); dst, &ds, src, &n64) }
}

pub(crate) fn cast<A: GpuType, B: GpuType>(
    d: &CudaDevice,
    x: &CudaSlice<A>,
    l: &Layout,
) -> Result<CudaSlice<B>> {
    let n = l.elem_count();
    d.output::<B>(n, |y| {
        let name = format!("cast_{}_{}", A::SUFFIX, B::SUFFIX);
        let (xs, n64) = (Strided::of(l)?, n as u64);
        // SAFETY: as in copy_strided.
        unsafe { launch!(d, &name, CudaDevice::cfg(n); x, &xs, y, &n64) }
    })
}

pub(crate) fn unary<T: GpuFloat>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    l: &Layout,
    op: UnaryOp,
) -> Result<CudaSlice<T>> {
    let n = l.elem_count();
    d.output::<T>(n, |y| {
        let name = format!("unary_{}", T::SUFFIX);
        let (code, p, q) = unary_code(op);
        // The parameters in the element type, as the CPU converts them (T::from_f64).
        let (p, q) = (T::from_f64(p), T::from_f64(q));
        let (xs, n64) = (Strided::of(l)?, n as u64);
        // SAFETY: as in copy_strided.
        unsafe { launch!(d, &name, CudaDevice::cfg(n); x, &xs, y, &n64, &code, &p, &q) }
    })
}

pub(crate) fn binary<T: GpuFloat>(
    d: &CudaDevice,
    a: &CudaSlice<T>,
    al: &Layout,
    c: &CudaSlice<T>,
    cl: &Layout,
    op: BinaryOp,
) -> Result<CudaSlice<T>> {
    let n = al.elem_count();
    d.output::<T>(n, |y| {
        let name = format!("binary_{}", T::SUFFIX);
        let (as_, cs, n64, code) = (
            Strided::of(al)?,
            Strided::of(cl)?,
            n as u64,
            binary_code(op),
        );
        // SAFETY: both layouts have the output's shape and address their own buffers.
        unsafe { launch!(d, &name, CudaDevice::cfg(n); a, &as_, c, &cs, y, &n64, &code) }
    })
}

pub(crate) fn where_cond<T: GpuFloat>(
    d: &CudaDevice,
    c: &CudaSlice<T>,
    cl: &Layout,
    t: &CudaSlice<T>,
    tl: &Layout,
    f: &CudaSlice<T>,
    fl: &Layout,
) -> Result<CudaSlice<T>> {
    let n = cl.elem_count();
    d.output::<T>(n, |y| {
        let name = format!("where_{}", T::SUFFIX);
        let (cs, ts, fs, n64) = (
            Strided::of(cl)?,
            Strided::of(tl)?,
            Strided::of(fl)?,
            n as u64,
        );
        // SAFETY: as in binary.
        unsafe { launch!(d, &name, CudaDevice::cfg(n); c, &cs, t, &ts, f, &fs, y, &n64) }
    })
}
