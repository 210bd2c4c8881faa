//! Sign methods (beyond the five papers; GRACE's set):
//!
//! - `signsgd` / `signum` (Bernstein et al. 2018, "signSGD with majority vote"): each
//!   rank sends the sign of its gradient (`signum`: of its momentum `m = β·m + (1 − β)·g`)
//!   as one bit a value; the update is the majority vote, the sign of the ranks' summed
//!   signs (0 where they tie). Its entries are ±1 or 0 whatever the gradient's scale, so
//!   the learning rate is the step itself (signSGD's 1e-4 rather than SGD's 0.1), and the
//!   method is meant for `--momentum 0` (signum keeps its own).
//! - `efsignsgd` (Karimireddy et al. 2019, "Error feedback fixes SignSGD"): `p = g + e`,
//!   the rank sends `Δ = (‖p‖₁ / n)·sign(p)` (one bit a value and the scale), keeps
//!   `e = p − Δ`, and the update is the average of the ranks' `Δ`.
//!
//! A value of 0 counts as positive (one bit cannot say 0), as in GRACE's `signsgd`. On
//! tensors on any device (the bits packed and unpacked by `tensor::quantize`), the
//! messages allgathered as equal-size words; on slices, the same code on CPU tensors.

use crate::exchange::{allgather_bits, check_numel, Meter};
use crate::method::{Method, ParamSpec, StateTensors, TensorExchange, TensorUpdate, UpdateKind};
use crate::methods::DeviceVecs;
use crate::{CompressError, Result};
use tensor::{sparsify, DType, Device, Tensor};

/// Which sign method.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SignKind {
    /// Majority vote of the signs of the momentum `β` (0: of the gradient, signSGD).
    Vote { momentum: f64 },
    /// Scaled signs with error feedback.
    ErrorFeedback,
}

pub struct Sign {
    kind: SignKind,
    name: &'static str,
    sizes: Vec<usize>,
    /// Per parameter: signum's momentum, or EF-signSGD's error (empty for signSGD).
    state: DeviceVecs,
}

impl Sign {
    pub fn new(name: &'static str, kind: SignKind) -> Result<Self> {
        if let SignKind::Vote { momentum } = kind {
            if !(0.0..1.0).contains(&momentum) {
                return Err(CompressError::Config(format!(
                    "{name}: momentum must be in [0, 1), got {momentum}"
                )));
            }
        }
        Ok(Sign {
            kind,
            name,
            sizes: Vec::new(),
            state: DeviceVecs::zeros([], Device::Cpu)?,
        })
    }
    fn keeps_state(&self) -> bool {
        self.kind != SignKind::Vote { momentum: 0.0 }
    }
    fn state_name(&self) -> &'static str {
        match self.kind {
            SignKind::Vote { .. } => "momentum",
            SignKind::ErrorFeedback => "error",
        }
    }

    fn exchange_on(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        let (group, index, grad) = (x.comm, x.index, x.grad);
        let n = check_numel(self.name, index, self.sizes.get(index).copied(), grad)?;
        let device = grad.device();
        let g = grad.flatten_all()?;
        let mut m = Meter::new(n);
        let zeros = Tensor::zeros(n, DType::F32, device)?;
        let (p, head) = m.compress(|| -> Result<(Tensor, Vec<u32>)> {
            if sparsify::count_at_least(&g.contiguous()?, f32::INFINITY)? > 0 {
                return Err(CompressError::Usage(format!(
                    "{}: parameter {index}: the gradient holds inf or NaN (the training diverged? lower --lr)",
                    self.name
                )));
            }
            Ok(match self.kind {
                SignKind::Vote { momentum } if momentum > 0.0 => {
                    let s = self.state.get(index).ok_or_else(|| no_state(self.name, index))?;
                    s.assign(&s.scale(momentum)?.add(&g.scale(1.0 - momentum)?)?)?;
                    (s.clone(), Vec::new())
                }
                SignKind::Vote { .. } => (g.clone(), Vec::new()),
                SignKind::ErrorFeedback => {
                    let e = self.state.get(index).ok_or_else(|| no_state(self.name, index))?;
                    let p = g.add(e)?;
                    let l1 = p.abs()?.to_dtype(DType::F64)?.sum_all()?.to_vec::<f64>()?[0];
                    let scale = if n == 0 { 0.0 } else { (l1 / n as f64) as f32 };
                    (p, vec![scale.to_bits()])
                }
            })
        })?;
        let codes = p.ge(&zeros)?.to_dtype(DType::U32)?;
        let all = allgather_bits(group, &mut m, &head, &codes)?;
        let world = all.len();
        m.stats.sent_values = n;
        m.stats.message_bytes = 4 * head.len() + n.div_ceil(8);
        let values = m.decompress(|| -> Result<Tensor> {
            // ±1 from each rank's bits: 2c − 1.
            let signs = |c: &Tensor| -> Result<Tensor> {
                Ok(c.to_dtype(DType::F32)?.scale(2.0)?.add_scalar(-1.0)?)
            };
            let mut sum = zeros.clone();
            for (peer, (h, c)) in all.iter().enumerate() {
                let s = signs(c)?;
                sum = match self.kind {
                    SignKind::Vote { .. } => sum.add(&s)?,
                    SignKind::ErrorFeedback => {
                        let scale = f32::from_bits(h[0]);
                        if !scale.is_finite() || scale < 0.0 {
                            return Err(CompressError::Decode {
                                method: self.name,
                                peer,
                                param: index,
                                source: crate::codec::CodecError::Invalid(format!("scale {scale}")),
                            });
                        }
                        sum.add(&s.scale(scale as f64)?)?
                    }
                };
            }
            match self.kind {
                SignKind::Vote { .. } => Ok(sum.sign()?),
                SignKind::ErrorFeedback => {
                    // This rank's Δ leaves its error.
                    let mine = signs(&codes)?.scale(f32::from_bits(head[0]) as f64)?;
                    self.state
                        .get(index)
                        .ok_or_else(|| no_state(self.name, index))?
                        .assign(&p.sub(&mine)?)?;
                    Ok(sum.scale(1.0 / world as f64)?)
                }
            }
        })?;
        Ok(m.tensor_update(values.reshape(grad.dims())?, UpdateKind::Gradient))
    }
}

impl Method for Sign {
    fn name(&self) -> &'static str {
        self.name
    }
    fn describe(&self) -> String {
        match self.kind {
            SignKind::Vote { momentum } => format!("{}(momentum={momentum})", self.name),
            SignKind::ErrorFeedback => self.name.to_string(),
        }
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.sizes = params.iter().map(ParamSpec::numel).collect();
        let keeps = self.keeps_state();
        let sizes = self.sizes.iter().map(|&n| if keeps { n } else { 0 });
        self.state = DeviceVecs::zeros(sizes, Device::Cpu)?;
        Ok(())
    }
    fn place(&mut self, device: Device) -> Result<()> {
        self.state.move_to(device)
    }
    fn exchange_tensor(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        tensor::no_grad(|| self.exchange_on(x))
    }
    fn state(&self) -> Result<StateTensors> {
        if !self.keeps_state() {
            return Ok(Vec::new());
        }
        self.state.state(self.state_name())
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        if !self.keeps_state() {
            return crate::methods::load_named(self.name, state, &mut []);
        }
        self.state.load(self.name, self.state_name(), state)
    }
}

fn no_state(name: &str, index: usize) -> CompressError {
    CompressError::Usage(format!(
        "{name}: parameter {index} was not declared to init"
    ))
}
