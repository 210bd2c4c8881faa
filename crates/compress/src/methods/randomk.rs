//! `randomk` (GRACE's random-k, beyond the five papers): per parameter and step, the same
//! k random positions on every rank — drawn from the job's seed, the step and the
//! parameter, so no index crosses the wire — carry the values of the residual
//! `E += g`, which are allreduced and averaged and cleared from `E`. Only the k values
//! travel (4 bytes each). On tensors on any device; on slices, the same code on CPU
//! tensors.

use crate::exchange::{check_numel, keep_count, on_cpu_tensors, refuse_non_finite, Meter};
use crate::method::{Method, ParamSpec, StateTensors, StepInfo, TensorUpdate, Update, UpdateKind};
use crate::Result;
use comm::{Communicator, ProcessGroup, ReduceOp};
use std::collections::HashSet;
use tensor::{sparsify, DType, Device, Rng, Tensor};

pub struct RandomK {
    density: f64,
    seed: u64,
    step: u64,
    residual: Vec<Tensor>,
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
            residual: Vec::new(),
        })
    }

    fn exchange_on(
        &mut self,
        group: &mut dyn ProcessGroup,
        index: usize,
        grad: &Tensor,
    ) -> Result<TensorUpdate> {
        let sizes = self.residual.iter().map(Tensor::elem_count);
        let n = check_numel("randomk", index, sizes.clone().nth(index), grad)?;
        let e = &self.residual[index];
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
        Ok(TensorUpdate {
            values,
            kind: UpdateKind::Gradient,
            stats: m.stats,
        })
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
        self.residual = params
            .iter()
            .map(|p| Tensor::zeros(p.numel(), DType::F32, Device::Cpu))
            .collect::<tensor::Result<_>>()?;
        Ok(())
    }
    fn begin_step(&mut self, info: StepInfo) {
        self.step = info.step;
    }
    fn exchange(
        &mut self,
        comm: &mut Communicator,
        index: usize,
        _weights: &[f32],
        grad: &[f32],
    ) -> Result<Update> {
        on_cpu_tensors("randomk", comm, grad, |g, t| {
            tensor::no_grad(|| self.exchange_on(g, index, t))
        })
    }
    fn on_tensors(&self) -> bool {
        true
    }
    fn place(&mut self, device: Device) -> Result<()> {
        for r in &mut self.residual {
            *r = r.to_device(device)?;
        }
        Ok(())
    }
    fn exchange_tensor(
        &mut self,
        group: &mut dyn ProcessGroup,
        index: usize,
        _weights: Option<&Tensor>,
        grad: &Tensor,
    ) -> Result<TensorUpdate> {
        tensor::no_grad(|| self.exchange_on(group, index, grad))
    }
    fn state(&self) -> Result<StateTensors> {
        let host: Vec<Vec<f32>> = self
            .residual
            .iter()
            .map(|t| t.to_vec::<f32>())
            .collect::<tensor::Result<_>>()?;
        Ok(crate::methods::named_state("residual", &host))
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        let mut host: Vec<Vec<f32>> = self
            .residual
            .iter()
            .map(|t| vec![0.0; t.elem_count()])
            .collect();
        crate::methods::load_named("randomk", state, &mut [("residual", &mut host)])?;
        for (t, h) in self.residual.iter_mut().zip(host) {
            let n = h.len();
            *t = Tensor::from_vec(h, n, t.device())?;
        }
        Ok(())
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
