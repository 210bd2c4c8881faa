//! SGD with momentum, Nesterov momentum and L2 weight decay, as `torch.optim.SGD`
//! (dampening 0): d = g + wd·p; buf = m·buf + d (buf = d at the first step);
//! d = d + m·buf (Nesterov) or buf; p ← p − lr·d.

use super::{check_state_shape, zeroed_at, Optimizer, StateEntry};
use std::collections::HashMap;
use tensor::{no_grad, Error, Result, SgdStep, Tensor};

pub struct Sgd {
    pub lr: f64,
    pub momentum: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
    buffers: HashMap<usize, Tensor>,
}

impl Sgd {
    pub fn new(lr: f64, momentum: f64, nesterov: bool, weight_decay: f64) -> Result<Self> {
        if nesterov && momentum <= 0.0 {
            return Err(Error::msg("Sgd: Nesterov momentum needs momentum > 0"));
        }
        Ok(Sgd {
            lr,
            momentum,
            nesterov,
            weight_decay,
            buffers: HashMap::new(),
        })
    }
}

impl Optimizer for Sgd {
    fn update(&mut self, index: usize, param: &Tensor, grad: &Tensor) -> Result<()> {
        if self.momentum != 0.0 && param.dtype().is_float() {
            // One in-place kernel per parameter (tensor's kernels/optim.cu), the same
            // arithmetic as the composed ops below, which serve momentum 0.
            let (buf, first) = match self.buffers.get(&index) {
                Some(b) => (b.clone(), false),
                None => {
                    let b = Tensor::zeros(param.shape().clone(), param.dtype(), param.device())?;
                    self.buffers.insert(index, b.clone());
                    (b, true)
                }
            };
            return param.sgd_momentum_(
                grad,
                &buf,
                SgdStep {
                    lr: self.lr,
                    momentum: self.momentum,
                    weight_decay: self.weight_decay,
                    nesterov: self.nesterov,
                    first,
                },
            );
        }
        no_grad(|| {
            let mut d = grad.clone();
            if self.weight_decay != 0.0 {
                d = d.add(&param.scale(self.weight_decay)?)?;
            }
            if self.momentum != 0.0 {
                let buf = match self.buffers.remove(&index) {
                    Some(b) => b.scale(self.momentum)?.add(&d)?,
                    None => d.contiguous()?.detach(),
                };
                d = if self.nesterov {
                    d.add(&buf.scale(self.momentum)?)?
                } else {
                    buf.clone()
                };
                self.buffers.insert(index, buf);
            }
            param.assign(&param.sub(&d.scale(self.lr)?)?)
        })
    }
    fn lr(&self) -> f64 {
        self.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
    fn name(&self) -> &'static str {
        "sgd"
    }
    fn state(&self) -> Vec<StateEntry> {
        let mut v: Vec<StateEntry> = self
            .buffers
            .iter()
            .map(|(&i, t)| (i, "momentum", t.clone()))
            .collect();
        v.sort_by_key(|e| e.0);
        v
    }
    fn load_state(
        &mut self,
        index: usize,
        key: &str,
        t: Tensor,
        param_dims: &[usize],
    ) -> Result<()> {
        if key != "momentum" {
            return Err(Error::msg(format!(
                "sgd keeps a momentum buffer per parameter, not '{key}' (a checkpoint of another optimizer?)"
            )));
        }
        check_state_shape("sgd momentum", index, &t, param_dims)?;
        self.buffers.insert(index, t.detach());
        Ok(())
    }
    fn mask_momentum(&mut self, index: usize, positions: &[usize]) -> Result<()> {
        if positions.is_empty() {
            return Ok(());
        }
        if let Some(buf) = self.buffers.get(&index) {
            let masked = zeroed_at(
                buf,
                positions,
                &format!("sgd momentum of parameter {index}"),
            )?;
            self.buffers.insert(index, masked);
        }
        Ok(())
    }
}
