//! One training step: forward and backward, the hooks handing gradients to the compression
//! thread as they are ready; the parameters no hook saw, sent as zeros; the wait for
//! every bucket's update (the step's idle time); the updates applied; and the weights
//! exchanged after the step by methods that do so.

use super::record::Window;
use super::{tensor_f32, Worker};
use crate::exchanger::{Job, Reply};
use anyhow::{bail, Context, Result};
use compress::{StepInfo, UpdateKind, WireStats};
use data::Batch;
use nn::Ctx;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tensor::{no_grad, Device, Rng, Tensor};

/// An exchanged gradient: host values (a method on slices) or a tensor on the
/// parameter's device (a method on tensors).
enum Grad {
    Host(Vec<f32>),
    Device(Tensor),
}

/// Each parameter's exchanged gradient and how to apply it, by parameter index (None
/// until its bucket's update has come).
type Updates = Vec<Option<(Grad, UpdateKind)>>;

impl Worker {
    /// Trains on `batch` at `step` (epoch `epoch`, fractional) with learning rate `lr`,
    /// adding the step's loss and timings to `window`.
    pub(super) fn train_step(
        &mut self,
        batch: &Batch,
        step: usize,
        epoch: f64,
        lr: f64,
        window: &mut Window,
    ) -> Result<()> {
        self.opt.set_lr(lr);
        self.ex.send(Job::Begin(StepInfo {
            step: step as u64,
            epoch,
        }))?;
        let t0 = Instant::now();
        let mut ctx = Ctx {
            training: true,
            rng: Rng::for_rank(
                self.cfg.seed ^ (step as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                self.rank,
            ),
        };
        let loss = self.task.loss(batch, &mut ctx)?;
        // Backward is queued before the loss is read: on a GPU the read waits for every
        // kernel queued before it, and reading between forward and backward would leave
        // the device idle while the host queues the backward. The check still comes
        // before any update is collected or applied.
        loss.backward()?;
        let loss_value = loss.to_scalar::<f32>()? as f64;
        if !loss_value.is_finite() {
            // run()'s caller adds the rank to the message.
            let hint = match crate::task::usual_lr(&self.cfg.model) {
                Some((usual, from)) if lr > usual => format!(
                    "learning rate {lr} too high? {} usually trains at {usual} ({from}): --lr {usual}",
                    self.cfg.model
                ),
                _ => format!("learning rate {lr} too high?"),
            };
            bail!("the loss is {loss_value} at step {step} ({hint})");
        }
        let backward_end = Instant::now();
        self.send_unfired()?;
        let (updates, first_start) = self.collect_updates(&mut window.wire)?;
        let exchanged = Instant::now();
        self.apply(updates, lr)?;
        if let Some(every) = self.ex.after_step_every {
            if (step as u64 + 1).is_multiple_of(every) {
                self.sync_weights(&mut window.wire)?;
            }
        }
        let end = Instant::now();
        let step_s = (end - t0).as_secs_f64();
        let idle = (exchanged - backward_end).as_secs_f64();
        window.steps += 1;
        window.loss += loss_value;
        window.step += step_s;
        window.compute += (backward_end - t0).as_secs_f64();
        window.idle += idle;
        // How long the exchange ran beside backward (negative: how long after it began).
        window.overlap += first_start.map_or(0.0, |f| {
            if f < backward_end {
                (backward_end - f).as_secs_f64()
            } else {
                -(f - backward_end).as_secs_f64()
            }
        });
        self.idle_fractions.push(idle / step_s);
        self.step_times.push(step_s);
        Ok(())
    }

    /// Once backward has returned: the parameters whose hook did not fire (unused in this
    /// graph) go to the compression thread with zero gradients, in index order, so that
    /// every rank issues the same collectives.
    fn send_unfired(&mut self) -> Result<()> {
        for (i, f) in self.fired.iter().enumerate() {
            if f.swap(false, Ordering::SeqCst) {
                continue;
            }
            let p = &self.params[i].tensor;
            if self.device_exchange {
                let zeros = Tensor::zeros(p.dims().to_vec(), p.dtype(), p.device())?;
                self.ex.send(Job::ExchangeDevice {
                    index: i,
                    grad: zeros,
                    weights: self.ex.reads_weights.then(|| p.clone()),
                })?;
                continue;
            }
            let n = p.elem_count();
            self.collector.deliver(
                i,
                vec![0.0; n],
                if self.ex.reads_weights {
                    tensor_f32(p)
                } else {
                    Vec::new()
                },
            );
        }
        Ok(())
    }

    /// Waits for every bucket's update from the compression thread (the step's idle
    /// time): the update of each parameter, and when the first exchange began.
    fn collect_updates(&mut self, wire: &mut WireStats) -> Result<(Updates, Option<Instant>)> {
        let mut updates: Updates = (0..self.params.len()).map(|_| None).collect();
        let mut first_start: Option<Instant> = None;
        for _ in 0..self.collector.buckets().len() {
            let (started, stats) = match self.ex.recv()? {
                Reply::Update {
                    index,
                    update,
                    started,
                } => {
                    for (i, part) in self.collector.buckets().split(index, update.values) {
                        updates[i] = Some((Grad::Host(part), update.kind));
                    }
                    (started, update.stats)
                }
                Reply::DeviceUpdate {
                    index,
                    update,
                    kind,
                    stats,
                    started,
                } => {
                    let slot = updates.get_mut(index).with_context(|| {
                        format!("compression thread: an update for parameter {index}")
                    })?;
                    *slot = Some((Grad::Device(update), kind));
                    (started, stats)
                }
                _ => bail!("compression thread: unexpected reply during the exchange"),
            };
            first_start = Some(first_start.map_or(started, |f: Instant| f.min(started)));
            wire.add(&stats);
        }
        Ok((updates, first_start))
    }

    fn apply(&mut self, updates: Updates, lr: f64) -> Result<()> {
        let mut grads: Vec<(usize, Tensor, UpdateKind)> = Vec::with_capacity(updates.len());
        for (i, u) in updates.into_iter().enumerate() {
            let (grad, kind) = u.with_context(|| format!("no update arrived for parameter {i}"))?;
            let g = match grad {
                Grad::Host(values) => {
                    let dims = self.params[i].tensor.dims().to_vec();
                    let device = self.params[i].tensor.device();
                    Tensor::from_vec(values, dims, device)?
                }
                Grad::Device(t) => t,
            };
            grads.push((i, g, kind));
        }
        if self.cfg.clip > 0.0 {
            let mut gs: Vec<Tensor> = grads
                .iter()
                .filter(|g| g.2 == UpdateKind::Gradient)
                .map(|g| g.1.clone())
                .collect();
            nn::optim::clip_grad_norm(&mut gs, self.cfg.clip)?;
            let mut it = gs.into_iter();
            for g in grads.iter_mut().filter(|g| g.2 == UpdateKind::Gradient) {
                if let Some(c) = it.next() {
                    g.1 = c;
                }
            }
        }
        for (i, g, kind) in grads {
            let p = &self.params[i].tensor;
            match kind {
                UpdateKind::Gradient => self.opt.update(i, p, &g)?,
                UpdateKind::Direction => no_grad(|| p.assign(&p.sub(&g.scale(lr)?)?))?,
            }
        }
        Ok(())
    }

    fn sync_weights(&mut self, wire: &mut WireStats) -> Result<()> {
        if self.device_exchange {
            return self.sync_weights_in_place(wire);
        }
        let buckets = self.collector.buckets();
        for b in 0..buckets.len() {
            self.ex.send(Job::After {
                index: b,
                weights: buckets.join(b, |i| tensor_f32(&self.params[i].tensor)),
            })?;
        }
        for _ in 0..buckets.len() {
            match self.ex.recv()? {
                Reply::After {
                    index,
                    weights,
                    stats,
                    momentum_mask,
                } => {
                    for (i, part) in buckets.split(index, weights) {
                        let p = &self.params[i].tensor;
                        no_grad(|| {
                            p.assign(&Tensor::from_vec(part, p.dims().to_vec(), Device::Cpu)?)
                        })?;
                    }
                    for (i, positions) in buckets.split_positions(index, &momentum_mask) {
                        self.opt.mask_momentum(i, &positions).with_context(|| {
                            format!("masking the momentum of {}", self.params[i].name)
                        })?;
                    }
                    if let Some(s) = stats {
                        wire.add_sync(&s);
                    }
                }
                _ => bail!("compression thread: unexpected reply during synchronisation"),
            }
        }
        Ok(())
    }

    /// [`Self::sync_weights`] for a method on tensors: each parameter handed over as it is,
    /// synchronised in place on its device by the compression thread.
    fn sync_weights_in_place(&mut self, wire: &mut WireStats) -> Result<()> {
        for (i, p) in self.params.iter().enumerate() {
            self.ex.send(Job::AfterDevice {
                index: i,
                weights: p.tensor.clone(),
            })?;
        }
        for _ in 0..self.params.len() {
            match self.ex.recv()? {
                Reply::After {
                    index,
                    stats,
                    momentum_mask,
                    ..
                } => {
                    let name = &self
                        .params
                        .get(index)
                        .with_context(|| {
                            format!("compression thread: a synchronisation of parameter {index}")
                        })?
                        .name;
                    let positions: Vec<usize> = momentum_mask.iter().map(|&p| p as usize).collect();
                    self.opt
                        .mask_momentum(index, &positions)
                        .with_context(|| format!("masking the momentum of {name}"))?;
                    if let Some(s) = stats {
                        wire.add_sync(&s);
                    }
                }
                _ => bail!("compression thread: unexpected reply during synchronisation"),
            }
        }
        Ok(())
    }
}
