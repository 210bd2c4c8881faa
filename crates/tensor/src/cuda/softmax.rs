//! Launch code for softmax / log-softmax and cross-entropy (kernels/softmax.cu). Nothing
//! here reads the device back: a label out of range is skipped by the kernel and reported
//! through the fault word at the next synchronisation (cuda/fault.rs), the count of labels
//! that count stays on the device, and the backward reads the upstream gradient there.

use super::device::CudaDevice;
use super::dtype::{mismatch, slices, unsupported, CudaData, GpuFloat};
use super::launch::launch;
use super::CudaStorage;
use crate::storage::BackendStorage;
use crate::DType;
use crate::Result;
use cudarc::driver::CudaSlice;
use std::sync::Arc;

pub(crate) fn forward<T: GpuFloat>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    rows: usize,
    cols: usize,
    log: bool,
) -> Result<CudaSlice<T>> {
    d.output::<T>(rows * cols, |y| {
        let name = format!("softmax_{}", T::SUFFIX);
        let (c, l) = (cols as u64, log as i32);
        // SAFETY: one block per row of a contiguous [rows, cols] buffer.
        unsafe { launch!(d, &name, CudaDevice::cfg_rows(rows, cols, 1); x, y, &c, &l) }
    })
}

pub(crate) fn backward<T: GpuFloat>(
    d: &CudaDevice,
    y: &CudaSlice<T>,
    g: &CudaSlice<T>,
    rows: usize,
    cols: usize,
    log: bool,
) -> Result<CudaSlice<T>> {
    d.output::<T>(rows * cols, |dx| {
        let name = format!("softmax_bwd_{}", T::SUFFIX);
        let (c, l) = (cols as u64, log as i32);
        // SAFETY: as in forward.
        unsafe { launch!(d, &name, CudaDevice::cfg_rows(rows, cols, 1); y, g, dx, &c, &l) }
    })
}

fn ignore_code(ignore: Option<u32>) -> i64 {
    ignore.map_or(-1, |v| v as i64)
}

/// Returns `(loss [1], probs [n, c], count [1])`, count being the number of labels that
/// are not `ignore` (in T, which holds any batch size exactly).
pub(crate) fn cross_entropy<T: GpuFloat>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    labels: &CudaSlice<u32>,
    n: usize,
    c: usize,
    ignore: Option<u32>,
) -> Result<(CudaSlice<T>, CudaSlice<T>, CudaSlice<T>)> {
    let mut probs = d.alloc::<T>(n * c)?;
    let mut row_loss = d.alloc_zeros::<f64>(n)?;
    let mut row_valid = d.alloc_zeros::<f64>(n)?;
    let mut loss = d.alloc_zeros::<T>(1)?;
    let mut count = d.alloc_zeros::<T>(1)?;
    // Launched for c = 0 too: every label not ignored is then out of range (a fault, as
    // the CPU's error), and no element is read.
    if n > 0 {
        let name = format!("ce_fwd_{}", T::SUFFIX);
        let (cols, ig) = (c as u64, ignore_code(ignore));
        let mut fault = d.fault_word();
        // SAFETY: one block per row; a label >= c is not read through (fault word).
        unsafe {
            launch!(d, &name, CudaDevice::cfg_rows(n, c, 1); x, labels, &mut probs,
                &mut row_loss, &mut row_valid, &cols, &ig, &mut *fault)
        }?;
    }
    let name = format!("ce_mean_{}", T::SUFFIX);
    let rows = n as u64;
    // SAFETY: one block summing n per-row losses and validity flags.
    unsafe {
        launch!(d, &name, CudaDevice::cfg_rows(1, n, 1); &row_loss, &row_valid, &mut loss,
            &mut count, &rows)
    }?;
    Ok((loss, probs, count))
}

/// `upstream` and `count` are one-element device buffers (the loss's gradient and the
/// forward's count), read by the kernel, never by the host.
#[allow(clippy::too_many_arguments)]
pub(crate) fn cross_entropy_backward<T: GpuFloat>(
    d: &CudaDevice,
    probs: &CudaSlice<T>,
    labels: &CudaSlice<u32>,
    upstream: &CudaSlice<T>,
    count: &CudaSlice<T>,
    n: usize,
    c: usize,
    ignore: Option<u32>,
) -> Result<CudaSlice<T>> {
    d.output::<T>(n * c, |dx| {
        let name = format!("ce_bwd_{}", T::SUFFIX);
        let (total, cols, ig) = ((n * c) as u64, c as u64, ignore_code(ignore));
        // SAFETY: elementwise over n*c; labels >= c give zero rows, never an access.
        unsafe {
            launch!(d, &name, CudaDevice::cfg(n * c); probs, labels, dx, &total, &cols, &ig,
                upstream, count)
        }
    })
}

/// [`cross_entropy`] on storages: `(loss [1], probs [n, c], count [1])` in the logits'
/// dtype, from float logits and U32 labels.
pub(crate) fn run_cross_entropy(
    x: &CudaStorage,
    labels: &CudaStorage,
    n: usize,
    c: usize,
    ignore: Option<u32>,
) -> Result<[CudaStorage; 3]> {
    let l = labels.u32_slice("cross_entropy labels")?;
    let d = &x.dev;
    fn wrap<T: GpuFloat>(
        (loss, probs, count): (CudaSlice<T>, CudaSlice<T>, CudaSlice<T>),
        n: usize,
        c: usize,
        d: &Arc<CudaDevice>,
    ) -> [CudaStorage; 3] {
        [
            CudaStorage::new(loss, 1, d),
            CudaStorage::new(probs, n * c, d),
            CudaStorage::new(count, 1, d),
        ]
    }
    Ok(match &x.data {
        CudaData::F32(x) => wrap(cross_entropy(d, x, l, n, c, ignore)?, n, c, d),
        CudaData::F64(x) => wrap(cross_entropy(d, x, l, n, c, ignore)?, n, c, d),
        CudaData::U32(_) => return Err(unsupported("cross_entropy logits", DType::U32)),
    })
}

/// [`cross_entropy_backward`] on storages: the logits' gradient from the forward's
/// probabilities, the labels, the upstream gradient and the forward's count, all read
/// on the device.
pub(crate) fn run_cross_entropy_backward(
    probs: &CudaStorage,
    labels: &CudaStorage,
    grad: &CudaStorage,
    count: &CudaStorage,
    n: usize,
    c: usize,
    ignore: Option<u32>,
) -> Result<CudaStorage> {
    const OP: &str = "cross_entropy backward";
    let l = labels.u32_slice("cross_entropy labels")?;
    let d = &probs.dev;
    let out = match (&probs.data, &grad.data, &count.data) {
        (CudaData::F32(p), CudaData::F32(g), CudaData::F32(k)) => CudaStorage::new(
            cross_entropy_backward(d, p, l, g, k, n, c, ignore)?,
            n * c,
            d,
        ),
        (CudaData::F64(p), CudaData::F64(g), CudaData::F64(k)) => CudaStorage::new(
            cross_entropy_backward(d, p, l, g, k, n, c, ignore)?,
            n * c,
            d,
        ),
        (CudaData::U32(_), _, _) => return Err(unsupported(OP, DType::U32)),
        _ => return Err(mismatch(OP, probs, grad)),
    };
    Ok(out)
}

/// [`forward`] (inputs `[x]`) or [`backward`] (inputs `[y, grad of y]`, `y` the
/// forward's output) on storages of one float dtype, `[rows, cols]`.
pub(crate) fn run(
    inputs: &[&CudaStorage],
    rows: usize,
    cols: usize,
    log: bool,
) -> Result<CudaStorage> {
    fn go<T: GpuFloat>(
        d: &Arc<CudaDevice>,
        v: &[&CudaSlice<T>],
        (rows, cols, log): (usize, usize, bool),
    ) -> Result<CudaStorage> {
        let out = match v {
            [x] => forward(d, x, rows, cols, log)?,
            [y, g] => backward(d, y, g, rows, cols, log)?,
            _ => unreachable!("softmax takes one input, its backward two"),
        };
        Ok(CudaStorage::new(out, rows * cols, d))
    }
    const OP: &str = "softmax";
    let d = &inputs[0].dev;
    match inputs[0].dtype() {
        DType::F32 => go(
            d,
            &slices(inputs, OP, CudaStorage::f32s)?,
            (rows, cols, log),
        ),
        DType::F64 => go(
            d,
            &slices(inputs, OP, CudaStorage::f64s)?,
            (rows, cols, log),
        ),
        DType::U32 => Err(unsupported(OP, DType::U32)),
    }
}
