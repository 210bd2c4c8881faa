//! Adam, as `torch.optim.Adam` (L2 weight decay added to the gradient, not AdamW):
//! m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²;
//! p ← p − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + ε).

use super::{zeroed_at, Optimizer, StateEntry};
use std::collections::HashMap;
use tensor::{no_grad, Device, Error, Result, Tensor};

/// The largest step count a checkpoint holds exactly (it is stored as an f32).
const MAX_EXACT_STEP: u64 = 1 << 24;

pub struct Adam {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// (step count, m, v) per parameter index.
    state: HashMap<usize, (u64, Tensor, Tensor)>,
}

impl Adam {
    pub fn new(lr: f64, beta1: f64, beta2: f64, eps: f64, weight_decay: f64) -> Self {
        Adam {
            lr,
            beta1,
            beta2,
            eps,
            weight_decay,
            state: HashMap::new(),
        }
    }
}

impl Optimizer for Adam {
    fn update(&mut self, index: usize, param: &Tensor, grad: &Tensor) -> Result<()> {
        no_grad(|| {
            let g = if self.weight_decay != 0.0 {
                grad.add(&param.scale(self.weight_decay)?)?
            } else {
                grad.clone()
            };
            let (t, m, v) = match self.state.remove(&index) {
                Some((0, ..)) => {
                    return Err(Error::msg(format!(
                        "adam: parameter {index}'s state was restored without its step count"
                    )))
                }
                Some((t, m, v)) if m.dims() != g.dims() || v.dims() != g.dims() => {
                    return Err(Error::msg(format!(
                        "adam: parameter {index}'s state has shapes {:?} and {:?}, its gradient {:?} (step {t})",
                        m.dims(),
                        v.dims(),
                        g.dims()
                    )))
                }
                Some(s) => s,
                None => (0, g.zeros_like()?, g.zeros_like()?),
            };
            let t = t + 1;
            let m = m.scale(self.beta1)?.add(&g.scale(1.0 - self.beta1)?)?;
            let v = v
                .scale(self.beta2)?
                .add(&g.sqr()?.scale(1.0 - self.beta2)?)?;
            let bc1 = 1.0 - self.beta1.powi(t as i32);
            let bc2 = 1.0 - self.beta2.powi(t as i32);
            let denom = v.sqrt()?.scale(1.0 / bc2.sqrt())?.add_scalar(self.eps)?;
            param.assign(&param.sub(&m.div(&denom)?.scale(self.lr / bc1)?)?)?;
            self.state.insert(index, (t, m, v));
            Ok(())
        })
    }
    fn lr(&self) -> f64 {
        self.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
    fn name(&self) -> &'static str {
        "adam"
    }
    fn state(&self) -> Vec<StateEntry> {
        let mut idx: Vec<usize> = self.state.keys().copied().collect();
        idx.sort_unstable();
        let mut v = Vec::with_capacity(3 * idx.len());
        for i in idx {
            let (t, m, var) = &self.state[&i];
            // Exact in f32 up to 2^24 steps; load_state refuses what is not a whole count.
            let step = Tensor::from_vec(vec![*t.min(&MAX_EXACT_STEP) as f32], vec![1], Device::Cpu);
            v.push((i, "m", m.clone()));
            v.push((i, "v", var.clone()));
            if let Ok(step) = step {
                v.push((i, "step", step));
            }
        }
        v
    }
    fn load_state(&mut self, index: usize, key: &str, t: Tensor) -> Result<()> {
        let entry = self.state.entry(index).or_insert_with(|| {
            // Placeholders until every key is loaded; `update` needs all three.
            (0, t.clone(), t.clone())
        });
        match key {
            "m" => entry.1 = t.detach(),
            "v" => entry.2 = t.detach(),
            "step" => {
                let x = t.to_vec_f64()?;
                match x.as_slice() {
                    [s] if *s >= 1.0 && s.fract() == 0.0 && *s < MAX_EXACT_STEP as f64 => {
                        entry.0 = *s as u64
                    }
                    _ => {
                        return Err(Error::msg(format!(
                            "adam: step count {x:?} of parameter {index} is not a whole count in [1, 2^24)"
                        )))
                    }
                }
            }
            other => {
                return Err(Error::msg(format!(
                    "adam keeps m, v and step per parameter, not '{other}' (a checkpoint of another optimizer?)"
                )))
            }
        }
        Ok(())
    }
    fn mask_momentum(&mut self, index: usize, positions: &[usize]) -> Result<()> {
        if positions.is_empty() {
            return Ok(());
        }
        if let Some(entry) = self.state.get_mut(&index) {
            entry.1 = zeroed_at(
                &entry.1,
                positions,
                &format!("adam first moment of parameter {index}"),
            )?;
        }
        Ok(())
    }
}
