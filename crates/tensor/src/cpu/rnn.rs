//! Fused LSTM and GRU cells on the CPU: the pointwise part of one time step, forward and
//! backward, with the same formulas as kernels/rnn.cu (gate order i, f, g, o and r, z, n,
//! as PyTorch). The backward recomputes the gate activations from the inputs. Exp and
//! tanh are `cpu::fastmath`'s for f32, so the per-unit loops vectorise.

use super::{typed, unsupported, CpuStorage};
use crate::storage::BackendStorage;
use crate::storage::RnnCell;
use crate::{DType, Float, Result};
use rayon::prelude::*;

/// A row of `[k·h]` as its k gate blocks of exactly h values each. The per-unit loops
/// index these by j < h, so the compiler drops the bounds checks and vectorises them.
#[inline(always)]
fn blocks<const K: usize, T>(row: &[T], h: usize) -> [&[T]; K] {
    std::array::from_fn(|b| &row[b * h..(b + 1) * h])
}

/// [`blocks`] of a mutable row.
#[inline(always)]
fn blocks_mut<const K: usize, T>(row: &mut [T], h: usize) -> [&mut [T]; K] {
    let mut rest = &mut row[..K * h];
    std::array::from_fn(|_| {
        let (b, r) = std::mem::take(&mut rest).split_at_mut(h);
        rest = r;
        b
    })
}

/// Unit j's LSTM gate activations (i, f, g, o) from the gate blocks of its
/// pre-activations.
#[inline(always)]
fn lstm_gates<T: Float>(g: &[&[T]; 4], j: usize) -> (T, T, T, T) {
    (
        g[0][j].kernel_sigmoid(),
        g[1][j].kernel_sigmoid(),
        g[2][j].kernel_tanh(),
        g[3][j].kernel_sigmoid(),
    )
}

/// Unit j's GRU reset and update gates and candidate (r, z, n) from the gate blocks of
/// the input part `x` and the hidden part `y`.
#[inline(always)]
fn gru_gates<T: Float>(x: &[&[T]; 3], y: &[&[T]; 3], j: usize) -> (T, T, T) {
    let r = (x[0][j] + y[0][j]).kernel_sigmoid();
    let z = (x[1][j] + y[1][j]).kernel_sigmoid();
    (r, z, (x[2][j] + r * y[2][j]).kernel_tanh())
}

/// Rows per rayon task: at least this many elements each, so a small step (one batch of
/// a few rows) stays on one thread.
fn rows_per_task(h: usize) -> usize {
    ((1 << 14) / h.max(1)).max(1)
}

pub(crate) fn forward<T: Float>(inputs: &[&[T]], cell: RnnCell, n: usize, h: usize) -> Vec<T> {
    if n * h == 0 {
        return Vec::new();
    }
    let min = rows_per_task(h);
    match cell {
        RnnCell::Lstm => {
            let (gates, c_prev) = (inputs[0], inputs[1]);
            let mut out = vec![T::zero(); 2 * n * h];
            let (hs, cs) = out.split_at_mut(n * h);
            hs.par_chunks_mut(h)
                .zip(cs.par_chunks_mut(h))
                .enumerate()
                .with_min_len(min)
                .for_each(|(r, (hr, cr))| {
                    let pre = blocks(&gates[r * 4 * h..(r + 1) * 4 * h], h);
                    let cp = &c_prev[r * h..(r + 1) * h];
                    let (hr, cr) = (&mut hr[..h], &mut cr[..h]);
                    for j in 0..h {
                        let (i, f, g, o) = lstm_gates(&pre, j);
                        let c = f * cp[j] + i * g;
                        hr[j] = o * c.kernel_tanh();
                        cr[j] = c;
                    }
                });
            out
        }
        RnnCell::Gru => {
            let (gx, gh, h_prev) = (inputs[0], inputs[1], inputs[2]);
            let mut out = vec![T::zero(); n * h];
            out.par_chunks_mut(h)
                .enumerate()
                .with_min_len(min)
                .for_each(|(r, hr)| {
                    let x = blocks(&gx[r * 3 * h..(r + 1) * 3 * h], h);
                    let y = blocks(&gh[r * 3 * h..(r + 1) * 3 * h], h);
                    let hp = &h_prev[r * h..(r + 1) * h];
                    let hr = &mut hr[..h];
                    for j in 0..h {
                        let (_, z, cand) = gru_gates(&x, &y, j);
                        hr[j] = cand + z * (hp[j] - cand);
                    }
                });
            out
        }
    }
}

pub(crate) fn backward<T: Float>(
    inputs: &[&[T]],
    grad: &[T],
    cell: RnnCell,
    n: usize,
    h: usize,
) -> Vec<Vec<T>> {
    if n * h == 0 {
        return inputs.iter().map(|_| Vec::new()).collect();
    }
    let min = rows_per_task(h);
    match cell {
        RnnCell::Lstm => {
            let (gates, c_prev) = (inputs[0], inputs[1]);
            let mut dgates = vec![T::zero(); 4 * n * h];
            let mut dc_prev = vec![T::zero(); n * h];
            dgates
                .par_chunks_mut(4 * h)
                .zip(dc_prev.par_chunks_mut(h))
                .enumerate()
                .with_min_len(min)
                .for_each(|(r, (dg, dcp))| {
                    let pre = blocks(&gates[r * 4 * h..(r + 1) * 4 * h], h);
                    let [di, df, dgg, dgo] = blocks_mut(dg, h);
                    let cp = &c_prev[r * h..(r + 1) * h];
                    let dh_row = &grad[r * h..(r + 1) * h];
                    let dc_row = &grad[(n + r) * h..(n + r + 1) * h];
                    let dcp = &mut dcp[..h];
                    for j in 0..h {
                        let (i, f, g, o) = lstm_gates(&pre, j);
                        let c = f * cp[j] + i * g;
                        let tc = c.kernel_tanh();
                        let dh = dh_row[j];
                        let dc = dc_row[j] + dh * o * (T::one() - tc * tc);
                        di[j] = dc * g * i * (T::one() - i);
                        df[j] = dc * cp[j] * f * (T::one() - f);
                        dgg[j] = dc * i * (T::one() - g * g);
                        dgo[j] = dh * tc * o * (T::one() - o);
                        dcp[j] = dc * f;
                    }
                });
            vec![dgates, dc_prev]
        }
        RnnCell::Gru => {
            let (gx, gh, h_prev) = (inputs[0], inputs[1], inputs[2]);
            let mut dgx = vec![T::zero(); 3 * n * h];
            let mut dgh = vec![T::zero(); 3 * n * h];
            let mut dh_prev = vec![T::zero(); n * h];
            dgx.par_chunks_mut(3 * h)
                .zip(dgh.par_chunks_mut(3 * h))
                .zip(dh_prev.par_chunks_mut(h))
                .enumerate()
                .with_min_len(min)
                .for_each(|(r, ((dx, dy), dhp))| {
                    let x = blocks(&gx[r * 3 * h..(r + 1) * 3 * h], h);
                    let y = blocks(&gh[r * 3 * h..(r + 1) * 3 * h], h);
                    let [dxr, dxz, dxn] = blocks_mut(dx, h);
                    let [dyr, dyz, dyn_] = blocks_mut(dy, h);
                    let hp = &h_prev[r * h..(r + 1) * h];
                    let d_row = &grad[r * h..(r + 1) * h];
                    let dhp = &mut dhp[..h];
                    for j in 0..h {
                        let (rr, z, cand) = gru_gates(&x, &y, j);
                        let d = d_row[j];
                        let dz = d * (hp[j] - cand) * z * (T::one() - z);
                        let dn = d * (T::one() - z) * (T::one() - cand * cand);
                        let dr = dn * y[2][j] * rr * (T::one() - rr);
                        dxr[j] = dr;
                        dyr[j] = dr;
                        dxz[j] = dz;
                        dyz[j] = dz;
                        dxn[j] = dn;
                        dyn_[j] = dn * rr;
                        dhp[j] = d * z;
                    }
                });
            vec![dgx, dgh, dh_prev]
        }
    }
}

/// [`forward`] on storages of one float dtype.
pub(crate) fn run(inputs: &[&CpuStorage], cell: RnnCell, n: usize, h: usize) -> Result<CpuStorage> {
    const OP: &str = "rnn_cell";
    Ok(match inputs[0].dtype() {
        DType::F32 => CpuStorage::F32(forward(&typed(inputs, OP, CpuStorage::f32s)?, cell, n, h)),
        DType::F64 => CpuStorage::F64(forward(&typed(inputs, OP, CpuStorage::f64s)?, cell, n, h)),
        DType::U32 => return Err(unsupported(OP, DType::U32)),
    })
}

/// [`backward`] on storages of one float dtype: one gradient per input.
pub(crate) fn run_backward(
    inputs: &[&CpuStorage],
    grad: &CpuStorage,
    cell: RnnCell,
    n: usize,
    h: usize,
) -> Result<Vec<CpuStorage>> {
    const OP: &str = "rnn_cell backward";
    Ok(match grad {
        CpuStorage::F32(g) => backward(&typed(inputs, OP, CpuStorage::f32s)?, g, cell, n, h)
            .into_iter()
            .map(CpuStorage::F32)
            .collect(),
        CpuStorage::F64(g) => backward(&typed(inputs, OP, CpuStorage::f64s)?, g, cell, n, h)
            .into_iter()
            .map(CpuStorage::F64)
            .collect(),
        CpuStorage::U32(_) => return Err(unsupported(OP, DType::U32)),
    })
}
