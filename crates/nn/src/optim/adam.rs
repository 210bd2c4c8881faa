//! Adam, as `torch.optim.Adam` (L2 weight decay added to the gradient, not AdamW):
//! m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²;
//! p ← p − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + ε).

use super::Optimizer;
use std::collections::HashMap;
use tensor::{no_grad, Result, Tensor};

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
}
