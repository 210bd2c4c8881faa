//! Launch code for the fused LSTM and GRU cells (kernels/rnn.cu): one thread per
//! (row, unit), inputs contiguous (checked by the caller, `ops::rnn`).

use super::device::CudaDevice;
use super::dtype::GpuFloat;
use super::launch::launched;
use crate::storage::RnnCell;
use crate::Result;
use cudarc::driver::{CudaSlice, PushKernelArg};

/// Forward: LSTM `[gates, c_prev]` → `[2, n, h]`; GRU `[gx, gh, h_prev]` → `[n, h]`.
pub(crate) fn forward<T: GpuFloat>(
    d: &CudaDevice,
    inputs: &[&CudaSlice<T>],
    cell: RnnCell,
    n: usize,
    h: usize,
) -> Result<CudaSlice<T>> {
    let len = match cell {
        RnnCell::Lstm => 2 * n * h,
        RnnCell::Gru => n * h,
    };
    let mut out = d.alloc::<T>(len)?;
    if n * h == 0 {
        return Ok(out);
    }
    let name = match cell {
        RnnCell::Lstm => format!("lstm_cell_fwd_{}", T::SUFFIX),
        RnnCell::Gru => format!("gru_cell_fwd_{}", T::SUFFIX),
    };
    let f = d.func(&name)?;
    let (rows, units) = (n as u64, h as u64);
    let mut b = d.stream.launch_builder(&f);
    for x in inputs {
        b.arg(*x);
    }
    b.arg(&mut out).arg(&rows).arg(&units);
    // SAFETY: the caller checked the input lengths (gates n·4h or n·3h, states n·h).
    launched(&name, unsafe { b.launch(CudaDevice::cfg(n * h)) })?;
    Ok(out)
}

/// Backward: one gradient per input, in the inputs' order.
pub(crate) fn backward<T: GpuFloat>(
    d: &CudaDevice,
    inputs: &[&CudaSlice<T>],
    grad: &CudaSlice<T>,
    cell: RnnCell,
    n: usize,
    h: usize,
) -> Result<Vec<CudaSlice<T>>> {
    let gates = match cell {
        RnnCell::Lstm => 4,
        RnnCell::Gru => 3,
    };
    let mut outs = match cell {
        RnnCell::Lstm => vec![d.alloc::<T>(n * h * gates)?, d.alloc::<T>(n * h)?],
        RnnCell::Gru => vec![
            d.alloc::<T>(n * h * gates)?,
            d.alloc::<T>(n * h * gates)?,
            d.alloc::<T>(n * h)?,
        ],
    };
    if n * h == 0 {
        return Ok(outs);
    }
    let name = match cell {
        RnnCell::Lstm => format!("lstm_cell_bwd_{}", T::SUFFIX),
        RnnCell::Gru => format!("gru_cell_bwd_{}", T::SUFFIX),
    };
    let f = d.func(&name)?;
    let (rows, units) = (n as u64, h as u64);
    let mut b = d.stream.launch_builder(&f);
    for x in inputs {
        b.arg(*x);
    }
    b.arg(grad);
    for o in outs.iter_mut() {
        b.arg(o);
    }
    b.arg(&rows).arg(&units);
    // SAFETY: as in forward; the gradient has the forward output's length.
    launched(&name, unsafe { b.launch(CudaDevice::cfg(n * h)) })?;
    Ok(outs)
}
