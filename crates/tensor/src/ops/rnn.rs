//! Fused recurrent cells: the pointwise part of one LSTM or GRU time step as one op
//! (one kernel forward, one backward), instead of the ~10 elementwise ops and their
//! intermediate tensors the composed formula records per step. The matrix products stay
//! outside (`matmul`), so the cell is the same for any input and hidden size.

use crate::storage::{BackendStorage, RnnCell, Storage};
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
        Storage::rnn_cell(&refs, cell, n, h)?
    };
    let value = Tensor::from_storage(out, out_shape, None);
    let saved: Vec<Tensor> = dense.iter().map(|t| t.detach()).collect();
    let shapes: Vec<Vec<usize>> = dense.iter().map(|t| t.dims().to_vec()).collect();
    let backward = Arc::new(move |grad: &Tensor| -> Result<Vec<Option<Tensor>>> {
        let grad = grad.contiguous()?;
        let grads = {
            let guards: Vec<_> = saved.iter().map(|t| t.storage()).collect();
            let refs: Vec<&Storage> = guards.iter().map(|g| &**g).collect();
            Storage::rnn_cell_backward(&refs, &grad.storage(), cell, n, h)?
        };
        Ok(grads
            .into_iter()
            .zip(&shapes)
            .map(|(s, shape)| Some(Tensor::from_storage(s, shape.clone(), None)))
            .collect())
    });
    Ok(Tensor::custom_op(&value, &dense, backward))
}
