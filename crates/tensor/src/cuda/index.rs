//! Launch code for index_select (gather) and index_add (scatter-add) along one
//! dimension (kernels/index.cu). Indices are checked by the kernels, not on the host (that
//! would be a synchronisation per embedding lookup): an index out of range touches nothing
//! and is the error of the next synchronisation (cuda/fault.rs), with the CPU's message.

use super::device::CudaDevice;
use super::dtype::{GpuFloat, GpuType};
use super::launch::launch;
use crate::{Result, Shape};
use cudarc::driver::CudaSlice;

fn split(shape: &Shape, dim: usize) -> (usize, usize, usize) {
    let d = shape.dims();
    (
        d[..dim].iter().product(),
        d[dim],
        d[dim + 1..].iter().product(),
    )
}

pub(crate) fn select<T: GpuType>(
    d: &CudaDevice,
    src: &CudaSlice<T>,
    shape: &Shape,
    ids: &CudaSlice<u32>,
    n_ids: usize,
    dim: usize,
) -> Result<CudaSlice<T>> {
    let (outer, size, inner) = split(shape, dim);
    let n = outer * n_ids * inner;
    d.output::<T>(n, |out| {
        let name = format!("index_select_{}", T::SUFFIX);
        let (o, s, k, i) = (outer as i64, size as i64, n_ids as i64, inner as i64);
        let mut fault = d.fault_word();
        // SAFETY: src is contiguous of `shape`; an id >= size is not read through.
        unsafe { launch!(d, &name, CudaDevice::cfg(n); src, ids, out, &o, &s, &k, &i, &mut *fault) }
    })
}

pub(crate) fn add<T: GpuFloat>(
    d: &CudaDevice,
    src: &CudaSlice<T>,
    src_shape: &Shape,
    ids: &CudaSlice<u32>,
    dim: usize,
    out_shape: &Shape,
) -> Result<CudaSlice<T>> {
    let (outer, n_ids, inner) = split(src_shape, dim);
    let size = out_shape.dims()[dim];
    let mut out = d.alloc_zeros::<T>(out_shape.elem_count())?;
    let n = outer * n_ids * inner;
    if n == 0 {
        return Ok(out);
    }
    let name = format!("index_add_{}", T::SUFFIX);
    let (o, s, k, i) = (outer as i64, size as i64, n_ids as i64, inner as i64);
    let mut fault = d.fault_word();
    // SAFETY: out is zeroed and of `out_shape`; an id >= size is not written through.
    unsafe {
        launch!(d, &name, CudaDevice::cfg(n); src, ids, &mut out, &o, &s, &k, &i, &mut *fault)
    }?;
    Ok(out)
}
