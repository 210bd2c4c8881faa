//! Launch code for index_select (gather) and index_add (scatter-add) along one
//! dimension (kernels/index.cu). Indices are checked on the host first: an index out of
//! range is the CPU backend's error, not an out-of-bounds access.

use super::device::CudaDevice;
use super::dtype::{GpuFloat, GpuType};
use super::launch::launch;
use crate::{Error, Result, Shape};
use cudarc::driver::CudaSlice;

pub(crate) fn check_ids(ids: &[u32], size: usize, op: &'static str) -> Result<()> {
    match ids.iter().find(|&&i| i as usize >= size) {
        Some(&i) => Err(Error::IndexOutOfRange {
            op,
            index: i as usize,
            size,
        }),
        None => Ok(()),
    }
}

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
    let mut out = d.alloc::<T>(n)?;
    if n == 0 {
        return Ok(out);
    }
    let name = format!("index_select_{}", T::SUFFIX);
    let (o, s, k, i) = (outer as i64, size as i64, n_ids as i64, inner as i64);
    // SAFETY: ids were checked to be < size; src is contiguous of `shape`.
    unsafe { launch!(d, &name, CudaDevice::cfg(n); src, ids, &mut out, &o, &s, &k, &i) }?;
    Ok(out)
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
    // SAFETY: ids were checked to be < size; out is zeroed and of `out_shape`.
    unsafe { launch!(d, &name, CudaDevice::cfg(n); src, ids, &mut out, &o, &s, &k, &i) }?;
    Ok(out)
}
