//! Gradient dropping (Aji & Heafield; paper 001 Alg. 1) as `topk`, and its combination
//! with the local gradient (paper 001 Alg. 2) as `local`.
//!
//! Per parameter and step: `E += L` (the residual absorbs the local gradient), the k
//! entries of largest |E| become the sparse `S` and are cleared from `E`, and
//! TopKAllReduce sums every rank's `S` into `G`. `topk` hands `G` to the optimizer.
//! `local` hands it a combination `C` with the dense local gradient:
//!
//! - SUM: `C = (G + L) / 2`
//! - PARTIAL: `C = G − S + L` (the other ranks' sparse gradients plus the whole local one)
//! - ERROR: `C = G + E`, then `E = 0` (no error feedback)
//!
//! and averages the parameters every `sync_every` steps (after the optimizer step),
//! because the local terms make the ranks' parameters drift apart. The paper's sums are
//! divided by the world size here, like every method's output (see [`crate::method`]).
//!
//! The drop ratio `R = 1 − density` may be warmed up: at step t (from 1) the dropped
//! fraction is `R_t = R^max(1, T/t)`, i.e. almost nothing is dropped at first.
//!
//! On tensors (`place`, `exchange_tensor`): the residuals on the device, the top-k by
//! `tensor::sparsify::topk_magnitude`, the group's TopKAllReduce, the combination with
//! the local gradient as tensor ops in the host's order; the selection's and the sum's
//! pairs are read to the host once each (k and at most kP values) to refuse inf and NaN as
//! on slices; `local`'s parameter averaging is the group's allreduce of the weights in
//! place. The same updates and residuals as on slices, bit for bit
//! (tests/exchange_tensor.rs).

use crate::exchange::{
    average_in_place, average_tensor_in_place, check_len, check_numel, dense_average,
    dense_average_tensor, due, keep_count, refuse_non_finite, Meter,
};
use crate::method::{
    HostAfterStep, HostExchange, Method, ParamSpec, StateTensors, StepInfo, TensorAfterStep,
    TensorExchange, TensorUpdate, Update, UpdateKind, WireStats,
};
use crate::methods::PerParam;
use crate::select::exact_topk;
use crate::{CompressError, Result};
use comm::SparseVec;
use tensor::sparsify;
use tensor::{DType, Device, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalMode {
    Sum,
    Partial,
    Error,
}

impl LocalMode {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "sum" => Ok(LocalMode::Sum),
            "partial" => Ok(LocalMode::Partial),
            "error" => Ok(LocalMode::Error),
            _ => Err(CompressError::Config(format!(
                "local mode '{s}': expected sum, partial or error"
            ))),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct DroppingConfig {
    pub density: f64,
    pub dense_below: usize,
    /// `None`: plain gradient dropping (`topk`).
    pub local: Option<LocalMode>,
    pub sync_every: usize,
    /// Paper 001's drop-ratio warm-up over this many steps (0: off).
    pub warmup_steps: usize,
    /// Paper 002's (and DGC's) staged warm-up instead: over this many epochs, the density
    /// steps through `warmup_densities` (0: off). Not with `warmup_steps`.
    pub warmup_epochs: f64,
    pub warmup_densities: Vec<f64>,
}

impl DroppingConfig {
    pub fn validate(&self, method: &str) -> Result<()> {
        crate::options::check_density(method, self.density)?;
        crate::exchange::check_warmup(method, self.warmup_epochs, &self.warmup_densities)?;
        if self.warmup_steps > 0 && self.warmup_epochs > 0.0 {
            return Err(CompressError::Config(format!(
                "{method}: warmup_steps and warmup_epochs are two warm-ups (paper 001's and paper 002's); give one"
            )));
        }
        Ok(())
    }
}

pub struct GradientDropping {
    cfg: DroppingConfig,
    world: usize,
    /// The residual per parameter, on the host or (once placed) on the device.
    residual: PerParam,
    step: u64,
    epoch: f64,
}

impl GradientDropping {
    pub fn new(cfg: DroppingConfig, world: usize) -> Self {
        GradientDropping {
            cfg,
            world,
            residual: PerParam::new("residual"),
            step: 0,
            epoch: 0.0,
        }
    }
    fn label(&self) -> &'static str {
        if self.cfg.local.is_some() {
            "local"
        } else {
            "topk"
        }
    }
    /// The fraction kept at the current step, after the drop-ratio warm-up (or the
    /// staged one).
    pub fn density_now(&self) -> f64 {
        if self.cfg.warmup_epochs > 0.0 {
            return crate::exchange::warmup_density(
                self.cfg.density,
                self.cfg.warmup_epochs,
                &self.cfg.warmup_densities,
                self.epoch,
            );
        }
        let drop = 1.0 - self.cfg.density;
        if self.cfg.warmup_steps == 0 || drop <= 0.0 {
            return self.cfg.density;
        }
        let t = (self.step + 1) as f64;
        let exponent = (self.cfg.warmup_steps as f64 / t).max(1.0);
        1.0 - drop.powf(exponent)
    }
}

impl Method for GradientDropping {
    fn name(&self) -> &'static str {
        self.label()
    }
    fn describe(&self) -> String {
        let c = &self.cfg;
        let staged = if c.warmup_epochs > 0.0 {
            format!(
                ", warmup_epochs={}, warmup_densities={:?}",
                c.warmup_epochs, c.warmup_densities
            )
        } else {
            String::new()
        };
        let d = match c.local {
            None => format!(
                "topk(density={}, dense_below={}, warmup_steps={})",
                c.density, c.dense_below, c.warmup_steps
            ),
            Some(mode) => format!(
                "local(density={}, dense_below={}, mode={:?}, sync_every={}, warmup_steps={})",
                c.density, c.dense_below, mode, c.sync_every, c.warmup_steps
            ),
        };
        match d.strip_suffix(')') {
            Some(head) if !staged.is_empty() => format!("{head}{staged})"),
            _ => d,
        }
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.residual.init(params);
        Ok(())
    }
    fn begin_step(&mut self, info: StepInfo) {
        self.step = info.step;
        self.epoch = info.epoch;
    }
    fn place(&mut self, device: Device) -> Result<()> {
        self.residual.place(device)
    }
    fn exchange_tensor(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        let (group, index, grad) = (x.comm, x.index, x.grad);
        let label = self.label();
        let density = self.density_now();
        let (world, mode, dense_below) = (self.world, self.cfg.local, self.cfg.dense_below);
        let (e, n) = self
            .residual
            .on_device(label)?
            .for_grad(label, index, grad)?;
        if n < dense_below {
            return dense_average_tensor(group, grad);
        }
        let device = e.device();
        let l = grad.flatten_all()?;
        let mut m = Meter::new(n);
        let local = m.compress(|| -> Result<_> {
            tensor::no_grad(|| e.assign(&e.add(&l)?))?;
            let local = sparsify::topk_magnitude(e, keep_count(density, n))?;
            // inf and NaN rank first, so a diverged gradient is among the selected values.
            refuse_non_finite(label, index, "the gradient", &local.values.to_vec::<f32>()?)?;
            sparsify::zero_selected(e, &local)?;
            Ok(local)
        })?;
        m.stats.sent_values = local.len();
        m.stats.message_bytes = 4 + 8 * local.len();
        let global = m.comm(|| group.topk_allreduce(&local))?;
        let values = m.decompress(|| -> Result<Tensor> {
            let (gi, gv) = global.to_vecs()?;
            if let Some((i, v)) = gi.iter().zip(&gv).find(|(_, v)| !v.is_finite()) {
                return Err(CompressError::Usage(format!(
                    "{label}: the summed sparse gradient of parameter {index} holds {v} at index {i} (a peer diverged or sent a malformed message)"
                )));
            }
            if let Some(&i) = gi.iter().find(|&&i| i as usize >= n) {
                return Err(CompressError::Usage(format!(
                    "{label}: the summed sparse gradient of parameter {index} has index {i} beyond its {n} elements (do all ranks train the same model?)"
                )));
            }
            let shape = n.into();
            let scatter = |s: &sparsify::Selected| -> tensor::Result<Tensor> {
                if s.is_empty() {
                    Tensor::zeros(n, DType::F32, device)
                } else {
                    s.values.index_add_into(&s.indices, 0, &shape)
                }
            };
            // The host's order: C = G, then the mode's combination, then C / P.
            let mut c = scatter(&global)?;
            match mode {
                None => {}
                Some(LocalMode::Sum) => c = c.add(&l)?.scale(0.5)?,
                Some(LocalMode::Partial) => {
                    let minus = sparsify::Selected {
                        values: local.values.neg()?,
                        ..local.clone()
                    };
                    c = c.add(&scatter(&minus)?)?.add(&l)?;
                }
                Some(LocalMode::Error) => {
                    c = c.add(e)?;
                    e.assign(&Tensor::zeros(n, DType::F32, device)?)?;
                }
            }
            let p = Tensor::full(world as f64, n, DType::F32, device)?;
            Ok(c.div(&p)?.reshape(grad.dims())?)
        })?;
        Ok(m.tensor_update(values, UpdateKind::Gradient))
    }
    fn exchange(&mut self, x: HostExchange<'_>) -> Result<Update> {
        let (comm, index, grad) = (x.comm, x.index, x.grad);
        let label = self.label();
        let density = self.density_now();
        let (world, mode, dense_below) = (self.world as f32, self.cfg.local, self.cfg.dense_below);
        let (e, n) = self.residual.host_for(label, index, grad)?;
        if n < dense_below {
            return dense_average(comm, grad);
        }
        let mut m = Meter::new(n);
        let local = m.compress(|| {
            e.iter_mut().zip(grad).for_each(|(e, g)| *e += g);
            let idx = exact_topk(e, keep_count(density, n));
            let vals: Vec<f32> = idx.iter().map(|&i| e[i as usize]).collect();
            // inf and NaN rank first, so a diverged gradient is among the selected values.
            refuse_non_finite(label, index, "the gradient", &vals)?;
            idx.iter().for_each(|&i| e[i as usize] = 0.0);
            Ok::<_, CompressError>(SparseVec {
                indices: idx,
                values: vals,
            })
        })?;
        m.stats.sent_values = local.len();
        m.stats.message_bytes = 4 + 8 * local.len();
        let global = m.comm(|| comm.topk_allreduce(&local))?;
        let out = m.decompress(|| {
            let mut c = vec![0f32; n];
            for (&i, &v) in global.indices.iter().zip(&global.values) {
                // topk_allreduce validated every index against its sender's frame, not
                // against n: a peer with another model would show up here; and its values
                // not at all (every sender refuses its own inf and NaN, so one here came
                // from a peer that does not).
                if !v.is_finite() {
                    return Err(CompressError::Usage(format!(
                        "{label}: the summed sparse gradient of parameter {index} holds {v} at index {i} (a peer diverged or sent a malformed message)"
                    )));
                }
                match c.get_mut(i as usize) {
                    Some(slot) => *slot = v,
                    None => {
                        return Err(CompressError::Usage(format!(
                            "{label}: the summed sparse gradient of parameter {index} has index {i} beyond its {n} elements (do all ranks train the same model?)"
                        )))
                    }
                }
            }
            match mode {
                None => {}
                Some(LocalMode::Sum) => {
                    c.iter_mut().zip(grad).for_each(|(c, l)| *c = 0.5 * (*c + l));
                }
                Some(LocalMode::Partial) => {
                    for (&i, &v) in local.indices.iter().zip(&local.values) {
                        c[i as usize] -= v;
                    }
                    c.iter_mut().zip(grad).for_each(|(c, l)| *c += l);
                }
                Some(LocalMode::Error) => {
                    c.iter_mut().zip(e.iter_mut()).for_each(|(c, e)| {
                        *c += *e;
                        *e = 0.0;
                    });
                }
            }
            c.iter_mut().for_each(|v| *v /= world);
            Ok(c)
        })?;
        Ok(m.update(out, UpdateKind::Gradient))
    }
    fn after_step_every(&self) -> Option<u64> {
        if self.cfg.local.is_some() && self.cfg.sync_every > 0 {
            Some(self.cfg.sync_every as u64)
        } else {
            None
        }
    }
    fn after_step(&mut self, x: HostAfterStep<'_>) -> Result<Option<WireStats>> {
        let (comm, index, weights) = (x.comm, x.index, x.weights);
        if self.cfg.local.is_none() || !due(self.after_step_every(), self.step) {
            return Ok(None);
        }
        check_len("local", index, self.residual.len_of(index), &[weights])?;
        average_in_place(comm, weights).map(Some)
    }
    fn after_step_tensor(&mut self, x: TensorAfterStep<'_>) -> Result<Option<WireStats>> {
        let (group, index, weights) = (x.comm, x.index, x.weights);
        if self.cfg.local.is_none() || !due(self.after_step_every(), self.step) {
            return Ok(None);
        }
        check_numel("local", index, self.residual.len_of(index), weights)?;
        average_tensor_in_place(group, weights).map(Some)
    }
    fn state(&self) -> Result<StateTensors> {
        self.residual.state()
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        let label = self.label();
        self.residual.load(label, state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::StepInfo;
    use crate::options::MethodSpec;
    use crate::{build, Context};

    /// Rank 0 of 2, momentum 0.9, no weight decay.
    fn ctx() -> Context {
        Context {
            rank: 0,
            world: 2,
            seed: 1,
            momentum: 0.9,
            nesterov: false,
            weight_decay: 0.0,
        }
    }

    fn dropping(density: f64, warmup_steps: usize) -> GradientDropping {
        GradientDropping::new(
            DroppingConfig {
                density,
                dense_below: 0,
                local: None,
                sync_every: 0,
                warmup_steps,
                warmup_epochs: 0.0,
                warmup_densities: Vec::new(),
            },
            4,
        )
    }

    #[test]
    fn drop_ratio_warms_up_as_r_to_the_power_t_over_step() {
        let mut m = dropping(0.01, 1000);
        let mut at = |step_from_1: u64| {
            m.begin_step(StepInfo {
                step: step_from_1 - 1,
                epoch: 0.0,
            });
            m.density_now()
        };
        // R_1 = 0.99^1000: almost everything is sent on the first step.
        assert!((at(1) - (1.0 - 0.99f64.powi(1000))).abs() < 1e-12);
        assert!((at(500) - (1.0 - 0.99f64.powi(2))).abs() < 1e-12);
        // From t = T on, the target drop ratio.
        assert!((at(1000) - 0.01).abs() < 1e-12);
        assert!((at(5000) - 0.01).abs() < 1e-12);
        let mut off = dropping(0.01, 0);
        off.begin_step(StepInfo {
            step: 0,
            epoch: 0.0,
        });
        assert_eq!(off.density_now(), 0.01);
    }

    #[test]
    fn topk_and_local_both_take_the_warm_up_option() {
        let ctx = ctx();
        for (name, want) in [
            (
                "topk",
                "topk(density=0.01, dense_below=0, warmup_steps=1000)",
            ),
            (
                "local",
                "local(density=0.01, dense_below=0, mode=Partial, sync_every=500, warmup_steps=1000)",
            ),
        ] {
            let spec = MethodSpec::parse(name, &["density=0.01".into(), "warmup_steps=1000".into()])
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let m = build(&spec, &ctx).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(m.describe(), want);
        }
    }

    /// Paper 002's staged warm-up, which Top-k S-SGD takes as gTop-k does: the stages'
    /// densities over the warm-up epochs, then the target; never with paper 001's.
    #[test]
    fn the_staged_warm_up_steps_through_its_densities_by_epoch() {
        let ctx = ctx();
        let spec =
            MethodSpec::parse("topk", &["density=0.001".into(), "warmup_epochs=4".into()]).unwrap();
        let m = build(&spec, &ctx).unwrap();
        assert!(m.describe().ends_with(
            "warmup_steps=0, warmup_epochs=4, warmup_densities=[0.25, 0.0725, 0.015, 0.004])"
        ));
        let mut g = dropping(0.001, 0);
        g.cfg.warmup_epochs = 4.0;
        g.cfg.warmup_densities = vec![0.25, 0.0725, 0.015, 0.004];
        for (epoch, want) in [
            (0.0, 0.25),
            (1.5, 0.0725),
            (2.0, 0.015),
            (3.9, 0.004),
            (4.0, 0.001),
        ] {
            g.begin_step(StepInfo { step: 7, epoch });
            assert_eq!(g.density_now(), want, "epoch {epoch}");
        }
        let both = MethodSpec::parse(
            "local",
            &["warmup_epochs=1".into(), "warmup_steps=100".into()],
        )
        .unwrap();
        let e = build(&both, &ctx).err().expect("two warm-ups").to_string();
        assert!(e.contains("give one"), "{e}");
    }
}
