//! Launch code for softmax / log-softmax and cross-entropy (kernels/softmax.cu). Label
//! checks run on the host (labels are one per row) so a bad label is an error with the
//! CPU backend's message, never an out-of-bounds read.

use super::device::CudaDevice;
use super::dtype::GpuFloat;
use super::launch::launch;
use crate::{Error, Result};
use cudarc::driver::CudaSlice;

pub(crate) fn forward<T: GpuFloat>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    rows: usize,
    cols: usize,
    log: bool,
) -> Result<CudaSlice<T>> {
    let mut y = d.alloc::<T>(rows * cols)?;
    if rows * cols == 0 {
        return Ok(y);
    }
    let name = format!("softmax_{}", T::SUFFIX);
    let (c, l) = (cols as u64, log as i32);
    // SAFETY: one block per row of a contiguous [rows, cols] buffer.
    unsafe { launch!(d, &name, CudaDevice::cfg_rows(rows, cols, 1); x, &mut y, &c, &l) }?;
    Ok(y)
}

pub(crate) fn backward<T: GpuFloat>(
    d: &CudaDevice,
    y: &CudaSlice<T>,
    g: &CudaSlice<T>,
    rows: usize,
    cols: usize,
    log: bool,
) -> Result<CudaSlice<T>> {
    let mut dx = d.alloc::<T>(rows * cols)?;
    if rows * cols == 0 {
        return Ok(dx);
    }
    let name = format!("softmax_bwd_{}", T::SUFFIX);
    let (c, l) = (cols as u64, log as i32);
    // SAFETY: as in forward.
    unsafe { launch!(d, &name, CudaDevice::cfg_rows(rows, cols, 1); y, g, &mut dx, &c, &l) }?;
    Ok(dx)
}

/// The number of labels that count (not `ignore`), or the CPU backend's error for a
/// label out of range.
pub(crate) fn check_labels(labels: &[u32], c: usize, ignore: Option<u32>) -> Result<usize> {
    let mut count = 0;
    for (i, &l) in labels.iter().enumerate() {
        if Some(l) == ignore {
            continue;
        }
        if l as usize >= c {
            return Err(Error::msg(format!(
                "cross_entropy: label {l} at position {i} is out of range for {c} classes"
            )));
        }
        count += 1;
    }
    Ok(count)
}

fn ignore_code(ignore: Option<u32>) -> i64 {
    ignore.map_or(-1, |v| v as i64)
}

/// Returns `(loss [1], probs [n, c])`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn cross_entropy<T: GpuFloat>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    labels: &CudaSlice<u32>,
    n: usize,
    c: usize,
    ignore: Option<u32>,
    count: usize,
) -> Result<(CudaSlice<T>, CudaSlice<T>)> {
    let mut probs = d.alloc::<T>(n * c)?;
    let mut row_loss = d.alloc_zeros::<f64>(n)?;
    let mut loss = d.alloc_zeros::<T>(1)?;
    if n * c > 0 {
        let name = format!("ce_fwd_{}", T::SUFFIX);
        let (cols, ig) = (c as u64, ignore_code(ignore));
        // SAFETY: one block per row; labels were checked to be < c (or the ignored one).
        unsafe {
            launch!(d, &name, CudaDevice::cfg_rows(n, c, 1); x, labels, &mut probs,
                &mut row_loss, &cols, &ig)
        }?;
    }
    let name = format!("ce_mean_{}", T::SUFFIX);
    let (rows, cnt) = (n as u64, count as u64);
    // SAFETY: one block summing n per-row losses.
    unsafe { launch!(d, &name, CudaDevice::cfg_rows(1, n, 1); &row_loss, &mut loss, &rows, &cnt) }?;
    Ok((loss, probs))
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn cross_entropy_backward<T: GpuFloat>(
    d: &CudaDevice,
    probs: &CudaSlice<T>,
    labels: &CudaSlice<u32>,
    grad: f64,
    n: usize,
    c: usize,
    ignore: Option<u32>,
    count: usize,
) -> Result<CudaSlice<T>> {
    let mut dx = d.alloc::<T>(n * c)?;
    if n * c == 0 {
        return Ok(dx);
    }
    // The CPU's scale, converted to T the same way.
    let scale = if count > 0 {
        T::from_f64(grad / count as f64)
    } else {
        T::from_f64(0.0)
    };
    let name = format!("ce_bwd_{}", T::SUFFIX);
    let (total, cols, ig) = ((n * c) as u64, c as u64, ignore_code(ignore));
    // SAFETY: elementwise over n*c; labels were checked in the forward pass.
    unsafe {
        launch!(d, &name, CudaDevice::cfg(n * c); probs, labels, &mut dx, &total, &cols, &ig,
            &scale)
    }?;
    Ok(dx)
}
