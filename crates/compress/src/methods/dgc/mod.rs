//! Deep Gradient Compression (Lin et al., paper 000, Alg. 3 and 4), each technique
//! switchable so that Figure 3's ablation curves can be reproduced.
//!
//! Per parameter and step, with local gradient `g` and weights `w`:
//!
//! 1. local gradient clipping (optional): if ‖g‖₂ exceeds `clip · N^1/2`, rescale `g` to
//!    that norm (§3.2, App. C). The paper clips its node's share `G^k = g/N` (Alg. 3
//!    line 6 scales by 1/(Nb); the nodes' shares are summed) at `N^-1/2 · clip`, `clip`
//!    being the threshold on the averaged gradient; our `g` is the rank's mean gradient,
//!    N times that share, so the same rule reads `‖g‖ ≤ N^1/2 · clip`. It is per tensor,
//!    because each tensor is exchanged as soon as its gradient is ready and a global
//!    norm would wait for the whole backward pass. Tensors sent dense (below) are
//!    not clipped unless `clip_dense` says how ([`DenseClip`]);
//! 2. with momentum correction the velocity is accumulated: vanilla `u = m·u + g; v += u`
//!    (Eq. 7), Nesterov `u = m·(u + g); v += u + g` (Alg. 4). Without it (gradient
//!    dropping) `v += g` and the optimizer applies momentum and decay;
//! 3. the k = ⌈density_t·n⌉ entries of largest |v| are selected: by the sampled
//!    threshold (hierarchical selection) or exactly; they are sent and cleared from `v`,
//!    and with momentum factor masking also from `u`;
//! 4. the wire carries 32-bit values with 16-bit zero-run lengths (`codec::zero_run`);
//!    messages are allgathered and summed in rank order, then averaged;
//! 5. with momentum correction the result is a [`UpdateKind::Direction`] (apply
//!    `w −= lr·d`); without, a [`UpdateKind::Gradient`]. Weight decay under momentum
//!    correction is the reference's by default ([`Decay::Dense`]): a buffer of its own,
//!    `d = m·d + wd·w`, added to the averaged direction, so every weight decays every
//!    step; `decay=compressed` instead adds `wd·w` to `g` in step 2, where it is
//!    sparsified and delayed with the gradient.
//!
//! Tensors below `dense_below` elements (biases, batch norm) are allreduced densely and
//! left to the optimizer, as in the paper's code. `dense_1d` sends every 1-D tensor
//! (every bias and batch-norm vector, whatever its length) dense as well: the paper's
//! Table 3 sizes are that rule's arithmetic (ResNet-50: 54,120 batch-norm and bias
//! values × 4 bytes + 0.1 % of the weights × 6 bytes = 0.35 MB, 277×; AlexNet's 10,568
//! biases the same way: 0.39 MB, 597×), where `dense_below = 1000` alone gives 417× and
//! 655×.
//!
//! Warm-up: during `warmup_epochs` the density steps through `warmup_densities` (default
//! 25 %, 6.25 %, 1.5625 %, 0.4 %: the paper's 75 % → 93.75 % → 98.4375 % → 99.6 % sparsity), then stays at `density`.
//! With every switch off DGC is exactly gradient dropping (`topk`), which a test checks.

mod config;
mod device;

pub use config::{Decay, DenseClip, DgcConfig};
pub use device::DgcOnDevice;

use crate::codec::zero_run;
use crate::exchange::{
    allgather_average, check_len, check_numel, dense_average, dense_average_tensor, keep_count,
    sparse_average_tensor, Meter,
};
use crate::method::{
    HostExchange, Method, ParamSpec, StateTensors, StepInfo, TensorExchange, TensorUpdate, Update,
    UpdateKind,
};
use crate::select::{exact_topk, sampled_threshold};
use crate::{CompressError, Result};
use config::{clip_factor, clip_from_sum_sq};
use tensor::sparsify::{self, Selected};
use tensor::{Rng, Tensor};

pub struct Dgc {
    cfg: DgcConfig,
    world: usize,
    rng: Rng,
    /// Velocity `u` (only with momentum correction) and accumulation `v`, per parameter.
    u: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    /// The weight decay's momentum buffer `d` per parameter sent sparse, with
    /// [`Decay::Dense`] (empty otherwise).
    d: Vec<Vec<f32>>,
    sizes: Vec<usize>,
    /// Which parameters are exchanged dense (`dense_below`, `dense_1d`).
    dense: Vec<bool>,
    epoch: f64,
    /// The parameters, as [`Method::init`] declared them ([`Method::place`] needs them).
    params: Vec<ParamSpec>,
    /// Once [`Method::place`]d: the state on the device, which then replaces `u`, `v` and
    /// `rng` (emptied) for the exchange on tensors, the checkpoint and the resume.
    on_device: Option<DgcOnDevice>,
}

impl Dgc {
    pub fn new(cfg: DgcConfig, world: usize, rng: Rng) -> Result<Self> {
        cfg.validate()?;
        Ok(Dgc {
            cfg,
            world,
            rng,
            u: Vec::new(),
            v: Vec::new(),
            d: Vec::new(),
            sizes: Vec::new(),
            dense: Vec::new(),
            epoch: 0.0,
            params: Vec::new(),
            on_device: None,
        })
    }
    pub fn density_now(&self) -> f64 {
        self.cfg.density_at(self.epoch)
    }
    /// What an exchange's result is: with momentum correction a direction (the velocity,
    /// decay included, is DGC's own), else a gradient for the optimizer.
    fn kind(&self) -> UpdateKind {
        if self.cfg.momentum_correction {
            UpdateKind::Direction
        } else {
            UpdateKind::Gradient
        }
    }

    /// The local half of [`Method::exchange`] for a parameter sent sparse: clipping,
    /// accumulation, selection, and clearing what is sent from the accumulators (and the
    /// velocity, with masking). Returns the chosen indices (ascending) and values.
    /// `DgcOnDevice::compress` does the same on tensors and must choose the same entries.
    pub fn compress(
        &mut self,
        index: usize,
        weights: &[f32],
        grad: &[f32],
    ) -> Result<(Vec<u32>, Vec<f32>)> {
        let n = grad.len();
        if self.dense.get(index) != Some(&false) || self.v[index].len() != n {
            return Err(CompressError::Usage(format!(
                "dgc: parameter {index} is not one sent sparse with {n} elements"
            )));
        }
        let c = &self.cfg;
        let gs = clip_factor(grad, c.clip, self.world);
        let (u, v) = (&mut self.u[index], &mut self.v[index]);
        // The weights are read only for weight decay in the accumulation (absent weights
        // arrive here as an empty slice); zeros stand in for them, as on the device.
        let reads = c.compressed_decay() && !weights.is_empty();
        if reads && weights.len() != n {
            return Err(CompressError::Usage(format!(
                "dgc: parameter {index} has {n} elements, but {} weights were passed",
                weights.len()
            )));
        }
        let w = reads.then_some(weights);
        let u_opt = c.momentum_correction.then_some(&mut u[..]);
        sparsify::accumulate_slices(u_opt, v, grad, w, c.accumulation(gs));
        let k = keep_count(c.density_at(self.epoch), n);
        let idx = if c.sampling {
            sampled_threshold(v, k, c.sample_fraction, &mut self.rng)
        } else {
            exact_topk(v, k)
        };
        let vals: Vec<f32> = idx.iter().map(|&i| v[i as usize]).collect();
        for &i in &idx {
            v[i as usize] = 0.0;
            if c.masking {
                u[i as usize] = 0.0;
            }
        }
        Ok((idx, vals))
    }

    /// [`Decay::Dense`]'s step on parameter `index`: `d = m·d + wd·w`, and `out` (the
    /// averaged direction) gains `d`, as the reference's `DGCSGD.step` adds its decay
    /// buffer to the gradient (Nesterov: `d = m·(d + wd·w)`, `out += d + wd·w`, the
    /// reference's `wd·w + m·d` with the buffer kept m times larger). One pass of the
    /// accumulation primitive, so `DgcOnDevice::add_decay` does the same, bit for bit.
    /// Nothing without [`Decay::Dense`].
    pub fn add_decay(&mut self, index: usize, weights: &[f32], out: &mut [f32]) -> Result<()> {
        if !self.cfg.dense_decay() || self.dense[index] {
            return Ok(());
        }
        let d = &mut self.d[index];
        if weights.len() != d.len() || out.len() != d.len() {
            return Err(CompressError::Usage(format!(
                "dgc: parameter {index} has {} elements, but {} weights and {} values were passed",
                d.len(),
                weights.len(),
                out.len()
            )));
        }
        sparsify::accumulate_slices(Some(d), out, weights, None, self.cfg.decay_accumulation());
        Ok(())
    }
}

impl Method for Dgc {
    fn name(&self) -> &'static str {
        "dgc"
    }
    fn describe(&self) -> String {
        let c = &self.cfg;
        format!(
            "dgc(density={}, dense_below={}, dense_1d={}, momentum={}, nesterov={}, weight_decay={}, decay={:?}, momentum_correction={}, masking={}, clip={}, clip_dense={:?}, warmup_epochs={}, warmup_densities={:?}, sampling={}, sample_fraction={})",
            c.density, c.dense_below, c.dense_1d, c.momentum, c.nesterov, c.weight_decay, c.decay, c.momentum_correction,
            c.masking, c.clip, c.clip_dense, c.warmup_epochs, c.warmup_densities, c.sampling, c.sample_fraction
        )
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.params = params.to_vec();
        self.on_device = None;
        self.sizes = params.iter().map(|p| p.numel()).collect();
        self.dense = params.iter().map(|p| self.cfg.is_dense(p)).collect();
        let state = |with: bool| -> Vec<Vec<f32>> {
            (self.sizes.iter().zip(&self.dense))
                .map(|(&n, &dense)| vec![0.0; if with && !dense { n } else { 0 }])
                .collect()
        };
        self.v = state(true);
        self.u = state(self.cfg.momentum_correction);
        self.d = state(self.cfg.dense_decay());
        Ok(())
    }
    fn warmup_epochs(&self) -> f64 {
        self.cfg.warmup_epochs
    }
    fn begin_step(&mut self, info: StepInfo) {
        self.epoch = info.epoch;
        if let Some(d) = &mut self.on_device {
            d.begin_step(info);
        }
    }
    fn reads_weights(&self) -> bool {
        self.cfg.momentum_correction && self.cfg.weight_decay != 0.0
    }
    /// With momentum correction the velocity, decay included, is DGC's own.
    fn replaces_optimizer(&self) -> bool {
        self.cfg.momentum_correction
    }
    fn exchange(&mut self, x: HostExchange<'_>) -> Result<Update> {
        let (comm, index, grad, weights) = (x.comm, x.index, x.grad, x.weights);
        let weights: &[f32] = weights.unwrap_or_default();
        if self.on_device.is_some() {
            return Err(CompressError::Usage(
                "dgc: the state is on the device (place was called): exchange tensors".into(),
            ));
        }
        let n = check_len("dgc", index, self.sizes.get(index).copied(), &[grad])?;
        if self.reads_weights() && weights.len() != n {
            return Err(CompressError::Usage(format!(
                "dgc: parameter {index} has {n} elements, but {} weights were passed (weight decay reads them)",
                weights.len()
            )));
        }
        // Local clipping as a factor on the gradient, so the gradient is never copied
        // (except for a dense tensor clipped locally); the norm is taken only where the
        // factor is used.
        if self.dense[index] {
            let clip = self.cfg.clip;
            return match self.cfg.clip_dense {
                DenseClip::Local if clip > 0.0 => {
                    let gs = clip_factor(grad, clip, self.world);
                    let clipped: Vec<f32> = grad.iter().map(|&g| gs * g).collect();
                    dense_average(comm, &clipped)
                }
                DenseClip::Averaged if clip > 0.0 => {
                    let mut u = dense_average(comm, grad)?;
                    let gs = clip_factor(&u.values, clip, 1);
                    if gs < 1.0 {
                        u.values.iter_mut().for_each(|x| *x *= gs);
                    }
                    Ok(u)
                }
                _ => dense_average(comm, grad),
            };
        }
        let mut m = Meter::new(n);
        let message = m.compress(|| {
            let (idx, vals) = self.compress(index, weights, grad)?;
            zero_run::encode_sparse(&idx, &vals)
                .map(|b| (b, idx.len()))
                .map_err(|e| CompressError::Usage(format!("dgc encode: {e}")))
        });
        let (message, sent) = message?;
        m.stats.sent_values = sent;
        let mut out = allgather_average(comm, &mut m, "dgc", index, n, &message, |b, out| {
            zero_run::decode_add(b, out).map(|_| ())
        })?;
        self.add_decay(index, weights, &mut out)?;
        Ok(m.update(out, self.kind()))
    }
    /// Moves `u`, `v` and the generator into a [`DgcOnDevice`] on `device`, the host
    /// vectors freed; a checkpoint loaded before or after resumes the same.
    fn place(&mut self, device: tensor::Device) -> Result<()> {
        let host = self.state()?;
        let mut d = DgcOnDevice::new(self.cfg.clone(), self.world, self.rng.clone())?;
        d.init(&self.params, device)?;
        d.load_state(&host)?;
        d.begin_step(StepInfo {
            step: 0,
            epoch: self.epoch,
        });
        self.u = Vec::new();
        self.v = Vec::new();
        self.on_device = Some(d);
        Ok(())
    }
    /// [`Method::exchange`] on tensors: the local half by [`DgcOnDevice::compress`] (the
    /// same entries, bit for bit), the chosen pairs summed by the group's TopKAllReduce
    /// (they travel as (u32, f32) pairs: 8 bytes each where the zero-run format takes 6;
    /// `WireStats` reports the zero-run length, the paper's measure, as the host path
    /// does, and the communicator's counters what crossed the wire). The pairs are read to
    /// the host once, to measure that length and refuse inf and NaN as the host path's
    /// encoder does.
    fn exchange_tensor(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        let (group, index, grad, weights) = (x.comm, x.index, x.grad, x.weights);
        let n = check_numel("dgc", index, self.sizes.get(index).copied(), grad)?;
        let reads_weights = self.reads_weights();
        let Some(d) = &mut self.on_device else {
            return Err(CompressError::Usage(
                "dgc: exchange_tensor before place (the state is on the host)".into(),
            ));
        };
        if self.dense[index] {
            let clip = self.cfg.clip;
            let factor = |t: &Tensor, world| -> Result<f32> {
                Ok(clip_from_sum_sq(sparsify::sum_of_squares(t)?, clip, world))
            };
            let scaled = |t: &Tensor, s: f32| tensor::no_grad(|| t.scale(s as f64));
            return match self.cfg.clip_dense {
                DenseClip::Local if clip > 0.0 => {
                    dense_average_tensor(group, &scaled(grad, factor(grad, self.world)?)?)
                }
                DenseClip::Averaged if clip > 0.0 => {
                    let mut u = dense_average_tensor(group, grad)?;
                    let gs = factor(&u.values, 1)?;
                    if gs < 1.0 {
                        u.values = scaled(&u.values, gs)?;
                    }
                    Ok(u)
                }
                _ => dense_average_tensor(group, grad),
            };
        }
        if let Some(w) = weights.filter(|_| reads_weights) {
            check_numel("dgc (weights)", index, Some(n), w)?;
        }
        if reads_weights && weights.is_none() {
            return Err(CompressError::Usage(format!(
                "dgc: parameter {index}: weight decay reads the weights, and none were passed"
            )));
        }
        let mut m = Meter::new(n);
        let sel = m.compress(|| -> Result<(Selected, usize)> {
            let flat = grad.flatten_all()?;
            let w = weights.map(|w| w.flatten_all()).transpose()?;
            let sel = d.compress(index, w.as_ref(), &flat)?;
            // The pairs on the host (8 bytes per value sent) for the message measure and
            // the same refusal of inf and NaN as the host path's encoder gives.
            let (indices, values) = sel.to_vecs()?;
            zero_run::check_finite(&indices, &values)
                .map_err(|e| CompressError::Usage(format!("dgc encode: {e}")))?;
            Ok((sel, zero_run::encoded_len(&indices)))
        });
        let (sel, message_bytes) = sel?;
        m.stats.sent_values = sel.len();
        m.stats.message_bytes = message_bytes;
        let values = sparse_average_tensor(group, &mut m, &sel, grad.dims())?;
        if let Some(w) = weights.filter(|_| reads_weights) {
            d.add_decay(index, w, &values)?;
        }
        Ok(m.tensor_update(values, self.kind()))
    }
    fn state(&self) -> Result<StateTensors> {
        if let Some(d) = &self.on_device {
            return d.state();
        }
        Ok(checkpoint(&self.u, &self.v, &self.d, &self.rng))
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        if let Some(d) = &mut self.on_device {
            return d.load_state(state);
        }
        self.rng = restore(state, &mut self.u, &mut self.v, &mut self.d)?;
        Ok(())
    }
}

/// The checkpoint format both sides write: `u.{i}`, `v.{i}` and `d.{i}` for every
/// parameter (empty where absent), then the generator.
fn checkpoint(u: &[Vec<f32>], v: &[Vec<f32>], d: &[Vec<f32>], rng: &Rng) -> StateTensors {
    let mut s = crate::methods::named_state("u", u);
    s.extend(crate::methods::named_state("v", v));
    s.extend(crate::methods::named_state("d", d));
    s.push(("rng".into(), crate::methods::rng_to_state(rng)));
    s
}

/// Fills `u`, `v` and `d` (allocated to this configuration's sizes) from a [`checkpoint`],
/// checking every name and length; returns the generator. A checkpoint without `d.*`
/// (written before the decay buffer existed) loads where no buffer is needed.
fn restore(
    state: &StateTensors,
    u: &mut Vec<Vec<f32>>,
    v: &mut Vec<Vec<f32>>,
    d: &mut Vec<Vec<f32>>,
) -> Result<Rng> {
    let (rng, rest) = crate::methods::split_rng("dgc", state)?;
    if rest.iter().any(|(k, _)| k.starts_with("d.")) {
        crate::methods::load_named("dgc", &rest, &mut [("u", u), ("v", v), ("d", d)])?;
    } else if d.iter().all(|x| x.is_empty()) {
        crate::methods::load_named("dgc", &rest, &mut [("u", u), ("v", v)])?;
    } else {
        return Err(CompressError::Usage(
            "dgc: the checkpoint has no weight-decay buffers (d.*): it was written with decay=compressed or before decay=dense existed; resume with --method-opt decay=compressed".into(),
        ));
    }
    Ok(rng)
}
