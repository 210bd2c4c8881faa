//! What a worker records: the timings summed between log lines ([`Window`]), the step
//! records of `metrics.jsonl` and rank 0's lines, and the evaluations (each rank its
//! shard, the sums added up).

use super::Worker;
use crate::metrics::{EvalRecord, MetricsWriter, StepRecord};
use anyhow::{Context, Result};
use compress::WireStats;
use std::time::Instant;

/// Per-step timings, summed between log lines.
#[derive(Clone, Default)]
pub(super) struct Window {
    pub(super) steps: usize,
    pub(super) loss: f64,
    pub(super) step: f64,
    pub(super) compute: f64,
    pub(super) idle: f64,
    pub(super) overlap: f64,
    pub(super) wire: WireStats,
}

impl Window {
    /// Its fields as numbers, for a checkpoint's metadata (counts are exact in f64).
    pub(super) fn to_values(&self) -> Vec<f64> {
        let w = &self.wire;
        vec![
            self.steps as f64,
            self.loss,
            self.step,
            self.compute,
            self.idle,
            self.overlap,
            w.elements as f64,
            w.sent_values as f64,
            w.message_bytes as f64,
            w.dense_bytes as f64,
            w.compress_seconds,
            w.decompress_seconds,
            w.comm_seconds,
        ]
    }
    /// The window [`Window::to_values`] saved; empty (an older checkpoint) or malformed
    /// gives an empty window.
    pub(super) fn from_values(v: &[f64]) -> Window {
        let &[steps, loss, step, compute, idle, overlap, elements, sent_values, message_bytes, dense_bytes, compress_seconds, decompress_seconds, comm_seconds] =
            v
        else {
            return Window::default();
        };
        Window {
            steps: steps as usize,
            loss,
            step,
            compute,
            idle,
            overlap,
            wire: WireStats {
                elements: elements as usize,
                sent_values: sent_values as usize,
                message_bytes: message_bytes as usize,
                dense_bytes: dense_bytes as usize,
                compress_seconds,
                decompress_seconds,
                comm_seconds,
            },
        }
    }
}

impl Worker {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn log(
        &mut self,
        w: &mut Window,
        metrics: &mut MetricsWriter,
        step: usize,
        total: usize,
        per_epoch: usize,
        lr: f64,
        dense_ring: &dyn Fn(u64) -> u64,
    ) -> Result<()> {
        let reduced = self.ex.allreduce(vec![w.loss as f32, w.steps as f32])?;
        let loss = reduced[0] as f64 / reduced[1].max(1.0) as f64;
        self.last_loss = loss;
        let (sent, received) = self.traffic()?;
        self.flush_message_bytes(&mut w.wire);
        let k = w.steps.max(1) as f64;
        let rec = StepRecord {
            kind: "step",
            step,
            epoch: step as f64 / per_epoch as f64,
            loss,
            lr,
            density: w.wire.density(),
            bytes_sent: sent,
            bytes_received: received,
            dense_bytes: dense_ring(step as u64),
            message_bytes: self.pos.message_bytes,
            dense_message_bytes: self.pos.dense_message_bytes,
            step_seconds: w.step / k,
            compute_seconds: w.compute / k,
            compression_seconds: (w.wire.compress_seconds + w.wire.decompress_seconds) / k,
            communication_seconds: w.wire.comm_seconds / k,
            idle_seconds: w.idle / k,
            overlap_seconds: w.overlap / k,
        };
        metrics.write(&rec)?;
        if self.rank == 0 {
            let dense = dense_ring(step as u64);
            let ratio = if sent > 0 {
                format!("{:.1}x", dense as f64 / sent as f64)
            } else {
                "-".into()
            };
            self.progress.line(&format!(
                "step {step}/{total} epoch {:.2} loss {loss:.4} lr {lr:.4} density {:.5} sent {:.2} MB ratio {ratio} | step {:.1} ms: compute {:.1}, compress {:.1}, comm {:.1}, idle {:.1}",
                rec.epoch,
                rec.density,
                sent as f64 / 1e6,
                rec.step_seconds * 1e3,
                rec.compute_seconds * 1e3,
                rec.compression_seconds * 1e3,
                rec.communication_seconds * 1e3,
                rec.idle_seconds * 1e3,
            ));
        }
        *w = Window::default();
        Ok(())
    }

    /// Evaluates, appends the evaluation's record (`wall_seconds`: training time so far,
    /// this evaluation included) and prints its line on rank 0; returns the evaluation.
    pub(super) fn evaluate_and_record(
        &mut self,
        metrics: &mut MetricsWriter,
        step: usize,
        epoch: f64,
        wall_before_eval: f64,
    ) -> Result<Evaluation> {
        let t = Instant::now();
        let e = self.evaluate()?;
        let Evaluation {
            metric,
            loss: test_loss,
            count: eval_count,
            top5,
        } = e;
        let (sent, _) = self.traffic()?;
        let took = t.elapsed().as_secs_f64();
        self.pos.eval_seconds += took;
        let wall_seconds = wall_before_eval + took;
        metrics.write(&EvalRecord {
            kind: "eval",
            step,
            epoch,
            metric_name: self.task.metric_name,
            metric,
            test_loss,
            eval_count,
            top5,
            bytes_sent: sent,
            wall_seconds,
            train_seconds: wall_seconds - self.pos.eval_seconds,
        })?;
        if self.rank == 0 {
            self.progress.line(&format!(
                "epoch {} step {step}: test {} {metric:.4}{}, test loss {test_loss:.4}",
                if epoch.fract() == 0.0 {
                    format!("{epoch}")
                } else {
                    format!("{epoch:.2}")
                },
                self.task.metric_name,
                top5.map_or(String::new(), |t| format!(" (top-5 {t:.4})")),
            ));
        }
        Ok(e)
    }

    /// Test metric, loss and what the metric averages over (see [`EvalRecord`]): each
    /// rank evaluates its shard; the sums are added up.
    ///
    /// Buffers (batch norm's running statistics) are updated by each rank from its own
    /// batches, so the ranks' copies drift apart; before evaluating, every rank takes rank
    /// 0's (what PyTorch's DistributedDataParallel does before every forward pass), so the
    /// metric is that of one model and the checkpoints hold the same buffers.
    pub(super) fn evaluate(&mut self) -> Result<Evaluation> {
        if self.world > 1 && !self.buffers.is_empty() {
            let buffers: Vec<&nn::NamedTensor> = self.buffers.iter().collect();
            self.broadcast_from_rank0(&buffers)
                .context("taking rank 0's batch-norm statistics before evaluating")?;
        }
        let mine = self
            .task
            .evaluate(self.cfg.batch_size, self.rank, self.world)?;
        let r = self.ex.allreduce(vec![
            mine.numerator as f32,
            mine.denominator as f32,
            mine.loss_sum as f32,
            mine.loss_count as f32,
            mine.top5 as f32,
        ])?;
        let count = r[1].round() as u64;
        let sums = crate::task::EvalSums {
            numerator: r[0] as f64,
            denominator: r[1] as f64,
            loss_sum: r[2] as f64,
            loss_count: r[3] as f64,
            top5: r[4] as f64,
        };
        let (metric, loss) = self.task.finish(&sums);
        Ok(Evaluation {
            metric,
            loss,
            count,
            top5: self.task.top5(&sums),
        })
    }
}

/// One evaluation, summed over the ranks.
#[derive(Clone, Copy, Debug)]
pub(super) struct Evaluation {
    pub(super) metric: f64,
    pub(super) loss: f64,
    /// What the metric averages over (see [`EvalRecord`]).
    pub(super) count: u64,
    /// Top-5 accuracy of an image task with at least 5 classes.
    pub(super) top5: Option<f64>,
}

impl Evaluation {
    /// Before the first evaluation.
    pub(super) fn none() -> Self {
        Evaluation {
            metric: f64::NAN,
            loss: f64::NAN,
            count: 0,
            top5: None,
        }
    }
}
