//! Launch code for reductions (kernels/reduce.cu). The input view splits into the kept
//! axes (which number the outputs) and the reduced axes (which one block walks), both as
//! strided descriptors into the same buffer, so no transpose or copy precedes a reduction.

use super::device::CudaDevice;
use super::dtype::GpuFloat;
use super::kernels::Strided;
use super::launch::launch;
use crate::storage::ReduceOp;
use crate::{Layout, Result};
use cudarc::driver::{CudaSlice, LaunchConfig};

/// The kept and reduced parts of `l`, and their element counts.
fn split(l: &Layout, dims: &[usize]) -> Result<(Strided, Strided, usize, usize)> {
    let (shape, strides) = (l.dims(), l.strides());
    let (mut kd, mut ks, mut rd, mut rs) = (vec![], vec![], vec![], vec![]);
    for k in 0..shape.len() {
        if dims.contains(&k) {
            rd.push(shape[k]);
            rs.push(strides[k]);
        } else {
            kd.push(shape[k]);
            ks.push(strides[k]);
        }
    }
    let (n_out, n_red) = (kd.iter().product(), rd.iter().product());
    Ok((
        Strided::new(&kd, &ks, l.offset())?,
        Strided::new(&rd, &rs, 0)?,
        n_out,
        n_red,
    ))
}

fn cfg(n_out: usize, n_red: usize) -> LaunchConfig {
    // The kernel's shared arrays hold 256 entries; fewer threads for short reductions.
    let threads = n_red.next_power_of_two().clamp(32, 256) as u32;
    LaunchConfig {
        grid_dim: (n_out.clamp(1, 1 << 20) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Sum, max or min over `dims` (keepdim form); returns the buffer and its length.
pub(crate) fn reduce<T: GpuFloat>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    l: &Layout,
    dims: &[usize],
    op: ReduceOp,
) -> Result<(CudaSlice<T>, usize)> {
    if dims.is_empty() {
        return Ok((super::elementwise::copy_strided(d, x, l)?, l.elem_count()));
    }
    let (kept, red, n_out, n_red) = split(l, dims)?;
    let mut y = d.alloc::<T>(n_out)?;
    if n_out == 0 {
        return Ok((y, 0));
    }
    let code: i32 = match op {
        ReduceOp::Sum => 0,
        ReduceOp::Max => 1,
        ReduceOp::Min => 2,
        ReduceOp::ArgMax => {
            return Err(crate::Error::msg(
                "reduce: argmax goes through reduce::argmax",
            ))
        }
    };
    let name = format!("reduce_{}", T::SUFFIX);
    let (no, nr) = (n_out as u64, n_red as u64);
    // SAFETY: both descriptors come from a valid layout of x; y holds n_out elements.
    unsafe { launch!(d, &name, cfg(n_out, n_red); x, &kept, &red, &mut y, &no, &nr, &code) }?;
    Ok((y, n_out))
}

/// Index of the first maximum along `dim` (the first NaN if any), as U32.
pub(crate) fn argmax<T: GpuFloat>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    l: &Layout,
    dim: usize,
) -> Result<(CudaSlice<u32>, usize)> {
    let (kept, red, n_out, n_red) = split(l, &[dim])?;
    let mut y = d.alloc::<u32>(n_out)?;
    if n_out == 0 {
        return Ok((y, 0));
    }
    let name = format!("argmax_{}", T::SUFFIX);
    let (no, nr) = (n_out as u64, n_red as u64);
    // SAFETY: as in reduce.
    unsafe { launch!(d, &name, cfg(n_out, n_red); x, &kept, &red, &mut y, &no, &nr) }?;
    Ok((y, n_out))
}
