//! gTop-k S-SGD (Shi et al., paper 002, Alg. 4). Per parameter and step:
//!
//! - `G += ∇` (line 4, the residual absorbs the gradient); the local top-k of |G| is the
//!   sparse `G̃ᵍ` and is cleared from `G` (lines 5–8);
//! - `gtopk_allreduce` (Alg. 3: a tree of ⊤ merges to rank 0, then a broadcast) gives the
//!   global top-k `G̃` and its index set `gMask` (line 9);
//! - put-back (line 10): a locally selected value whose index did not survive globally
//!   goes back into the residual, so nothing is lost;
//! - the optimizer applies `G̃ / P` (line 11, averaged like every method here).
//!
//! Warm-up (optional, off by default): the paper's convergence runs (§V) use densities
//! 0.25, 0.0725, 0.015 and 0.004 over the first 4 epochs (`warmup_epochs=4`; the
//! densities are `warmup_densities`), then `density`. k stays the same on every rank
//! because the epoch does. The paper selects k = ρ·m over the whole model's gradient;
//! here k = ⌈ρ·n⌉ per tensor (at least 1), because each tensor is exchanged as soon as
//! backward produces it.
//!
//! Conservation: what all ranks applied (times P) plus what stays in their residuals
//! equals what they accumulated, exactly for two workers. With more, the tree truncates
//! partial sums at inner levels: an index dropped inside one subtree can still win at
//! the root from another, and the dropped part is then neither applied nor put back.
//! That is the paper's algorithm; `lost_mass` in the tests measures how rare it is.
//!
//! On tensors (`place`, `exchange_tensor`): the residuals live on the device, the local
//! top-k is `tensor::sparsify::topk_magnitude` (the same entries as `exact_topk`), the
//! tree is the group's `gtopk_allreduce` (NCCL's composed one, or TCP's streamed one),
//! and the two selections' pairs are read to the host once each (k values) to refuse a
//! diverged value and compute the put-back, which goes back as one scatter. The same
//! updates and residuals as on slices, bit for bit (tests/exchange_tensor.rs).

use crate::exchange::{
    check_warmup, dense_average, dense_average_tensor, keep_count, refuse_non_finite,
    warmup_density, Meter,
};
use crate::method::{
    HostExchange, Method, ParamSpec, StateTensors, TensorExchange, TensorUpdate, Update, UpdateKind,
};
use crate::methods::PerParam;
use crate::select::exact_topk;
use crate::{CompressError, Result};
use comm::SparseVec;
use tensor::sparsify;
use tensor::{DType, Device, Tensor};

pub struct GTopK {
    density: f64,
    dense_below: usize,
    world: usize,
    warmup_epochs: f64,
    warmup_densities: Vec<f64>,
    /// The current step's epoch (from `begin_step`), for the warm-up.
    epoch: f64,
    /// The residual per parameter, on the host or (once placed) on the device.
    residual: PerParam,
}

impl GTopK {
    pub fn new(density: f64, dense_below: usize, world: usize) -> Result<Self> {
        crate::options::check_density("gtopk", density)?;
        Ok(GTopK {
            density,
            dense_below,
            world,
            warmup_epochs: 0.0,
            warmup_densities: Vec::new(),
            epoch: 0.0,
            residual: PerParam::new("residual"),
        })
    }

    /// Adds the staged density warm-up (`epochs` ≤ 0: none).
    pub fn with_warmup(mut self, epochs: f64, densities: Vec<f64>) -> Result<Self> {
        check_warmup("gtopk", epochs, &densities)?;
        self.warmup_epochs = epochs;
        self.warmup_densities = densities;
        Ok(self)
    }

    /// The density of the current step.
    pub fn density_now(&self) -> f64 {
        warmup_density(
            self.density,
            self.warmup_epochs,
            &self.warmup_densities,
            self.epoch,
        )
    }
}

impl Method for GTopK {
    fn name(&self) -> &'static str {
        "gtopk"
    }
    fn describe(&self) -> String {
        format!(
            "gtopk(density={}, dense_below={}, warmup_epochs={}, warmup_densities={:?})",
            self.density, self.dense_below, self.warmup_epochs, self.warmup_densities
        )
    }
    fn warmup_epochs(&self) -> f64 {
        self.warmup_epochs
    }
    fn begin_step(&mut self, info: crate::method::StepInfo) {
        self.epoch = info.epoch;
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.residual.init(params);
        Ok(())
    }
    fn exchange(&mut self, x: HostExchange<'_>) -> Result<Update> {
        let (comm, index, grad) = (x.comm, x.index, x.grad);
        let (density, dense_below) = (self.density_now(), self.dense_below);
        let (r, n) = self.residual.host_for("gtopk", index, grad)?;
        if n < dense_below {
            return dense_average(comm, grad);
        }
        let k = keep_count(density, n);
        let mut m = Meter::new(n);
        let local = m.compress(|| {
            r.iter_mut().zip(grad).for_each(|(r, g)| *r += g);
            let idx = exact_topk(r, k);
            let values: Vec<f32> = idx.iter().map(|&i| r[i as usize]).collect();
            // inf and NaN rank above every finite |value|, so a diverged gradient shows
            // among the selected ones; the sender names it (a peer would only see a
            // malformed message).
            refuse_non_finite("gtopk", index, "the gradient", &values)?;
            idx.iter().for_each(|&i| r[i as usize] = 0.0);
            Ok::<_, CompressError>(SparseVec {
                indices: idx,
                values,
            })
        })?;
        m.stats.sent_values = local.len();
        m.stats.message_bytes = 4 + 8 * local.len();
        let global = m.comm(|| comm.gtopk_allreduce(&local, k))?;
        let world = self.world as f32;
        let out = m.decompress(|| {
            let mut out = vec![0f32; n];
            for (&i, &v) in global.indices.iter().zip(&global.values) {
                let slot = out.get_mut(i as usize).ok_or_else(|| {
                    CompressError::Usage(format!(
                        "gtopk: the global top-k of parameter {index} has index {i} beyond its {n} elements (do all ranks train the same model?)"
                    ))
                })?;
                // The ⊤ merge ranks inf and NaN first, and every sender refuses its own, so
                // one here came from a peer that does not: refused, not applied everywhere.
                if !v.is_finite() {
                    return Err(CompressError::Usage(format!(
                        "gtopk: the global top-k of parameter {index} holds {v} at index {i} (a peer diverged or sent a malformed message)"
                    )));
                }
                *slot = v / world;
            }
            // Put-back (Alg. 4 line 10): both index lists are ascending, so one merge pass.
            let mut g = global.indices.iter().peekable();
            for (&i, &v) in local.indices.iter().zip(&local.values) {
                while g.next_if(|&&j| j < i).is_some() {}
                if g.peek() != Some(&&i) {
                    r[i as usize] += v;
                }
            }
            Ok::<_, CompressError>(out)
        })?;
        Ok(m.update(out, UpdateKind::Gradient))
    }
    fn place(&mut self, device: Device) -> Result<()> {
        self.residual.place(device)
    }
    fn exchange_tensor(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        let (group, index, grad) = (x.comm, x.index, x.grad);
        let k = keep_count(self.density_now(), grad.elem_count());
        let (world, dense_below) = (self.world, self.dense_below);
        let (r, n) = self
            .residual
            .on_device("gtopk")?
            .for_grad("gtopk", index, grad)?;
        if n < dense_below {
            return dense_average_tensor(group, grad);
        }
        let mut m = Meter::new(n);
        let (local, sent) = m.compress(|| -> Result<_> {
            tensor::no_grad(|| r.assign(&r.add(&grad.flatten_all()?)?))?;
            let local = sparsify::topk_magnitude(r, k)?;
            // On the host once: the sender refuses a diverged value, as on slices.
            let sent = local.to_vecs()?;
            refuse_non_finite("gtopk", index, "the gradient", &sent.1)?;
            sparsify::zero_selected(r, &local)?;
            Ok((local, sent))
        })?;
        m.stats.sent_values = local.len();
        m.stats.message_bytes = 4 + 8 * local.len();
        let global = m.comm(|| group.gtopk_allreduce(&local, k))?;
        let values = m.decompress(|| -> Result<Tensor> {
            let (gi, gv) = global.to_vecs()?;
            if let Some((&i, _)) = gi.iter().zip(&gv).find(|(&i, _)| i as usize >= n) {
                return Err(CompressError::Usage(format!(
                    "gtopk: the global top-k of parameter {index} has index {i} beyond its {n} elements (do all ranks train the same model?)"
                )));
            }
            if let Some((i, v)) = gi.iter().zip(&gv).find(|(_, v)| !v.is_finite()) {
                return Err(CompressError::Usage(format!(
                    "gtopk: the global top-k of parameter {index} holds {v} at index {i} (a peer diverged or sent a malformed message)"
                )));
            }
            // Put-back (Alg. 4 line 10) of the local entries that lost, on the host (k
            // pairs, one merge pass), then one scatter into the residual (zero there).
            let mut g = gi.iter().peekable();
            let (mut back_i, mut back_v) = (Vec::new(), Vec::new());
            for (&i, &v) in sent.0.iter().zip(&sent.1) {
                while g.next_if(|&&j| j < i).is_some() {}
                if g.peek() != Some(&&i) {
                    back_i.push(i);
                    back_v.push(v);
                }
            }
            let device = r.device();
            if !back_i.is_empty() {
                let len = back_i.len();
                let bi = Tensor::from_vec(back_i, len, device)?;
                let bv = Tensor::from_vec(back_v, len, device)?;
                let back = bv.index_add_into(&bi, 0, &n.into())?;
                tensor::no_grad(|| r.assign(&r.add(&back)?))?;
            }
            // v / P as the host divides (not times 1/P), then scattered into zeros.
            let dense = if global.is_empty() {
                Tensor::zeros(n, DType::F32, device)?
            } else {
                let p = Tensor::full(world as f64, global.len(), DType::F32, device)?;
                global.values.div(&p)?.index_add_into(&global.indices, 0, &n.into())?
            };
            Ok(dense.reshape(grad.dims())?)
        })?;
        Ok(m.tensor_update(values, UpdateKind::Gradient))
    }
    fn state(&self) -> Result<StateTensors> {
        self.residual.state()
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        self.residual.load("gtopk", state)
    }
}
