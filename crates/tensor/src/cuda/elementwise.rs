//! Launch code for the elementwise kernels (kernels/elementwise.cu): fill, strided copies
//! in both directions, casts, unary and binary maps and where. Every input is read
//! through its layout, so views and broadcasts need no copy first.

use super::device::CudaDevice;
use super::dtype::{launched, GpuFloat, GpuType};
use super::kernels::{binary_code, unary_code, Strided};
use crate::storage::{BinaryOp, UnaryOp};
use crate::{Layout, Result};
use cudarc::driver::{CudaSlice, PushKernelArg};

pub(crate) fn fill<T: GpuType>(d: &CudaDevice, n: usize, v: T) -> Result<CudaSlice<T>> {
    let mut y = d.alloc::<T>(n)?;
    let name = format!("fill_{}", T::SUFFIX);
    let f = d.func(&name)?;
    let n64 = n.max(1) as u64;
    let mut b = d.stream.launch_builder(&f);
    b.arg(&mut y).arg(&n64).arg(&v);
    // SAFETY: the kernel writes y[0..n) and y holds max(n, 1) elements.
    launched(&name, unsafe { b.launch(CudaDevice::cfg(n)) })?;
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
    let f = d.func(&name)?;
    let (xs, n64) = (Strided::of(l)?, n as u64);
    let mut b = d.stream.launch_builder(&f);
    b.arg(x).arg(&xs).arg(&mut y).arg(&n64);
    // SAFETY: the layout addresses elements inside x (layouts are validated by the tensor layer).
    launched(&name, unsafe { b.launch(CudaDevice::cfg(n)) })?;
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
    let f = d.func(&name)?;
    let (ds, n64) = (Strided::of(dst_l)?, n as u64);
    let mut b = d.stream.launch_builder(&f);
    b.arg(dst).arg(&ds).arg(src).arg(&n64);
    // SAFETY: as in copy_strided; src holds n contiguous elements.
    launched(&name, unsafe { b.launch(CudaDevice::cfg(n)) })
}

pub(crate) fn cast<A: GpuType, B: GpuType>(
    d: &CudaDevice,
    x: &CudaSlice<A>,
    l: &Layout,
) -> Result<CudaSlice<B>> {
    let n = l.elem_count();
    let mut y = d.alloc::<B>(n)?;
    if n == 0 {
        return Ok(y);
    }
    let name = format!("cast_{}_{}", A::SUFFIX, B::SUFFIX);
    let f = d.func(&name)?;
    let (xs, n64) = (Strided::of(l)?, n as u64);
    let mut b = d.stream.launch_builder(&f);
    b.arg(x).arg(&xs).arg(&mut y).arg(&n64);
    // SAFETY: as in copy_strided.
    launched(&name, unsafe { b.launch(CudaDevice::cfg(n)) })?;
    Ok(y)
}

pub(crate) fn unary<T: GpuFloat>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    l: &Layout,
    op: UnaryOp,
) -> Result<CudaSlice<T>> {
    let n = l.elem_count();
    let mut y = d.alloc::<T>(n)?;
    if n == 0 {
        return Ok(y);
    }
    let name = format!("unary_{}", T::SUFFIX);
    let f = d.func(&name)?;
    let (code, p, q) = unary_code(op);
    // The parameters in the element type, as the CPU converts them (T::from_f64).
    let (p, q) = (T::from_f64(p), T::from_f64(q));
    let (xs, n64) = (Strided::of(l)?, n as u64);
    let mut b = d.stream.launch_builder(&f);
    b.arg(x)
        .arg(&xs)
        .arg(&mut y)
        .arg(&n64)
        .arg(&code)
        .arg(&p)
        .arg(&q);
    // SAFETY: as in copy_strided.
    launched(&name, unsafe { b.launch(CudaDevice::cfg(n)) })?;
    Ok(y)
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
    let mut y = d.alloc::<T>(n)?;
    if n == 0 {
        return Ok(y);
    }
    let name = format!("binary_{}", T::SUFFIX);
    let f = d.func(&name)?;
    let (as_, cs, n64, code) = (
        Strided::of(al)?,
        Strided::of(cl)?,
        n as u64,
        binary_code(op),
    );
    let mut b = d.stream.launch_builder(&f);
    b.arg(a)
        .arg(&as_)
        .arg(c)
        .arg(&cs)
        .arg(&mut y)
        .arg(&n64)
        .arg(&code);
    // SAFETY: both layouts have the output's shape and address their own buffers.
    launched(&name, unsafe { b.launch(CudaDevice::cfg(n)) })?;
    Ok(y)
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
    let mut y = d.alloc::<T>(n)?;
    if n == 0 {
        return Ok(y);
    }
    let name = format!("where_{}", T::SUFFIX);
    let k = d.func(&name)?;
    let (cs, ts, fs, n64) = (
        Strided::of(cl)?,
        Strided::of(tl)?,
        Strided::of(fl)?,
        n as u64,
    );
    let mut b = d.stream.launch_builder(&k);
    b.arg(c)
        .arg(&cs)
        .arg(t)
        .arg(&ts)
        .arg(f)
        .arg(&fs)
        .arg(&mut y)
        .arg(&n64);
    // SAFETY: as in binary.
    launched(&name, unsafe { b.launch(CudaDevice::cfg(n)) })?;
    Ok(y)
}
