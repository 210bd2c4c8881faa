//! Adam, as `torch.optim.Adam` (L2 weight decay added to the gradient, not AdamW):
//! m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²;
//! p ← p − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + ε).

use super::{check_state_shape, zeroed_at, Optimizer, StateEntry};
use std::collections::HashMap;
use tensor::{no_grad, Device, Error, Result, Tensor};

/// A checkpoint stores the step count as two f32 values, its high and low 24 bits, each
/// exact: counts below 2^48.
const STEP_HALF: u64 = 1 << 24;

/// A parameter's state as far as a checkpoint has restored it: (step, m, v).
type Partial = (Option<u64>, Option<Tensor>, Option<Tensor>);

pub struct Adam {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// (step count, m, v) per parameter index.
    state: HashMap<usize, (u64, Tensor, Tensor)>,
    /// Entries being restored from a checkpoint, until all three pieces are in.
    loading: HashMap<usize, Partial>,
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
            loading: HashMap::new(),
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
            if let Some((t, m, v)) = self.loading.get(&index) {
                let missing: Vec<&str> = [
                    ("step", t.is_none()),
                    ("m", m.is_none()),
                    ("v", v.is_none()),
                ]
                .iter()
                .filter(|(_, gone)| *gone)
                .map(|(k, _)| *k)
                .collect();
                return Err(Error::msg(format!(
                    "adam: parameter {index}'s state was restored without its {}",
                    missing.join(", ")
                )));
            }
            let (t, m, v) = match self.state.remove(&index) {
                Some(s) => s,
                None => (0, g.zeros_like()?, g.zeros_like()?),
            };
            let t = t + 1;
            let m = m.scale(self.beta1)?.add(&g.scale(1.0 - self.beta1)?)?;
            let v = v
                .scale(self.beta2)?
                .add(&g.sqr()?.scale(1.0 - self.beta2)?)?;
            // powf: the step count may exceed i32 (a restored count goes up to 2^48).
            let bc1 = 1.0 - self.beta1.powf(t as f64);
            let bc2 = 1.0 - self.beta2.powf(t as f64);
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
            v.push((i, "m", m.clone()));
            v.push((i, "v", var.clone()));
            // High and low 24 bits, each exact in f32 (a count past 2^48 saturates).
            let t = (*t).min(STEP_HALF * STEP_HALF - 1);
            let halves = vec![(t / STEP_HALF) as f32, (t % STEP_HALF) as f32];
            if let Ok(step) = Tensor::from_vec(halves, vec![2], Device::Cpu) {
                v.push((i, "step", step));
            }
        }
        v
    }
    fn load_state(
        &mut self,
        index: usize,
        key: &str,
        t: Tensor,
        param_dims: &[usize],
    ) -> Result<()> {
        if key == "m" || key == "v" {
            check_state_shape(&format!("adam {key}"), index, &t, param_dims)?;
        }
        let entry = self.loading.entry(index).or_insert((None, None, None));
        match key {
            "m" => entry.1 = Some(t.detach()),
            "v" => entry.2 = Some(t.detach()),
            "step" => {
                let x = t.to_vec_f64()?;
                let whole = |h: f64| h >= 0.0 && h.fract() == 0.0 && h < STEP_HALF as f64;
                match x.as_slice() {
                    [hi, lo] if whole(*hi) && whole(*lo) && *hi + *lo > 0.0 => {
                        entry.0 = Some(*hi as u64 * STEP_HALF + *lo as u64)
                    }
                    _ => {
                        return Err(Error::msg(format!(
                            "adam: step count {x:?} of parameter {index} is not two whole 24-bit halves of a count of at least 1"
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
        if let Some((Some(t), Some(m), Some(v))) = self.loading.get(&index).cloned() {
            self.loading.remove(&index);
            self.state.insert(index, (t, m, v));
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
