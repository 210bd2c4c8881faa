//! Fused LSTM and GRU cells on the CPU: the pointwise part of one time step, forward and
//! backward, with the same formulas as kernels/rnn.cu (gate order i, f, g, o and r, z, n,
//! as PyTorch). The backward recomputes the gate activations from the inputs.

use crate::storage::RnnCell;
use crate::Float;
use rayon::prelude::*;

#[inline]
fn sigm<T: Float>(x: T) -> T {
    T::one() / (T::one() + (-x).exp())
}

/// Unit j's LSTM gate activations (i, f, g, o) from a row of pre-activations `[4h]`.
#[inline]
fn lstm_gates<T: Float>(g: &[T], j: usize, h: usize) -> (T, T, T, T) {
    (
        sigm(g[j]),
        sigm(g[h + j]),
        g[2 * h + j].tanh(),
        sigm(g[3 * h + j]),
    )
}

/// Unit j's GRU reset and update gates and candidate (r, z, n) from rows `[3h]` of the
/// input part `x` and the hidden part `y`.
#[inline]
fn gru_gates<T: Float>(x: &[T], y: &[T], j: usize, h: usize) -> (T, T, T) {
    let (r, z) = (sigm(x[j] + y[j]), sigm(x[h + j] + y[h + j]));
    (r, z, (x[2 * h + j] + r * y[2 * h + j]).tanh())
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
                    let g = &gates[r * 4 * h..(r + 1) * 4 * h];
                    for j in 0..h {
                        let (i, f, gg, og) = lstm_gates(g, j, h);
                        let c = f * c_prev[r * h + j] + i * gg;
                        hr[j] = og * c.tanh();
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
                    let (x, y) = (
                        &gx[r * 3 * h..(r + 1) * 3 * h],
                        &gh[r * 3 * h..(r + 1) * 3 * h],
                    );
                    for j in 0..h {
                        let (_, z, cand) = gru_gates(x, y, j, h);
                        hr[j] = cand + z * (h_prev[r * h + j] - cand);
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
                    let g = &gates[r * 4 * h..(r + 1) * 4 * h];
                    for j in 0..h {
                        let k = r * h + j;
                        let (i, f, gg, og) = lstm_gates(g, j, h);
                        let c = f * c_prev[k] + i * gg;
                        let tc = c.tanh();
                        let dh = grad[k];
                        let dc = grad[n * h + k] + dh * og * (T::one() - tc * tc);
                        dg[j] = dc * gg * i * (T::one() - i);
                        dg[h + j] = dc * c_prev[k] * f * (T::one() - f);
                        dg[2 * h + j] = dc * i * (T::one() - gg * gg);
                        dg[3 * h + j] = dh * tc * og * (T::one() - og);
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
                    let (x, y) = (
                        &gx[r * 3 * h..(r + 1) * 3 * h],
                        &gh[r * 3 * h..(r + 1) * 3 * h],
                    );
                    for j in 0..h {
                        let (rr, z, cand) = gru_gates(x, y, j, h);
                        let d = grad[r * h + j];
                        let dz = d * (h_prev[r * h + j] - cand) * z * (T::one() - z);
                        let dn = d * (T::one() - z) * (T::one() - cand * cand);
                        let dr = dn * y[2 * h + j] * rr * (T::one() - rr);
                        dx[j] = dr;
                        dy[j] = dr;
                        dx[h + j] = dz;
                        dy[h + j] = dz;
                        dx[2 * h + j] = dn;
                        dy[2 * h + j] = dn * rr;
                        dhp[j] = d * z;
                    }
                });
            vec![dgx, dgh, dh_prev]
        }
    }
}
