//! LSTM and GRU, multi-layer and optionally bidirectional, with PyTorch's parameter
//! layout: per layer and direction `weight_ih_l{k}`, `weight_hh_l{k}`, `bias_ih_l{k}`,
//! `bias_hh_l{k}` (suffix `_reverse` for the backward direction), gate order i, f, g, o
//! (LSTM) and r, z, n (GRU), two bias vectors, all initialised U(−1/√H, 1/√H). Parameter
//! counts and checkpoints therefore match `torch.nn.LSTM` / `torch.nn.GRU`.
//!
//! Sequences are time-major `[T, N, features]`. The input projection of every time step
//! is one matrix product per layer. The recurrence runs as fused ops: the LSTM's whole
//! sequence as one (`Tensor::lstm_sequence`, whose recurrent weights' gradient is one
//! product at the end of its backward), the GRU a fused cell per step. Either way each
//! recurrent weight's gradient-ready hook fires once, when its gradient is complete.

use crate::init;
use crate::module::{Ctx, Module, NamedTensor};
use tensor::{Error, Result, Rng, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RnnKind {
    Lstm,
    Gru,
}

impl RnnKind {
    fn gates(self) -> usize {
        match self {
            RnnKind::Lstm => 4,
            RnnKind::Gru => 3,
        }
    }
}

struct Direction {
    suffix: String,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor,
    b_hh: Tensor,
}

/// Hidden state: `h` (and `c` for LSTM), each `[layers · directions, N, hidden]`.
#[derive(Clone, Debug)]
pub struct RnnState {
    pub h: Tensor,
    pub c: Option<Tensor>,
}

pub struct Rnn {
    pub kind: RnnKind,
    pub input_size: usize,
    pub hidden: usize,
    pub layers: usize,
    pub bidirectional: bool,
    /// Dropout on the outputs of every layer but the last (training only), as PyTorch.
    pub dropout: f64,
    dirs: Vec<Direction>,
}

impl Rnn {
    /// A stack of `layers` LSTM or GRU layers (each in both directions when
    /// `bidirectional`), PyTorch's initialisation: every weight uniform in ±1/√hidden.
    pub fn new(
        kind: RnnKind,
        input_size: usize,
        hidden: usize,
        layers: usize,
        bidirectional: bool,
        dropout: f64,
        rng: &mut Rng,
    ) -> Result<Self> {
        if layers == 0 || hidden == 0 {
            return Err(Error::msg(format!(
                "{kind:?}: needs at least one layer and one hidden unit"
            )));
        }
        // Here, as PyTorch does, not at the first training step (or never, with one layer).
        if !(0.0..=1.0).contains(&dropout) {
            return Err(Error::msg(format!(
                "{kind:?}: dropout must be in [0, 1], got {dropout}"
            )));
        }
        let bound = 1.0 / (hidden as f64).sqrt();
        let nd = if bidirectional { 2 } else { 1 };
        let g = kind.gates() * hidden;
        let mut dirs = Vec::new();
        for layer in 0..layers {
            let inputs = if layer == 0 { input_size } else { hidden * nd };
            for d in 0..nd {
                dirs.push(Direction {
                    suffix: format!("l{layer}{}", if d == 1 { "_reverse" } else { "" }),
                    w_ih: init::uniform(&[g, inputs], bound, rng)?,
                    w_hh: init::uniform(&[g, hidden], bound, rng)?,
                    b_ih: init::uniform(&[g], bound, rng)?,
                    b_hh: init::uniform(&[g], bound, rng)?,
                });
            }
        }
        Ok(Rnn {
            kind,
            input_size,
            hidden,
            layers,
            bidirectional,
            dropout,
            dirs,
        })
    }
    fn directions(&self) -> usize {
        if self.bidirectional {
            2
        } else {
            1
        }
    }
    /// Features of the output: `hidden`, or `2 · hidden` when bidirectional (concatenated).
    pub fn output_size(&self) -> usize {
        self.hidden * self.directions()
    }

    /// Zero state for a batch of `n`.
    pub fn zero_state(&self, n: usize, like: &Tensor) -> Result<RnnState> {
        let shape = vec![self.layers * self.directions(), n, self.hidden];
        let h = tensor::Tensor::zeros(shape.clone(), like.dtype(), like.device())?;
        let c = match self.kind {
            RnnKind::Lstm => Some(Tensor::zeros(shape, like.dtype(), like.device())?),
            RnnKind::Gru => None,
        };
        Ok(RnnState { h, c })
    }

    /// Runs the whole sequence `x: [T, N, input_size]` from `state` (zeros if None).
    /// Returns the last layer's outputs `[T, N, output_size]` and the final state.
    pub fn forward_seq(
        &self,
        x: &Tensor,
        state: Option<&RnnState>,
        ctx: &mut Ctx,
    ) -> Result<(Tensor, RnnState)> {
        self.forward_seq_lengths(x, state, None, ctx)
    }

    /// [`Rnn::forward_seq`] over a batch of sequences padded to `T`, sample `b` being
    /// `lengths[b]` steps long (1 to `T`): the reverse direction starts at each
    /// sequence's own last step, so no output within a sequence depends on its padding
    /// (the forward direction's never does). That is what PyTorch's packed sequences give
    /// the *outputs*. Unlike them, the returned final *state* is the one after all `T`
    /// steps in the forward direction (for a shorter sequence, after its padding too), and
    /// in the reverse direction the one after a sequence's first step only where that
    /// sequence fills `T`: use the outputs, not the state, of padded sequences (CTC does).
    pub fn forward_seq_lengths(
        &self,
        x: &Tensor,
        state: Option<&RnnState>,
        lengths: Option<&[usize]>,
        ctx: &mut Ctx,
    ) -> Result<(Tensor, RnnState)> {
        let d = x.dims();
        if d.len() != 3 || d[2] != self.input_size {
            return Err(Error::BadShape {
                op: "Rnn::forward_seq",
                msg: format!("expected [T, N, {}] (time-major)", self.input_size),
                shape: x.shape().clone(),
            });
        }
        let (steps, n) = (d[0], d[1]);
        // Checked whether or not they change anything here: a wrong list is the caller's
        // error on every network, not only on a bidirectional one with ragged lengths.
        if let Some(l) = lengths {
            if l.len() != n || l.iter().any(|&t| t == 0 || t > steps) {
                return Err(Error::msg(format!(
                    "Rnn: {} sequence lengths {l:?} for a batch of {n} sequences of 1 to {steps} steps",
                    l.len()
                )));
            }
        }
        // The reverse direction of padded sequences runs forward over each sequence
        // reversed within its length (padding left at the end), then is reversed back.
        let within = match lengths {
            Some(l) if self.bidirectional && l.iter().any(|&t| t != steps) => {
                Some(reverse_within(l, steps, x.device())?)
            }
            _ => None,
        };
        let zero;
        let state = match state {
            Some(s) => {
                // PyTorch's "Expected hidden size": a state for another depth, direction
                // count, batch or width is an error, not partly used.
                let want = [self.layers * self.directions(), n, self.hidden];
                let c_ok = match (&s.c, self.kind) {
                    (Some(c), RnnKind::Lstm) => c.dims() == want,
                    (None, RnnKind::Gru) => true,
                    _ => false,
                };
                if s.h.dims() != want || !c_ok {
                    return Err(Error::BadShape {
                        op: "Rnn::forward_seq",
                        msg: format!(
                            "the initial state must be {want:?} (layers × directions, batch, hidden){}",
                            if self.kind == RnnKind::Lstm { " for both h and c" } else { ", with no c" }
                        ),
                        shape: s.h.shape().clone(),
                    });
                }
                s
            }
            None => {
                zero = self.zero_state(n, x)?;
                &zero
            }
        };
        let nd = self.directions();
        let mut layer_in = x.clone();
        let (mut hs, mut cs) = (Vec::new(), Vec::new());
        for layer in 0..self.layers {
            let mut outs = Vec::with_capacity(nd);
            for dir in 0..nd {
                let idx = layer * nd + dir;
                let w = &self.dirs[idx];
                let h0 = state.h.narrow(0, idx, 1)?.squeeze(0)?;
                let c0 = match &state.c {
                    Some(c) => Some(c.narrow(0, idx, 1)?.squeeze(0)?),
                    None => None,
                };
                let (y, h, c) = match (&within, dir == 1) {
                    (Some(ids), true) => {
                        let flip = |t: &Tensor| -> Result<Tensor> {
                            let dims = t.dims().to_vec();
                            t.reshape(vec![dims[0] * dims[1], dims[2]])?
                                .index_select(ids, 0)?
                                .reshape(dims)
                        };
                        let (y, h, c) =
                            self.run_direction(w, &flip(&layer_in)?, h0, c0, false, steps)?;
                        (flip(&y)?, h, c)
                    }
                    _ => self.run_direction(w, &layer_in, h0, c0, dir == 1, steps)?,
                };
                outs.push(y);
                hs.push(h);
                cs.extend(c);
            }
            layer_in = if nd == 1 {
                outs.remove(0)
            } else {
                Tensor::cat(&outs, 2)?
            };
            if layer + 1 < self.layers && ctx.training && self.dropout > 0.0 {
                layer_in = layer_in.dropout(self.dropout, &mut ctx.rng)?;
            }
        }
        let h = Tensor::stack(&hs, 0)?;
        let c = if cs.is_empty() {
            None
        } else {
            Some(Tensor::stack(&cs, 0)?)
        };
        Ok((layer_in, RnnState { h, c }))
    }

    /// One direction of one layer: returns `([T, N, H], h_last, c_last)`.
    fn run_direction(
        &self,
        w: &Direction,
        x: &Tensor,
        mut h: Tensor,
        mut c: Option<Tensor>,
        reverse: bool,
        steps: usize,
    ) -> Result<(Tensor, Tensor, Option<Tensor>)> {
        // Input projections of all steps in one product: [T, N, G·H]. An LSTM adds both
        // biases here once (they enter its gates additively); a GRU's b_hh is scaled by
        // the reset gate in the candidate, so it stays in the recurrent part.
        let bias = match self.kind {
            RnnKind::Lstm => w.b_ih.add(&w.b_hh)?,
            RnnKind::Gru => w.b_ih.clone(),
        };
        let xp = x.matmul(&w.w_ih.transpose_last()?)?.add(&bias)?;
        if let RnnKind::Lstm = self.kind {
            // The recurrence as one op (cuDNN's structure): per step one product and one
            // fused cell, and W_hh's gradient as one product over all steps.
            let c0 = c
                .take()
                .ok_or_else(|| Error::msg("LSTM: missing cell state"))?;
            let s = Tensor::lstm_sequence(&xp, &w.w_hh, &h, &c0, reverse)?;
            return Ok((s.output, s.h_last, Some(s.c_last)));
        }
        // Laid out densely once per sequence: `gemm` repacks a transposed view on every
        // product, which with a few batch rows costs more than the product.
        let w_hh_t = w.w_hh.transpose_last()?.contiguous()?;
        let mut outs: Vec<Option<Tensor>> = vec![None; steps];
        let order: Vec<usize> = if reverse {
            (0..steps).rev().collect()
        } else {
            (0..steps).collect()
        };
        for t in order {
            // A GRU step: the recurrent product, then the gate nonlinearities and the state
            // update as one fused op (one kernel on the GPU; formulas in kernels/rnn.cu).
            let gx = xp.narrow(0, t, 1)?.squeeze(0)?;
            let gh = h.matmul(&w_hh_t)?.add(&w.b_hh)?;
            h = Tensor::gru_cell(&gx, &gh, &h)?;
            outs[t] = Some(h.clone());
        }
        let outs: Vec<Tensor> = outs
            .into_iter()
            .map(|o| o.ok_or_else(|| Error::msg("Rnn: empty sequence")))
            .collect::<Result<_>>()?;
        Ok((Tensor::stack(&outs, 0)?, h, c))
    }
}

/// Row indices into a `[T·N, F]` view of a time-major batch that reverse each sample's
/// first `lengths[b]` steps and leave its padding in place (the map is its own inverse).
fn reverse_within(lengths: &[usize], steps: usize, device: tensor::Device) -> Result<Tensor> {
    let n = lengths.len();
    let mut ids = Vec::with_capacity(steps * n);
    for t in 0..steps {
        for (b, &len) in lengths.iter().enumerate() {
            let src = if t < len { len - 1 - t } else { t };
            ids.push((src * n + b) as u32);
        }
    }
    Tensor::from_vec(ids, vec![steps * n], device)
}

impl Module for Rnn {
    /// The output sequence from a zero state.
    fn forward(&self, x: &Tensor, ctx: &mut Ctx) -> Result<Tensor> {
        Ok(self.forward_seq(x, None, ctx)?.0)
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        for d in &self.dirs {
            for (kind, t) in [
                ("weight_ih", &d.w_ih),
                ("weight_hh", &d.w_hh),
                ("bias_ih", &d.b_ih),
                ("bias_hh", &d.b_hh),
            ] {
                out.push(NamedTensor::at(prefix, &format!("{kind}_{}", d.suffix), t));
            }
        }
    }
}
