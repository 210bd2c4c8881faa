//! Top-k along the last dimension by a bitonic sort of every row at once (kernels/topk.cu):
//! O(P log² P) work for rows padded to P, a power of two, and no host round trip. The
//! order and tie-breaking are the CPU's, so values and indices match it exactly.

use super::device::CudaDevice;
use super::dtype::{unsupported, CudaData, GpuFloat};
use super::launch::launch;
use super::CudaStorage;
use crate::DType;
use crate::Result;
use cudarc::driver::CudaSlice;

pub(crate) fn topk<T: GpuFloat>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    rows: usize,
    cols: usize,
    k: usize,
    largest: bool,
) -> Result<(CudaSlice<T>, CudaSlice<u32>)> {
    let mut ov = d.alloc::<T>(rows * k)?;
    let mut oi = d.alloc::<u32>(rows * k)?;
    if rows * k == 0 {
        return Ok((ov, oi));
    }
    let p = cols.next_power_of_two();
    let total = rows * p;
    let mut v = d.alloc::<T>(total)?;
    let mut id = d.alloc::<u32>(total)?;
    let (r64, c64, p64, k64, lg) = (rows as i64, cols as i64, p as i64, k as i64, largest as i32);
    let init = format!("topk_init_{}", T::SUFFIX);
    // SAFETY: x is contiguous [rows, cols]; v and id hold rows*P.
    unsafe { launch!(d, &init, CudaDevice::cfg(total); x, &mut v, &mut id, &r64, &c64, &p64) }?;
    let step = format!("topk_step_{}", T::SUFFIX);
    let mut size = 2;
    while size <= p {
        let mut j = size / 2;
        while j > 0 {
            let (s64, j64) = (size as i64, j as i64);
            // SAFETY: each thread swaps a pair inside one row of rows*P.
            unsafe {
                launch!(d, &step, CudaDevice::cfg(total); &mut v, &mut id, &r64, &p64, &s64,
                    &j64, &lg)
            }?;
            j /= 2;
        }
        size *= 2;
    }
    let take = format!("topk_take_{}", T::SUFFIX);
    // SAFETY: k <= cols <= P (checked by the tensor layer).
    unsafe {
        launch!(d, &take, CudaDevice::cfg(rows * k); &v, &id, &mut ov, &mut oi, &r64, &p64,
            &k64)
    }?;
    Ok((ov, oi))
}

/// [`topk`] on a storage: the values in its dtype and U32 indices, `[rows, k]` each.
pub(crate) fn run(
    x: &CudaStorage,
    rows: usize,
    cols: usize,
    k: usize,
    largest: bool,
) -> Result<(CudaStorage, CudaStorage)> {
    let (d, len) = (&x.dev, rows * k);
    Ok(match &x.data {
        CudaData::F32(x) => {
            let (v, i) = topk(d, x, rows, cols, k, largest)?;
            (CudaStorage::new(v, len, d), CudaStorage::new(i, len, d))
        }
        CudaData::F64(x) => {
            let (v, i) = topk(d, x, rows, cols, k, largest)?;
            (CudaStorage::new(v, len, d), CudaStorage::new(i, len, d))
        }
        CudaData::U32(_) => return Err(unsupported("topk", DType::U32)),
    })
}
