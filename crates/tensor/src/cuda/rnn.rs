//! Launch code for the fused LSTM and GRU cells (kernels/rnn.cu): one thread per
//! (row, unit), inputs contiguous (checked by the caller, `ops::rnn`).

use super::device::CudaDevice;
use super::dtype::{slices, unsupported, CudaData, GpuFloat};
use super::launch::launched;
use super::CudaStorage;
use crate::storage::RnnCell;
use crate::DType;
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
    d.output::<T>(len, |out| {
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
        b.arg(out).arg(&rows).arg(&units);
        // SAFETY: the caller checked the input lengths (gates n·4h or n·3h, states n·h).
        launched(&name, unsafe { b.launch(CudaDevice::cfg(n * h)) })?;
        Ok(())
    })
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

/// [`forward`] on storages of one float dtype.
pub(crate) fn run(
    inputs: &[&CudaStorage],
    cell: RnnCell,
    n: usize,
    h: usize,
) -> Result<CudaStorage> {
    const OP: &str = "rnn_cell";
    let first = inputs[0];
    let d = &first.dev;
    let len = match cell {
        RnnCell::Lstm => 2 * n * h,
        RnnCell::Gru => n * h,
    };
    Ok(match &first.data {
        CudaData::F32(_) => {
            let xs = slices(inputs, OP, CudaStorage::f32s)?;
            CudaStorage::new(forward(d, &xs, cell, n, h)?, len, d)
        }
        CudaData::F64(_) => {
            let xs = slices(inputs, OP, CudaStorage::f64s)?;
            CudaStorage::new(forward(d, &xs, cell, n, h)?, len, d)
        }
        CudaData::U32(_) => return Err(unsupported(OP, DType::U32)),
    })
}

/// [`backward`] on storages of one float dtype: one gradient per input, each the length
/// of its input.
pub(crate) fn run_backward(
    inputs: &[&CudaStorage],
    grad: &CudaStorage,
    cell: RnnCell,
    n: usize,
    h: usize,
) -> Result<Vec<CudaStorage>> {
    const OP: &str = "rnn_cell backward";
    let d = &grad.dev;
    let lens = inputs.iter().map(|s| s.len());
    Ok(match &grad.data {
        CudaData::F32(g) => backward(d, &slices(inputs, OP, CudaStorage::f32s)?, g, cell, n, h)?
            .into_iter()
            .zip(lens)
            .map(|(o, len)| CudaStorage::new(o, len, d))
            .collect(),
        CudaData::F64(g) => backward(d, &slices(inputs, OP, CudaStorage::f64s)?, g, cell, n, h)?
            .into_iter()
            .zip(lens)
            .map(|(o, len)| CudaStorage::new(o, len, d))
            .collect(),
        CudaData::U32(_) => return Err(unsupported(OP, DType::U32)),
    })
}
