//! DGC's local half on tensors ([`DgcOnDevice`]), on the device where the gradients live.

use super::config::{clip_from_sum_sq, DgcConfig};
use crate::exchange::keep_count;
use crate::method::{ParamSpec, StateTensors, StepInfo};
use crate::select::sampled_threshold_tensor;
use crate::{CompressError, Result};
use tensor::sparsify::{self, Selected};
use tensor::{Device, Rng, Tensor};

/// The state of one parameter sent sparse.
struct Slot {
    /// Velocity (with momentum correction).
    u: Option<Tensor>,
    /// Accumulator.
    v: Tensor,
    /// Weight decay's momentum buffer (with [`super::Decay::Dense`]).
    d: Option<Tensor>,
}

/// DGC's local half on tensors: the state (velocity `u`, accumulator `v`, decay buffer
/// `d`) is kept on the device, and each step runs the same clipping, accumulation,
/// selection and clearing as [`super::Dgc::compress`] with the primitives of
/// `tensor::sparsify`, so only the chosen (index, value) pairs are left to leave the
/// device. Given the same gradients and the same generator it chooses the same entries
/// as [`super::Dgc`] and leaves the same state, bit for bit (tests/dgc_device.rs, on the
/// CPU here and on a GPU by scripts/gpu-check.sh).
///
/// This is the compression side only: [`super::Dgc`]'s `exchange_tensor` (after `place`)
/// drives it and sums the pairs over a `ProcessGroup`.
pub struct DgcOnDevice {
    cfg: DgcConfig,
    world: usize,
    rng: Rng,
    /// Per parameter; `None` for the parameters sent dense.
    state: Vec<Option<Slot>>,
    epoch: f64,
}

fn slot(state: &[Option<Slot>], index: usize) -> Result<&Slot> {
    match state.get(index) {
        Some(Some(s)) => Ok(s),
        _ => Err(CompressError::Usage(format!(
            "dgc (device): parameter {index} is not one sent sparse"
        ))),
    }
}

fn usage(index: usize) -> impl Fn(tensor::Error) -> CompressError {
    move |e| CompressError::Usage(format!("dgc (device) parameter {index}: {e}"))
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
        let c = &self.cfg;
        self.state = params
            .iter()
            .map(|p| -> Result<_> {
                if c.is_dense(p) {
                    return Ok(None);
                }
                let n = p.numel();
                Ok(Some(Slot {
                    u: c.momentum_correction.then(|| zeros(n)).transpose()?,
                    v: zeros(n)?,
                    d: c.dense_decay().then(|| zeros(n)).transpose()?,
                }))
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
    /// [`super::Dgc::compress`] on tensors: `grad` (and `weights`, read only with weight
    /// decay in the accumulation; `None` reads as zeros) flat f32 on the state's device.
    pub fn compress(
        &mut self,
        index: usize,
        weights: Option<&Tensor>,
        grad: &Tensor,
    ) -> Result<Selected> {
        let err = usage(index);
        let Slot { u, v, .. } = slot(&self.state, index)?;
        let c = &self.cfg;
        let n = v.elem_count();
        let gs = if c.clip > 0.0 {
            clip_from_sum_sq(
                sparsify::sum_of_squares(grad).map_err(&err)?,
                c.clip,
                self.world,
            )
        } else {
            1.0
        };
        let w = weights.filter(|_| c.compressed_decay());
        sparsify::accumulate(u.as_ref(), v, grad, w, c.accumulation(gs)).map_err(&err)?;
        let k = keep_count(c.density_at(self.epoch), n);
        let sel = if c.sampling {
            sampled_threshold_tensor(v, k, c.sample_fraction, &mut self.rng)
        } else {
            sparsify::topk_magnitude(v, k)
        }
        .map_err(&err)?;
        sparsify::zero_selected(v, &sel).map_err(&err)?;
        if let (true, Some(u)) = (c.masking, u) {
            sparsify::zero_selected(u, &sel).map_err(&err)?;
        }
        Ok(sel)
    }
    /// [`super::Dgc::add_decay`] on tensors: `values` (the averaged direction, contiguous
    /// f32 with the parameter's element count) gains the decay buffer, in place, after
    /// the buffer's step on `weights`. Nothing without [`super::Decay::Dense`].
    pub fn add_decay(&mut self, index: usize, weights: &Tensor, values: &Tensor) -> Result<()> {
        let err = usage(index);
        let Some(d) = &slot(&self.state, index)?.d else {
            return Ok(());
        };
        let w = weights.flatten_all().map_err(&err)?;
        let out = values.flatten_all().map_err(&err)?;
        sparsify::accumulate(Some(d), &out, &w, None, self.cfg.decay_accumulation())
            .map_err(&err)?;
        Ok(())
    }
    /// The state a resume needs, in [`super::Dgc`]'s checkpoint format, copied to the
    /// host: a checkpoint of either loads into the other.
    pub fn state(&self) -> Result<StateTensors> {
        let (mut u, mut v, mut d) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..self.state.len() {
            let [ui, vi, di] = self.slots_on_host(i)?;
            u.push(ui);
            v.push(vi);
            d.push(di);
        }
        Ok(super::checkpoint(&u, &v, &d, &self.rng))
    }
    /// Loads [`DgcOnDevice::state`]'s (or [`super::Dgc`]'s) format into the state on the
    /// device, checking every name and length first.
    pub fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        let len = |t: Option<&Tensor>| vec![0.0; t.map_or(0, |t| t.elem_count())];
        let (mut u, mut v, mut d) = (Vec::new(), Vec::new(), Vec::new());
        for s in &self.state {
            let s = s.as_ref();
            u.push(len(s.and_then(|s| s.u.as_ref())));
            v.push(len(s.map(|s| &s.v)));
            d.push(len(s.and_then(|s| s.d.as_ref())));
        }
        let rng = super::restore(state, &mut u, &mut v, &mut d)?;
        let put = |t: &Tensor, x: Vec<f32>| -> Result<()> {
            let n = x.len();
            Ok(t.assign(&Tensor::from_vec(x, n, Device::Cpu)?)?)
        };
        for (s, ((ui, vi), di)) in self.state.iter().zip(u.into_iter().zip(v).zip(d)) {
            if let Some(s) = s {
                put(&s.v, vi)?;
                if let Some(ut) = &s.u {
                    put(ut, ui)?;
                }
                if let Some(dt) = &s.d {
                    put(dt, di)?;
                }
            }
        }
        self.rng = rng;
        Ok(())
    }
    /// The velocity and accumulator of parameter `index` on the host (empty where absent).
    pub fn state_of(&self, index: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        let [u, v, _] = self.slots_on_host(index)?;
        Ok((u, v))
    }
    /// `u`, `v` and `d` of parameter `index` on the host (empty where absent).
    fn slots_on_host(&self, index: usize) -> Result<[Vec<f32>; 3]> {
        let host = |t: Option<&Tensor>| -> Result<Vec<f32>> {
            t.map(|t| t.to_vec::<f32>())
                .transpose()
                .map(Option::unwrap_or_default)
                .map_err(|e| CompressError::Usage(format!("dgc (device): {e}")))
        };
        match self.state.get(index) {
            Some(Some(s)) => Ok([host(s.u.as_ref())?, host(Some(&s.v))?, host(s.d.as_ref())?]),
            _ => Ok([Vec::new(), Vec::new(), Vec::new()]),
        }
    }
}
