//! `randomk` (GRACE's random-k, beyond the five papers): per parameter and step, the same
//! k random positions on every rank — drawn from the job's seed, the step and the
//! parameter, so no index crosses the wire — carry the values of the residual
//! `E += g`, which are allreduced and averaged and cleared from `E`. Only the k values
//! travel (4 bytes each). On tensors on any device; on slices, the same code on CPU
//! tensors.

use crate::exchange::{keep_count, refuse_non_finite, Meter};
use crate::method::{
    Method, ParamSpec, StateTensors, StepInfo, TensorExchange, TensorUpdate, UpdateKind,
};
use crate::methods::DeviceVecs;
use crate::Result;
use comm::ReduceOp;
use std::collections::HashSet;
use tensor::{sparsify, DType, Device, Rng, Tensor};

pub struct RandomK {
    density: f64,
    seed: u64,
    step: u64,
    residual: DeviceVecs,
}

/// `k` distinct positions below `n`, ascending, from `key` (Floyd's sampling: k draws,
/// whatever n).
pub fn positions(key: u64, n: usize, k: usize) -> Vec<u32> {
    let k = k.min(n);
    let mut rng = Rng::new(key);
    let mut chosen = HashSet::with_capacity(k);
    for j in n - k..n {
        let t = rng.below(j + 1);
        if !chosen.insert(t) {
            chosen.insert(j);
        }
    }
    let mut v: Vec<u32> = chosen.into_iter().map(|i| i as u32).collect();
    v.sort_unstable();
    v
}

impl RandomK {
    pub fn new(density: f64, seed: u64) -> Result<Self> {
        crate::options::check_density("randomk", density)?;
        Ok(RandomK {
            density,
            seed,
            step: 0,
            residual: DeviceVecs::zeros([], Device::Cpu)?,
        })
    }

    fn exchange_on(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        let (group, index, grad) = (x.comm, x.index, x.grad);
        let (e, n) = self.residual.for_grad("randomk", index, grad)?;
        let device = e.device();
        let k = keep_count(self.density, n);
        let key = tensor::quantize::counter_key(&[self.seed, 0x7261, self.step, index as u64]);
        let mut m = Meter::new(n);
        let (idx, vals) = m.compress(|| -> Result<(Tensor, Tensor)> {
            e.assign(&e.add(&grad.flatten_all()?)?)?;
            let pos = positions(key, n, k);
            let idx = Tensor::from_vec(pos, k.min(n), device)?;
            let vals = e.index_select(&idx, 0)?.contiguous()?;
            refuse_non_finite("randomk", index, "the gradient", &vals.to_vec::<f32>()?)?;
            sparsify::zero_at(e, &idx)?;
            Ok((idx, vals))
        })?;
        m.comm(|| group.allreduce(&vals, ReduceOp::Average))?;
        m.stats.sent_values = vals.elem_count();
        m.stats.message_bytes = 4 * vals.elem_count();
        let values = m.decompress(|| -> Result<Tensor> {
            let dense = if vals.elem_count() == 0 {
                Tensor::zeros(n, DType::F32, device)?
            } else {
                vals.index_add_into(&idx, 0, &n.into())?
            };
            Ok(dense.reshape(grad.dims())?)
        })?;
        Ok(m.tensor_update(values, UpdateKind::Gradient))
    }
}

impl Method for RandomK {
    fn name(&self) -> &'static str {
        "randomk"
    }
    fn describe(&self) -> String {
        format!("randomk(density={})", self.density)
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.residual = DeviceVecs::zeros(params.iter().map(ParamSpec::numel), Device::Cpu)?;
        Ok(())
    }
    fn begin_step(&mut self, info: StepInfo) {
        self.step = info.step;
    }
    fn place(&mut self, device: Device) -> Result<()> {
        self.residual.move_to(device)
    }
    fn exchange_tensor(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        tensor::no_grad(|| self.exchange_on(x))
    }
    fn state(&self) -> Result<StateTensors> {
        self.residual.state("residual")
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        self.residual.load("randomk", "residual", state)
    }
}

#[cfg(test)]
mod tests {
    use super::positions;

    #[test]
    fn positions_are_distinct_sorted_in_range_and_keyed() {
        for (n, k) in [(10, 10), (1000, 7), (5, 0), (100_000, 1000)] {
            let p = positions(42, n, k);
            assert_eq!(p.len(), k);
            assert!(p.windows(2).all(|w| w[0] < w[1]));
            assert!(p.iter().all(|&i| (i as usize) < n));
        }
        assert_eq!(positions(1, 1000, 10), positions(1, 1000, 10));
        assert_ne!(positions(1, 1000, 10), positions(2, 1000, 10));
        // Every position equally likely: 20,000 draws of 1 of 10.
        let mut counts = [0usize; 10];
        for key in 0..20_000u64 {
            counts[positions(key, 10, 1)[0] as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (1700..2300).contains(&c)),
            "{counts:?}"
        );
    }
}
