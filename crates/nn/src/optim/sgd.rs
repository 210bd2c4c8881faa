//! SGD with momentum, Nesterov momentum and L2 weight decay, as `torch.optim.SGD`
//! (dampening 0): d = g + wd·p; buf = m·buf + d (buf = d at the first step);
//! d = d + m·buf (Nesterov) or buf; p ← p − lr·d.

use super::Optimizer;
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

impl Sgd {
    /// The momentum buffers by parameter index (for checkpoints), in index order.
    pub fn momentum_buffers(&self) -> Vec<(usize, Tensor)> {
        let mut v: Vec<(usize, Tensor)> =
            self.buffers.iter().map(|(&i, t)| (i, t.clone())).collect();
        v.sort_by_key(|p| p.0);
        v
    }
    /// Zeros parameter `index`'s momentum at `positions` (flat, in its element order):
    /// momentum factor masking for a method that sent those positions (SBC). Nothing to do
    /// before the first update of the parameter or without momentum. The buffer goes to
    /// the host and back, which costs one copy each way; masking runs once per exchange
    /// of a method with communication delay, not once per step.
    pub fn zero_momentum_at(&mut self, index: usize, positions: &[usize]) -> Result<()> {
        let Some(buf) = self.buffers.get(&index) else {
            return Ok(());
        };
        if positions.is_empty() {
            return Ok(());
        }
        // f64 holds every float dtype exactly, so the round trip changes only the zeros.
        let mut host = buf.to_vec_f64()?;
        for &p in positions {
            let n = host.len();
            *host.get_mut(p).ok_or_else(|| {
                Error::msg(format!(
                    "Sgd: momentum mask position {p} of parameter {index}, which has {n} elements"
                ))
            })? = 0.0;
        }
        let masked =
            Tensor::from_vec(host, buf.dims().to_vec(), buf.device())?.to_dtype(buf.dtype())?;
        self.buffers.insert(index, masked);
        Ok(())
    }
    /// Restores one momentum buffer (a resumed run continues bit for bit).
    pub fn set_momentum_buffer(&mut self, index: usize, buf: Tensor) {
        self.buffers.insert(index, buf.detach());
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
}
