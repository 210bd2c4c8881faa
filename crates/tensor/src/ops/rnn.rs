//! Fused recurrent cells: the pointwise part of one LSTM or GRU time step as one op
//! (one kernel forward, one backward), instead of the ~10 elementwise ops and their
//! intermediate tensors the composed formula records per step. The matrix products stay
//! outside (`matmul`), so the cell is the same for any input and hidden size.

use crate::cpu::CpuStorage;
use crate::cuda::CudaStorage;
use crate::storage::fused::Fused;
use crate::storage::{RnnCell, Storage};
use crate::{Error, Result, Tensor};
use std::sync::Arc;

impl Tensor {
    /// One LSTM step from pre-activation `gates [N, 4H]` (x·W_ihᵀ + b_ih + h·W_hhᵀ + b_hh,
    /// gate order i, f, g, o as PyTorch) and the cell state `c_prev [N, H]`. Returns
    /// `[2, N, H]`: the new hidden state at index 0 and the new cell state at index 1
    /// (one output, so autograd needs no multi-output op: `narrow` takes them apart).
    pub fn lstm_cell(gates: &Tensor, c_prev: &Tensor) -> Result<Tensor> {
        let (n, h) = cell_dims("lstm_cell", gates, c_prev, 4)?;
        fused(RnnCell::Lstm, &[gates, c_prev], vec![2, n, h], n, h)
    }

    /// One GRU step from the input part `gx [N, 3H]` (x·W_ihᵀ + b_ih), the hidden part
    /// `gh [N, 3H]` (h·W_hhᵀ + b_hh), gate order r, z, n as PyTorch, and `h_prev [N, H]`:
    /// h′ = (1 − z)·n + z·h_prev with n = tanh(gx_n + r·gh_n). Returns h′ `[N, H]`.
    pub fn gru_cell(gx: &Tensor, gh: &Tensor, h_prev: &Tensor) -> Result<Tensor> {
        let (n, h) = cell_dims("gru_cell", gx, h_prev, 3)?;
        if gh.dims() != gx.dims() {
            return Err(Error::ShapeMismatch {
                op: "gru_cell (gx vs gh)",
                lhs: gx.shape().clone(),
                rhs: gh.shape().clone(),
            });
        }
        gx.check_same_dtype(gh, "gru_cell")?;
        fused(RnnCell::Gru, &[gx, gh, h_prev], vec![n, h], n, h)
    }
}

/// `(N, H)` of a cell whose gates are `[N, G·H]` and state `[N, H]`.
fn cell_dims(op: &'static str, gates: &Tensor, state: &Tensor, g: usize) -> Result<(usize, usize)> {
    gates.check_float(op)?;
    gates.check_same_dtype(state, op)?;
    let (gd, sd) = (gates.dims(), state.dims());
    if gd.len() != 2 || sd.len() != 2 || gd[0] != sd[0] || gd[1] != g * sd[1] {
        return Err(Error::BadShape {
            op,
            msg: format!(
                "gates must be [N, {g}·H] and the state [N, H]; the state is {:?}",
                sd
            ),
            shape: gates.shape().clone(),
        });
    }
    Ok((sd[0], sd[1]))
}

/// Runs the cell on dense copies of `inputs` and records a backward that calls the fused
/// backward kernel with the same inputs.
fn fused(
    cell: RnnCell,
    inputs: &[&Tensor],
    out_shape: Vec<usize>,
    n: usize,
    h: usize,
) -> Result<Tensor> {
    let dense: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.contiguous())
        .collect::<Result<_>>()?;
    let out = {
        let guards: Vec<_> = dense.iter().map(|t| t.storage()).collect();
        let refs: Vec<&Storage> = guards.iter().map(|g| &**g).collect();
        let [out] = Storage::run(&Cell { cell, n, h }, &refs)?;
        out
    };
    let value = Tensor::from_storage(out, out_shape, None);
    let saved: Vec<Tensor> = dense.iter().map(|t| t.detach()).collect();
    let backward = Arc::new(move |grad: &Tensor| -> Result<Vec<Option<Tensor>>> {
        let refs: Vec<&Tensor> = saved.iter().collect();
        Ok(cell_backward(cell, &refs, grad, n, h)?
            .into_iter()
            .map(Some)
            .collect())
    });
    Ok(Tensor::custom_op(&value, &dense, backward))
}

/// The outputs of [`Tensor::lstm_sequence`].
#[derive(Debug)]
pub struct LstmSequence {
    /// Hidden states of every step, by time index: `[T, N, H]`.
    pub output: Tensor,
    /// The hidden and cell state after the last processed step (time 0 when reversed).
    pub h_last: Tensor,
    pub c_last: Tensor,
}

impl Tensor {
    /// A whole LSTM layer (one direction) as one autograd op, as cuDNN runs it: `xp
    /// [T, N, 4H]` holds the input projections of every step with both biases added,
    /// `w_hh [4H, H]` the recurrent weights, `h0`/`c0 [N, H]` the initial state; `reverse`
    /// walks time backwards (the second direction of a bidirectional layer).
    ///
    /// Forward per step: one product `h·W_hhᵀ` and one fused cell. The backward is truncated
    /// BPTT in one pass: per step one fused cell backward and one product for the hidden
    /// gradient, and at the end ONE product for W_hh's gradient over all T·N rows
    /// (instead of T products of N rows accumulated into a [4H, H] buffer, and T zero-padded
    /// slices of xp's gradient, which is what per-step autograd costs: the measured
    /// difference is in benchmarks/RESULTS.md). The gate pre-activations of every step are
    /// kept for the backward (as much memory as `xp`).
    pub fn lstm_sequence(
        xp: &Tensor,
        w_hh: &Tensor,
        h0: &Tensor,
        c0: &Tensor,
        reverse: bool,
    ) -> Result<LstmSequence> {
        let d = xp.dims();
        let (n, h) = (
            h0.dims().first().copied().unwrap_or(0),
            w_hh.dims().last().copied().unwrap_or(0),
        );
        if d.len() != 3 || d[0] == 0 || d[1] != n || d[2] != 4 * h || w_hh.dims() != [4 * h, h] {
            return Err(Error::BadShape {
                op: "lstm_sequence",
                msg: format!(
                    "xp must be [T > 0, N, 4H] with w_hh [4H, H] and h0 [N, H]; w_hh is {:?}, h0 {:?}",
                    w_hh.dims(),
                    h0.dims()
                ),
                shape: xp.shape().clone(),
            });
        }
        cell_dims("lstm_sequence", &xp.narrow(0, 0, 1)?.squeeze(0)?, c0, 4)?;
        if h0.dims() != c0.dims() {
            return Err(Error::ShapeMismatch {
                op: "lstm_sequence (h0 vs c0)",
                lhs: h0.shape().clone(),
                rhs: c0.shape().clone(),
            });
        }
        xp.check_same_dtype(w_hh, "lstm_sequence")?;
        xp.check_same_dtype(h0, "lstm_sequence")?;
        let steps = d[0];
        let order: Vec<usize> = if reverse {
            (0..steps).rev().collect()
        } else {
            (0..steps).collect()
        };
        // Forward without recording: per time index, the gates, the state it started from.
        let (packed, gates, h_prev, c_prev) = crate::no_grad(|| -> Result<_> {
            // Wᵀ laid out densely once: `gemm` repacks a transposed view on every call, and
            // with a few batch rows per step that packing cost ~5× the product itself
            // (N = 20, H = 200 on the CPU: 150 µs against 26 µs per step).
            let w_t = w_hh.detach().transpose_last()?.contiguous()?;
            let xp = xp.detach();
            let (mut hh, mut cc) = (h0.detach().contiguous()?, c0.detach().contiguous()?);
            let mut gates = vec![None; steps];
            let mut h_prev = vec![None; steps];
            let mut c_prev = vec![None; steps];
            let mut ys = vec![None; steps];
            for &t in &order {
                let g = xp.narrow(0, t, 1)?.squeeze(0)?.add(&hh.matmul(&w_t)?)?;
                let hc = Tensor::lstm_cell(&g, &cc)?;
                gates[t] = Some(g);
                h_prev[t] = Some(hh);
                c_prev[t] = Some(cc);
                hh = hc.narrow(0, 0, 1)?.squeeze(0)?.contiguous()?;
                cc = hc.narrow(0, 1, 1)?.squeeze(0)?.contiguous()?;
                ys[t] = Some(hh.clone());
            }
            let mut parts: Vec<Tensor> = ys.into_iter().flatten().collect();
            parts.push(cc);
            let unwrap =
                |v: Vec<Option<Tensor>>| -> Vec<Tensor> { v.into_iter().flatten().collect() };
            Ok((
                Tensor::stack(&parts, 0)?,
                unwrap(gates),
                unwrap(h_prev),
                unwrap(c_prev),
            ))
        })?;
        let w = w_hh.detach();
        let backward = Arc::new(move |grad: &Tensor| -> Result<Vec<Option<Tensor>>> {
            // grad: [T + 1, N, H], the outputs' gradients and, last, c_last's.
            let mut dh_next = Tensor::zeros(vec![n, h], grad.dtype(), grad.device())?;
            let mut dc_next = grad.narrow(0, steps, 1)?.squeeze(0)?;
            let mut dgates = vec![None; steps];
            for &t in order.iter().rev() {
                let dh = grad.narrow(0, t, 1)?.squeeze(0)?.add(&dh_next)?;
                let dhc = Tensor::stack(&[dh, dc_next.clone()], 0)?;
                let mut g = cell_backward(RnnCell::Lstm, &[&gates[t], &c_prev[t]], &dhc, n, h)?;
                let dc = g
                    .pop()
                    .ok_or_else(|| Error::msg("lstm_sequence: no cell gradient"))?;
                let dg = g
                    .pop()
                    .ok_or_else(|| Error::msg("lstm_sequence: no gate gradient"))?;
                dh_next = dg.matmul(&w)?;
                dc_next = dc;
                dgates[t] = Some(dg);
            }
            let dgates: Vec<Tensor> = dgates.into_iter().flatten().collect();
            let dxp = Tensor::stack(&dgates, 0)?;
            let rows = steps * n;
            let dw = dxp
                .reshape(vec![rows, 4 * h])?
                .transpose_last()?
                .matmul(&Tensor::stack(&h_prev, 0)?.reshape(vec![rows, h])?)?;
            Ok(vec![Some(dxp), Some(dw), Some(dh_next), Some(dc_next)])
        });
        let inputs = [xp.clone(), w_hh.clone(), h0.clone(), c0.clone()];
        let out = Tensor::custom_op(&packed, &inputs, backward);
        let output = out.narrow(0, 0, steps)?;
        let last = if reverse { 0 } else { steps - 1 };
        Ok(LstmSequence {
            h_last: output.narrow(0, last, 1)?.squeeze(0)?,
            c_last: out.narrow(0, steps, 1)?.squeeze(0)?,
            output,
        })
    }
}

/// The fused cell's backward on tensors (no autograd): one gradient per input.
fn cell_backward(
    cell: RnnCell,
    inputs: &[&Tensor],
    grad: &Tensor,
    n: usize,
    h: usize,
) -> Result<Vec<Tensor>> {
    let dense: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.contiguous())
        .collect::<Result<_>>()?;
    let grad = grad.contiguous()?;
    let grads = {
        let guards: Vec<_> = dense.iter().map(|t| t.storage()).collect();
        let g = grad.storage();
        let refs: Vec<&Storage> = guards.iter().map(|g| &**g).chain([&*g]).collect();
        Storage::run_all(&CellBackward(Cell { cell, n, h }), &refs)?
    };
    Ok(grads
        .into_iter()
        .zip(&dense)
        .map(|(s, t)| Tensor::from_storage(s, t.dims().to_vec(), None))
        .collect())
}

/// The cell's forward kernel: inputs as [`Tensor::lstm_cell`] or [`Tensor::gru_cell`]
/// take them, one output.
#[derive(Clone, Copy)]
struct Cell {
    cell: RnnCell,
    n: usize,
    h: usize,
}
impl Fused for Cell {
    const NAME: &'static str = "rnn_cell";
    fn cpu(&self, inputs: &[&CpuStorage]) -> Result<Vec<CpuStorage>> {
        Ok(vec![crate::cpu::rnn::run(
            inputs, self.cell, self.n, self.h,
        )?])
    }
    fn cuda(&self, inputs: &[&CudaStorage]) -> Result<Vec<CudaStorage>> {
        Ok(vec![crate::cuda::rnn::run(
            inputs, self.cell, self.n, self.h,
        )?])
    }
}

/// The cell's backward kernel: the forward's inputs, then the output's gradient; one
/// gradient per forward input.
struct CellBackward(Cell);
impl Fused for CellBackward {
    const NAME: &'static str = "rnn_cell backward";
    fn cpu(&self, inputs: &[&CpuStorage]) -> Result<Vec<CpuStorage>> {
        let (grad, xs) = grad_last(inputs)?;
        crate::cpu::rnn::run_backward(xs, grad, self.0.cell, self.0.n, self.0.h)
    }
    fn cuda(&self, inputs: &[&CudaStorage]) -> Result<Vec<CudaStorage>> {
        let (grad, xs) = grad_last(inputs)?;
        crate::cuda::rnn::run_backward(xs, grad, self.0.cell, self.0.n, self.0.h)
    }
}

fn grad_last<T>(inputs: &[T]) -> Result<(&T, &[T])> {
    inputs
        .split_last()
        .ok_or_else(|| Error::msg("rnn_cell backward: no gradient"))
}
