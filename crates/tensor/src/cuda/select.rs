//! Top-k along the last dimension by a bitonic sort of every row at once (kernels/topk.cu):
//! O(P log² P) work for rows padded to P, a power of two, and no host round trip. The
//! order and tie-breaking are the CPU's, so values and indices match it exactly.

use super::device::CudaDevice;
use super::dtype::{launched, GpuFloat};
use crate::Result;
use cudarc::driver::{CudaSlice, PushKernelArg};

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
    let f = d.func(&init)?;
    let mut b = d.stream.launch_builder(&f);
    b.arg(x)
        .arg(&mut v)
        .arg(&mut id)
        .arg(&r64)
        .arg(&c64)
        .arg(&p64);
    // SAFETY: x is contiguous [rows, cols]; v and id hold rows*P.
    launched(&init, unsafe { b.launch(CudaDevice::cfg(total)) })?;
    let step = format!("topk_step_{}", T::SUFFIX);
    let f = d.func(&step)?;
    let mut size = 2;
    while size <= p {
        let mut j = size / 2;
        while j > 0 {
            let (s64, j64) = (size as i64, j as i64);
            let mut b = d.stream.launch_builder(&f);
            b.arg(&mut v)
                .arg(&mut id)
                .arg(&r64)
                .arg(&p64)
                .arg(&s64)
                .arg(&j64)
                .arg(&lg);
            // SAFETY: each thread swaps a pair inside one row of rows*P.
            launched(&step, unsafe { b.launch(CudaDevice::cfg(total)) })?;
            j /= 2;
        }
        size *= 2;
    }
    let take = format!("topk_take_{}", T::SUFFIX);
    let f = d.func(&take)?;
    let mut b = d.stream.launch_builder(&f);
    b.arg(&v)
        .arg(&id)
        .arg(&mut ov)
        .arg(&mut oi)
        .arg(&r64)
        .arg(&p64)
        .arg(&k64);
    // SAFETY: k <= cols <= P (checked by the tensor layer).
    launched(&take, unsafe { b.launch(CudaDevice::cfg(rows * k)) })?;
    Ok((ov, oi))
}
