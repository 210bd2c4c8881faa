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
//!    norm would wait for the whole backward pass. Tensors sent dense (below) are not
//!    clipped, as in the reference code, unless `clip_dense`;
//! 2. with momentum correction, weight decay `g += wd·w` and the velocity is accumulated:
//!    vanilla `u = m·u + g; v += u` (Eq. 7), Nesterov `u = m·(u + g); v += u + g` (Alg. 4).
//!    Without it (gradient dropping) `v += g` and the optimizer applies momentum and decay;
//! 3. the k = ⌈density_t·n⌉ entries of largest |v| are selected: by the sampled
//!    threshold (hierarchical selection) or exactly; they are sent and cleared from `v`,
//!    and with momentum factor masking also from `u`;
//! 4. the wire carries 32-bit values with 16-bit zero-run lengths (`codec::zero_run`);
//!    messages are allgathered and summed in rank order, then averaged;
//! 5. with momentum correction the result is a [`UpdateKind::Direction`] (apply
//!    `w −= lr·d`); without, a [`UpdateKind::Gradient`].
//!
//! Tensors below `dense_below` elements (biases, batch norm) are allreduced densely and
//! left to the optimizer, as in the paper's code. `dense_1d` sends every 1-D tensor
//! (every bias and batch-norm vector, whatever its length) dense as well: the paper's
//! Table 3 sizes are that rule's arithmetic (ResNet-50: 54,120 batch-norm and bias
//! values × 4 bytes + 0.1 % of the weights × 6 bytes = 0.35 MB, 277×; AlexNet's 10,568
//! biases the same way: 0.39 MB, 597×), where `dense_below = 1000` alone gives 417× and
//! 655×.
//!
//! Warm-up: during `warmup_epochs` the density steps through `warmup_densities` (default 25 %, 6.25 %, 1.5625 %, 0.4 %: the
//! paper's 75 % → 93.75 % → 98.4375 % → 99.6 % sparsity), then stays at `density`.
//! With every switch off DGC is exactly gradient dropping (`topk`), which a test checks.

use crate::codec::zero_run;
use crate::exchange::{
    allgather_average, check_len, check_numel, check_warmup, dense_average, dense_average_tensor,
    keep_count, sparse_average_tensor, warmup_density, Meter,
};
use crate::method::{Method, ParamSpec, StateTensors, StepInfo, TensorUpdate, Update, UpdateKind};
use crate::select::{exact_topk, sampled_threshold, sampled_threshold_tensor};
use crate::{CompressError, Result};
use comm::{Communicator, ProcessGroup};
use tensor::sparsify::{self, Accumulate, AccumulateRule, Selected};
use tensor::{Device, Rng, Tensor};

#[derive(Clone, Debug, PartialEq)]
pub struct DgcConfig {
    pub density: f64,
    pub dense_below: usize,
    /// Every 1-D tensor (biases, batch norm) dense too, whatever its length.
    pub dense_1d: bool,
    pub momentum: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
    pub momentum_correction: bool,
    pub masking: bool,
    /// Clipping threshold on the averaged gradient (0: off); each rank clips its own mean
    /// gradient at `clip · √N` (the paper's `clip / √N` on its 1/N share).
    pub clip: f64,
    /// Clip the tensors sent dense as well. Off by default, as in the reference code
    /// (its clipping lives in the compressed tensors' momentum compensation); measured on
    /// dgc_table4's quick LM row, clipping the LSTM's biases too took the perplexity from
    /// 135.4 to 153.8 (dgc_table4's section of benchmarks/RESULTS.md).
    pub clip_dense: bool,
    pub warmup_epochs: f64,
    pub warmup_densities: Vec<f64>,
    pub sampling: bool,
    pub sample_fraction: f64,
}

impl DgcConfig {
    /// Gradient dropping: every DGC technique off.
    pub fn all_off(density: f64) -> Self {
        DgcConfig {
            density,
            dense_below: 0,
            dense_1d: false,
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
            momentum_correction: false,
            masking: false,
            clip: 0.0,
            clip_dense: false,
            warmup_epochs: 0.0,
            warmup_densities: Vec::new(),
            sampling: false,
            sample_fraction: 0.01,
        }
    }
    pub fn validate(&self) -> Result<()> {
        crate::options::check_density("dgc", self.density)?;
        check_warmup("dgc", self.warmup_epochs, &self.warmup_densities)?;
        if self.masking && !self.momentum_correction {
            return Err(CompressError::Config(
                "dgc: masking=true needs momentum_correction=true (without it the momentum lives in the optimizer, which DGC does not mask)".into(),
            ));
        }
        if !(self.sample_fraction > 0.0 && self.sample_fraction <= 1.0) {
            return Err(CompressError::Config(format!(
                "dgc: sample_fraction {} must be in (0, 1]",
                self.sample_fraction
            )));
        }
        if self.clip < 0.0 {
            return Err(CompressError::Config("dgc: clip must be ≥ 0".into()));
        }
        Ok(())
    }
    /// The density at a (fractional) epoch: the warm-up stage's, never below `density`.
    pub fn density_at(&self, epoch: f64) -> f64 {
        warmup_density(
            self.density,
            self.warmup_epochs,
            &self.warmup_densities,
            epoch,
        )
    }
}

/// The factor that clips `grad` to `clip · √world` (1 when it is within, or `clip` is 0):
/// the paper's per-node threshold `clip / √N` on its 1/N share, on our mean gradient.
/// A NaN norm gives 1 and an infinite one 0 (under which the inf entries become NaN):
/// either way a diverged gradient reaches the encoder, which names it.
fn clip_factor(grad: &[f32], clip: f64, world: usize) -> f32 {
    if clip <= 0.0 {
        return 1.0;
    }
    // In the GPU's order, so that DgcOnDevice clips by the same factor bit for bit.
    clip_from_sum_sq(sparsify::sum_of_squares_slice(grad), clip, world)
}

/// [`clip_factor`] from Σ g², which the tensor path takes on the gradient's device.
fn clip_from_sum_sq(sum_sq: f64, clip: f64, world: usize) -> f32 {
    if clip <= 0.0 {
        return 1.0;
    }
    let limit = clip * (world as f64).sqrt();
    let norm = sum_sq.sqrt();
    if norm > limit {
        (limit / norm) as f32
    } else {
        1.0
    }
}

impl DgcConfig {
    /// Whether a parameter of this shape is exchanged dense (`dense_below`, `dense_1d`).
    fn is_dense(&self, p: &ParamSpec) -> bool {
        p.numel() < self.dense_below || (self.dense_1d && p.shape.len() <= 1)
    }
    /// The accumulation this configuration runs, with clipping factor `scale`.
    fn accumulation(&self, scale: f32) -> Accumulate {
        Accumulate {
            rule: match (self.momentum_correction, self.nesterov) {
                (false, _) => AccumulateRule::Plain,
                (true, false) => AccumulateRule::Momentum,
                (true, true) => AccumulateRule::Nesterov,
            },
            scale,
            momentum: self.momentum as f32,
            weight_decay: self.weight_decay as f32,
        }
    }
}

pub struct Dgc {
    cfg: DgcConfig,
    world: usize,
    rng: Rng,
    /// Velocity `u` (only with momentum correction) and accumulation `v`, per parameter.
    u: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
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
        // The weights are read only for weight decay under momentum correction (the trainer
        // passes an empty slice otherwise); zeros stand in for them, as on the device.
        let reads = c.momentum_correction && c.weight_decay != 0.0 && !weights.is_empty();
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
}

impl Method for Dgc {
    fn name(&self) -> &'static str {
        "dgc"
    }
    fn describe(&self) -> String {
        let c = &self.cfg;
        format!(
            "dgc(density={}, dense_below={}, dense_1d={}, momentum={}, nesterov={}, weight_decay={}, momentum_correction={}, masking={}, clip={}, clip_dense={}, warmup_epochs={}, warmup_densities={:?}, sampling={}, sample_fraction={})",
            c.density, c.dense_below, c.dense_1d, c.momentum, c.nesterov, c.weight_decay, c.momentum_correction,
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
    fn exchange(
        &mut self,
        comm: &mut Communicator,
        index: usize,
        weights: &[f32],
        grad: &[f32],
    ) -> Result<Update> {
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
        // (except for a dense tensor clipped with `clip_dense`); the norm is taken only
        // where the factor is used.
        if self.dense[index] {
            let gs = if self.cfg.clip_dense {
                clip_factor(grad, self.cfg.clip, self.world)
            } else {
                1.0
            };
            if gs < 1.0 {
                let clipped: Vec<f32> = grad.iter().map(|&g| gs * g).collect();
                return dense_average(comm, &clipped);
            }
            return dense_average(comm, grad);
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
        let out = allgather_average(comm, &mut m, "dgc", index, n, &message, |b, out| {
            zero_run::decode_add(b, out).map(|_| ())
        })?;
        let kind = if self.cfg.momentum_correction {
            UpdateKind::Direction
        } else {
            UpdateKind::Gradient
        };
        Ok(m.update(out, kind))
    }
    fn on_tensors(&self) -> bool {
        true
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
    fn exchange_tensor(
        &mut self,
        group: &mut dyn ProcessGroup,
        index: usize,
        weights: Option<&Tensor>,
        grad: &Tensor,
    ) -> Result<TensorUpdate> {
        let n = check_numel("dgc", index, self.sizes.get(index).copied(), grad)?;
        let reads_weights = self.reads_weights();
        let Some(d) = &mut self.on_device else {
            return Err(CompressError::Usage(
                "dgc: exchange_tensor before place (the state is on the host)".into(),
            ));
        };
        if self.dense[index] {
            let gs = if self.cfg.clip_dense && self.cfg.clip > 0.0 {
                clip_from_sum_sq(sparsify::sum_of_squares(grad)?, self.cfg.clip, self.world)
            } else {
                1.0
            };
            if gs < 1.0 {
                return dense_average_tensor(group, &tensor::no_grad(|| grad.scale(gs as f64))?);
            }
            return dense_average_tensor(group, grad);
        }
        if let Some(w) = weights.filter(|_| reads_weights) {
            check_numel("dgc (weights)", index, Some(n), w)?;
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
        let kind = if self.cfg.momentum_correction {
            UpdateKind::Direction
        } else {
            UpdateKind::Gradient
        };
        Ok(TensorUpdate {
            values,
            kind,
            stats: m.stats,
        })
    }
    fn state(&self) -> Result<StateTensors> {
        if let Some(d) = &self.on_device {
            return d.state();
        }
        let mut s = crate::methods::named_state("u", &self.u);
        s.extend(crate::methods::named_state("v", &self.v));
        s.push(("rng".into(), crate::methods::rng_to_state(&self.rng)));
        Ok(s)
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        if let Some(d) = &mut self.on_device {
            return d.load_state(state);
        }
        let (rng, rest) = crate::methods::split_rng("dgc", state)?;
        self.rng = rng;
        crate::methods::load_named("dgc", &rest, &mut [("u", &mut self.u), ("v", &mut self.v)])
    }
}

/// DGC's local half on tensors, on the device where the gradients live: the state
/// (velocity `u`, accumulator `v`) is kept there, and each step runs the same clipping,
/// accumulation, selection and clearing as [`Dgc::compress`] with the primitives of
/// `tensor::sparsify`, so only the chosen (index, value) pairs are left to leave the
/// device. Given the same gradients and the same generator it chooses the same entries
/// as [`Dgc`] and leaves the same state, bit for bit (tests/dgc_device.rs, on the CPU
/// here and on a GPU by scripts/gpu-check.sh).
///
/// This is the compression side only: [`Dgc`]'s `exchange_tensor` (after `place`) drives
/// it and sums the pairs over a `ProcessGroup`.
pub struct DgcOnDevice {
    cfg: DgcConfig,
    world: usize,
    rng: Rng,
    /// Velocity (with momentum correction) and accumulator per parameter sent sparse;
    /// `None` for the parameters sent dense.
    state: Vec<Option<(Option<Tensor>, Tensor)>>,
    epoch: f64,
}

impl DgcOnDevice {
    pub fn new(cfg: DgcConfig, world: usize, rng: Rng) -> Result<Self> {
        cfg.validate()?;
        Ok(DgcOnDevice {
            cfg,
            world,
            rng,
            state: Vec::new(),
            epoch: 0.0,
        })
    }
    /// Allocates the state of every parameter sent sparse, zeroed, on `device`.
    pub fn init(&mut self, params: &[ParamSpec], device: Device) -> Result<()> {
        let zeros = |n: usize| Tensor::zeros(n, tensor::DType::F32, device);
        self.state = params
            .iter()
            .map(|p| -> Result<_> {
                if self.cfg.is_dense(p) {
                    return Ok(None);
                }
                let n = p.numel();
                let u = self.cfg.momentum_correction.then(|| zeros(n)).transpose()?;
                Ok(Some((u, zeros(n)?)))
            })
            .collect::<Result<_>>()?;
        Ok(())
    }
    pub fn begin_step(&mut self, info: StepInfo) {
        self.epoch = info.epoch;
    }
    /// Whether parameter `index` is exchanged dense (it then has no state here).
    pub fn is_dense(&self, index: usize) -> bool {
        !matches!(self.state.get(index), Some(Some(_)))
    }
    /// [`Dgc::compress`] on tensors: `grad` (and `weights`, read only with weight decay
    /// under momentum correction; `None` reads as zeros) flat f32 on the state's device.
    pub fn compress(
        &mut self,
        index: usize,
        weights: Option<&Tensor>,
        grad: &Tensor,
    ) -> Result<Selected> {
        let usage =
            |e: tensor::Error| CompressError::Usage(format!("dgc (device) parameter {index}: {e}"));
        let Some(Some((u, v))) = self.state.get(index) else {
            return Err(CompressError::Usage(format!(
                "dgc (device): parameter {index} is not one sent sparse"
            )));
        };
        let c = &self.cfg;
        let n = v.elem_count();
        let gs = if c.clip > 0.0 {
            clip_from_sum_sq(
                sparsify::sum_of_squares(grad).map_err(usage)?,
                c.clip,
                self.world,
            )
        } else {
            1.0
        };
        let w = weights.filter(|_| c.momentum_correction && c.weight_decay != 0.0);
        sparsify::accumulate(u.as_ref(), v, grad, w, c.accumulation(gs)).map_err(usage)?;
        let k = keep_count(c.density_at(self.epoch), n);
        let sel = if c.sampling {
            sampled_threshold_tensor(v, k, c.sample_fraction, &mut self.rng)
        } else {
            sparsify::topk_magnitude(v, k)
        }
        .map_err(usage)?;
        sparsify::zero_selected(v, &sel).map_err(usage)?;
        if let (true, Some(u)) = (c.masking, u) {
            sparsify::zero_selected(u, &sel).map_err(usage)?;
        }
        Ok(sel)
    }
    /// The state a resume needs, in [`Dgc`]'s checkpoint format (`u.{i}`, `v.{i}` for every
    /// parameter, empty where absent, then the generator), copied to the host: a
    /// checkpoint of either loads into the other.
    pub fn state(&self) -> Result<StateTensors> {
        let (mut u, mut v) = (Vec::new(), Vec::new());
        for i in 0..self.state.len() {
            let (ui, vi) = self.state_of(i)?;
            u.push(ui);
            v.push(vi);
        }
        let mut s = crate::methods::named_state("u", &u);
        s.extend(crate::methods::named_state("v", &v));
        s.push(("rng".into(), crate::methods::rng_to_state(&self.rng)));
        Ok(s)
    }
    /// Loads [`DgcOnDevice::state`]'s (or [`Dgc`]'s) format into the state on the device,
    /// checking every name and length first.
    pub fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        let (rng, rest) = crate::methods::split_rng("dgc", state)?;
        let len = |t: Option<&Tensor>| t.map_or(0, |t| t.elem_count());
        let mut u: Vec<Vec<f32>> = Vec::new();
        let mut v: Vec<Vec<f32>> = Vec::new();
        for s in &self.state {
            let (ut, vt) = match s {
                Some((ut, vt)) => (ut.as_ref(), Some(vt)),
                None => (None, None),
            };
            u.push(vec![0.0; len(ut)]);
            v.push(vec![0.0; len(vt)]);
        }
        crate::methods::load_named("dgc", &rest, &mut [("u", &mut u), ("v", &mut v)])?;
        for (s, (ui, vi)) in self.state.iter().zip(u.into_iter().zip(v)) {
            if let Some((ut, vt)) = s {
                let n = vi.len();
                vt.assign(&Tensor::from_vec(vi, n, tensor::Device::Cpu)?)?;
                if let Some(ut) = ut {
                    ut.assign(&Tensor::from_vec(ui, n, tensor::Device::Cpu)?)?;
                }
            }
        }
        self.rng = rng;
        Ok(())
    }
    /// The velocity and accumulator of parameter `index` on the host (empty where absent).
    pub fn state_of(&self, index: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        let host = |t: &Tensor| {
            t.to_vec::<f32>()
                .map_err(|e| CompressError::Usage(format!("dgc (device): {e}")))
        };
        match self.state.get(index) {
            Some(Some((u, v))) => Ok((
                u.as_ref().map(host).transpose()?.unwrap_or_default(),
                host(v)?,
            )),
            _ => Ok((Vec::new(), Vec::new())),
        }
    }
}
