//! One training step: forward and backward, the hooks handing gradients to the compression
//! thread as they are ready; the parameters no hook saw, sent as zeros; the wait for
//! every bucket's update (the step's idle time); the updates applied; and the weights
//! exchanged after the step by methods that do so.

use super::record::Window;
use super::Worker;
use crate::exchanger::{Job, Reply};
use anyhow::{bail, Context, Result};
use compress::{StepInfo, UpdateKind, WireStats};
use data::Batch;
use nn::Ctx;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tensor::{no_grad, Rng, Tensor};

/// Each parameter's exchanged gradient and how to apply it, by parameter index (None
/// until its bucket's update has come).
type Updates = Vec<Option<(Tensor, UpdateKind)>>;

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
            let zeros = Tensor::zeros(p.dims().to_vec(), p.dtype(), p.device())?;
            self.collector
                .deliver(i, zeros, self.ex.reads_weights.then(|| p.clone()));
        }
        Ok(())
    }

    /// The dims of parameter `i`.
    fn dims(&self, i: usize) -> Vec<usize> {
        self.params[i].tensor.dims().to_vec()
    }

    /// Waits for every bucket's update from the compression thread (the step's idle
    /// time): the update of each parameter, and when the first exchange began.
    fn collect_updates(&mut self, wire: &mut WireStats) -> Result<(Updates, Option<Instant>)> {
        let mut updates: Updates = (0..self.params.len()).map(|_| None).collect();
        let mut first_start: Option<Instant> = None;
        let buckets = self.collector.buckets();
        for _ in 0..buckets.len() {
            let Reply::Update {
                index,
                update,
                kind,
                stats,
                started,
            } = self.ex.recv()?
            else {
                bail!("compression thread: unexpected reply during the exchange");
            };
            if index >= buckets.len() {
                bail!(
                    "compression thread: an update for bucket {index} of {}",
                    buckets.len()
                );
            }
            for (i, part) in buckets.split(index, update, |i| self.dims(i))? {
                updates[i] = Some((part, kind));
            }
            first_start = Some(first_start.map_or(started, |f: Instant| f.min(started)));
            wire.add(&stats);
        }
        Ok((updates, first_start))
    }

    fn apply(&mut self, updates: Updates, lr: f64) -> Result<()> {
        let mut grads: Vec<(usize, Tensor, UpdateKind)> = Vec::with_capacity(updates.len());
        for (i, u) in updates.into_iter().enumerate() {
            let (g, kind) = u.with_context(|| format!("no update arrived for parameter {i}"))?;
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

    /// The methods that synchronise the weights after the step: each bucket's weights
    /// (a parameter itself, or its members' concatenation) handed to the compression
    /// thread, which overwrites them in place where the method synchronises them; a
    /// concatenation's parts are then written back to its members.
    fn sync_weights(&mut self, wire: &mut WireStats) -> Result<()> {
        let buckets = self.collector.buckets();
        let mut joined: Vec<Tensor> = Vec::with_capacity(buckets.len());
        for b in 0..buckets.len() {
            let w = buckets.join(b, |i| self.params[i].tensor.clone())?;
            joined.push(w.clone());
            self.ex.send(Job::After {
                index: b,
                weights: w,
            })?;
        }
        for _ in 0..buckets.len() {
            let Reply::After {
                index,
                stats,
                momentum_mask,
            } = self.ex.recv()?
            else {
                bail!("compression thread: unexpected reply during synchronisation");
            };
            let w = joined.get(index).with_context(|| {
                format!("compression thread: a synchronisation of bucket {index}")
            })?;
            if buckets.members[index].len() > 1 {
                for (i, part) in buckets.split(index, w.clone(), |i| self.dims(i))? {
                    let p = &self.params[i].tensor;
                    no_grad(|| p.assign(&part))?;
                }
            }
            for (i, positions) in buckets.split_positions(index, &momentum_mask) {
                self.opt
                    .mask_momentum(i, &positions)
                    .with_context(|| format!("masking the momentum of {}", self.params[i].name))?;
            }
            if let Some(s) = stats {
                wire.add_sync(&s);
            }
        }
        Ok(())
    }
}
