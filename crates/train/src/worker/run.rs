//! A worker's run from its start to its summary, in stages: start fresh or resume
//! ([`Worker::start_or_resume`]), open the records ([`Worker::open_records`]), plan and
//! announce the run, then epoch by epoch train ([`Worker::train_epoch`], one step at a
//! time in [`Worker::step_and_log`]) and close the epoch with its evaluation and
//! checkpoint ([`Worker::end_epoch`]), and finally the summary ([`Worker::finish`]).

use super::record::{Evaluation, Window};
use super::{checkpoint, faults, remove_results};
use crate::metrics::{MetricsWriter, Summary};
use crate::progress::say_err;
use crate::task::Source;
use anyhow::{Context, Result};
use data::Batch;
use nn::optim::LrSchedule;
use std::time::Instant;

/// Bytes a dense ring allreduce of the model's gradients sends from one rank: the
/// compression ratio's numerator.
#[derive(Clone, Copy)]
struct DenseRing {
    world: u64,
    params: u64,
}

impl DenseRing {
    /// For `steps` steps: 2(P−1)/P of the f32 vector a step (nothing with one worker).
    fn bytes(self, steps: u64) -> u64 {
        if self.world > 1 {
            steps * 2 * (self.world - 1) * 4 * self.params / self.world
        } else {
            0
        }
    }
}

/// What the run's loop carries from step to step and epoch to epoch.
struct Run {
    started: Instant,
    /// The wall time of the run before this process took it over (a resume's).
    wall_before: f64,
    total_steps: usize,
    epochs: usize,
    per_epoch: usize,
    schedule: LrSchedule,
    dense: DenseRing,
    metrics: MetricsWriter,
    /// The steps since the last log line.
    window: Window,
    /// The window as it stood where `--steps` ended off the log grid: what a checkpoint
    /// saves, so that a run resumed from it continues the uninterrupted run's window.
    stopped_window: Option<Window>,
    step: usize,
    /// Set where the ranks agree to stop for an interrupt (see `interrupt`).
    interrupted: bool,
    last: Evaluation,
}

impl Run {
    /// The run's wall time so far, a resume's earlier time included.
    fn wall(&self) -> f64 {
        self.wall_before + self.started.elapsed().as_secs_f64()
    }

    /// The epoch (fractional) at `step`.
    fn epoch_at(&self, step: usize) -> f64 {
        step as f64 / self.per_epoch as f64
    }
}

impl super::Worker {
    /// Trains to the configured end and returns the summary (every rank computes it;
    /// rank 0 writes the files).
    pub fn run(&mut self, resume: bool) -> Result<Summary> {
        let started = Instant::now();
        let loaded = self.start_or_resume(resume)?;
        let source = self
            .task
            .source(self.cfg.batch_size, self.rank, self.world, self.cfg.seed)?;
        let metrics = self.open_records(resume, loaded, &source)?;
        let mut run = self.plan(resume, started, metrics, source.batches_per_epoch());
        if self.rank == 0 {
            self.announce(&run, resume);
        }
        for epoch in self.pos.epoch..run.epochs {
            if !self.train_epoch(&mut run, &source, epoch)? {
                break; // resumed where the run had already stopped
            }
            self.end_epoch(&mut run, epoch)?;
            if run.interrupted {
                return self.stop_interrupted(run.total_steps);
            }
            if run.step >= run.total_steps {
                break;
            }
        }
        self.finish(run)
    }

    /// Prepares the run directory: this rank's stale checkpoint temporaries go; a resume
    /// agrees on a checkpoint and loads it (its outcome returned, to be agreed on with the
    /// epoch length in `open_records`); a fresh run checks that it may replace an earlier
    /// one, removes it, and takes rank 0's model.
    fn start_or_resume(&mut self, resume: bool) -> Result<Result<()>> {
        let out = self.cfg.out.clone();
        let lead = self.rank == 0;
        std::fs::create_dir_all(&out)
            .with_context(|| format!("creating the run directory {}", out.display()))?;
        // A save that failed or was killed mid-write can leave its temporary (a whole
        // checkpoint's size): this rank's go before it saves again.
        let stale = crate::metrics::remove_stale_temporaries(
            &out.join("checkpoint"),
            &format!("rank{}.", self.rank),
        )?;
        if stale > 0 {
            say_err(&format!(
                "[rank {}] removed {stale} temporary checkpoint file(s) an earlier save left",
                self.rank
            ));
        }
        let mut loaded = Ok(());
        if resume {
            let file = self
                .agree()
                .with_context(|| format!("resuming from {}", out.display()))?;
            loaded = self
                .load_checkpoint(&file)
                .with_context(|| format!("resuming from {}", file.display()));
        } else {
            // Every rank's verdict before any rank removes anything of the earlier run.
            let fresh = if self.cfg.overwrite {
                Ok(())
            } else {
                checkpoint::earlier_run(&out, [self.rank], lead)
            };
            self.all_ranks_ok(fresh, "start a fresh run")?;
            checkpoint::remove(&out, self.rank)?;
            if lead {
                remove_results(&out)?;
                checkpoint::remove_ranks_from(&out, self.world)?;
            }
            self.broadcast_model()?;
            if lead {
                self.save_initial()?;
            }
        }
        // Before any save of this run: a resume's checkpoint, or none.
        self.note_for_a_second_signal(resume.then_some(self.pos.step));
        Ok(loaded)
    }

    /// Once every rank's checkpoint has loaded and fits this configuration's epochs
    /// (a refused resume leaves the run's records and configuration as they were): the
    /// metrics file, opened fresh or continued, and `config.toml`.
    fn open_records(
        &mut self,
        resume: bool,
        loaded: Result<()>,
        source: &Source,
    ) -> Result<MetricsWriter> {
        let cfg = self.cfg.clone();
        let lead = self.rank == 0;
        let per_epoch = source.batches_per_epoch();
        let train_len = self.task.train_len();
        if resume {
            let fits =
                loaded.and_then(|_| self.check_epoch_length(per_epoch, cfg.batch_size, train_len));
            self.all_ranks_ok(fits, "resume")?;
            self.last_loss = self.pos.loss;
            // The run is going again: until it ends, it is not finished (compare_runs
            // refuses a directory without a summary; a resumed run that dies must not
            // keep the summary of where it stood before).
            if lead {
                crate::metrics::remove_present(
                    [cfg.out.join("summary.json")],
                    "the resumed run's earlier",
                )?;
            }
        }
        self.pos.per_epoch = per_epoch;
        self.pos.batch_size = cfg.batch_size;
        self.pos.train_len = train_len;
        let metrics = if resume {
            MetricsWriter::resume(&cfg.out, lead, self.pos.step)?
        } else {
            MetricsWriter::open(&cfg.out, lead, true)?
        };
        // Every rank writes it (the same bytes), so that each node of a multi-node job
        // without a shared file system has the configuration `--resume` reads.
        cfg.write(&cfg.out)?;
        Ok(metrics)
    }

    /// The run's length, schedule and loop state.
    fn plan(
        &self,
        resume: bool,
        started: Instant,
        metrics: MetricsWriter,
        per_epoch: usize,
    ) -> Run {
        let (total_steps, epochs) = self.cfg.plan(per_epoch);
        let params: usize = self.params.iter().map(|p| p.tensor.elem_count()).sum();
        Run {
            started,
            wall_before: self.pos.wall_seconds,
            total_steps,
            epochs,
            per_epoch,
            schedule: self
                .cfg
                .schedule(total_steps as f64 / per_epoch.max(1) as f64),
            dense: DenseRing {
                world: self.world as u64,
                params: params as u64,
            },
            metrics,
            // A resumed run continues the log window the checkpoint was written in, so
            // that its records are the uninterrupted run's (a window spans a `--steps`
            // stop).
            window: if resume {
                Window::from_values(&self.pos.log_window)
            } else {
                Window::default()
            },
            stopped_window: None,
            step: self.pos.step,
            interrupted: false,
            last: Evaluation::none(),
        }
    }

    /// Rank 0's first line, and notes on a run that will not do what it seems to ask.
    fn announce(&mut self, run: &Run, resume: bool) {
        let cfg = &self.cfg;
        self.progress.line(&format!(
            "training {} on {} with {} ({} workers × batch {}, rank 0 on {:?}), {} steps in {} epochs of {}",
            cfg.model,
            cfg.dataset,
            cfg.method,
            self.world,
            cfg.batch_size,
            self.task.device,
            run.total_steps,
            run.epochs,
            run.per_epoch
        ));
        if resume && self.pos.step >= run.total_steps {
            say_err(&format!(
                "note: the checkpoint stands at step {}, at or past this run's end (step {}): nothing is trained, and the summary is the checkpoint's (raise --steps or --epochs to continue)",
                self.pos.step, run.total_steps
            ));
        }
        // A run that ends inside the warm-up never sends at the density asked for: say
        // so, since its ratio and accuracy are then the warm-up's.
        let run_epochs = run.total_steps as f64 / run.per_epoch.max(1) as f64;
        if self.method_warmup > run_epochs {
            say_err(&format!(
                "note: {}'s density warm-up lasts {} epochs and this run {run_epochs:.2}: it sends at the warm-up's densities throughout, never at the density asked for (--method-opt warmup_epochs=0 starts at it)",
                cfg.method, self.method_warmup
            ));
        }
    }

    /// The steps of `epoch` that remain (a resume inside it skips the finished ones), up
    /// to the run's end or an agreed interrupt. False where there was none left to run.
    fn train_epoch(&mut self, run: &mut Run, source: &Source, epoch: usize) -> Result<bool> {
        // A checkpoint written inside this epoch (where `--steps` ended) carries the
        // language model's state; elsewhere an epoch starts from none.
        let done = run.step.saturating_sub(epoch * run.per_epoch);
        if done == 0 {
            self.task.reset_state();
        }
        let mut ran = false;
        for batch in source.epoch(epoch).skip(done) {
            if run.step >= run.total_steps {
                break;
            }
            ran = true;
            self.step_and_log(run, &batch?)?;
            // After this step's evaluation, which a resumed run would not repeat.
            if run.interrupted {
                break;
            }
        }
        Ok(ran)
    }

    /// One training step, then its log line where one is due (where the ranks also agree
    /// on an interrupt) and a mid-epoch evaluation where `--eval-every` asks.
    fn step_and_log(&mut self, run: &mut Run, batch: &Batch) -> Result<()> {
        let (log_every, eval_every, base_lr) =
            (self.cfg.log_every, self.cfg.eval_every, self.cfg.lr);
        let step = run.step;
        faults::die_if_asked(self.rank, step);
        self.note_interrupt(step, log_every);
        let epoch_f = run.epoch_at(step);
        let lr = run.schedule.lr(base_lr, epoch_f);
        self.train_step(batch, step, epoch_f, lr, &mut run.window)?;
        let step = step + 1;
        run.step = step;
        self.pos.step = step;
        if self.rank == 0 {
            self.progress.step(step, run.total_steps);
        }
        let log_due = step.is_multiple_of(log_every.max(1));
        if log_due || step == run.total_steps {
            if !log_due {
                // A record off the --log-every grid, where --steps ends: a run resumed
                // from here continues the window as it stood, so that its next record is
                // an uninterrupted run's. The message bytes go into the position now, so
                // the saved window has none.
                let mut open = run.window.clone();
                (open.wire.message_bytes, open.wire.dense_bytes) = (0, 0);
                run.stopped_window = Some(open);
            }
            let dense = run.dense;
            self.log(
                &mut run.window,
                &mut run.metrics,
                step,
                run.total_steps,
                run.per_epoch,
                lr,
                &move |steps| dense.bytes(steps),
            )?;
            // Just after a log line the window is empty: a checkpoint here resumes into
            // a fresh one, as the uninterrupted run's would be.
            run.interrupted = step < run.total_steps && self.stop_agreed()?;
        }
        if eval_every > 0
            && step.is_multiple_of(eval_every)
            && !step.is_multiple_of(run.per_epoch)
            && step < run.total_steps
        {
            // Mid-epoch: the epoch's end evaluates anyway.
            let (epoch_f, wall) = (run.epoch_at(step), run.wall());
            self.evaluate_and_record(&mut run.metrics, step, epoch_f, wall)?;
        }
        Ok(())
    }

    /// Where an epoch's steps stopped (its end, the run's end, or an interrupt): the
    /// evaluation (not for an interrupt inside the epoch), the position's time and bytes,
    /// the ranks' agreement on an interrupt, and the checkpoint where one is due.
    fn end_epoch(&mut self, run: &mut Run, epoch: usize) -> Result<()> {
        let step = run.step;
        let epoch_ended = step >= (epoch + 1) * run.per_epoch;
        if epoch_ended {
            self.pos.epoch = epoch + 1;
        }
        // An interrupt inside the epoch skips its evaluation, not its checkpoint.
        if !run.interrupted || epoch_ended {
            // Whole at an epoch's end; a fraction where --steps stopped within one.
            let epoch_at = if run.per_epoch > 0 {
                run.epoch_at(step)
            } else {
                (epoch + 1) as f64
            };
            let wall = run.wall();
            run.last = self.evaluate_and_record(&mut run.metrics, step, epoch_at, wall)?;
        }
        // The evaluation's time counts towards the run's.
        self.pos.wall_seconds = run.wall();
        (self.pos.bytes_sent, self.pos.bytes_received) = self.traffic()?;
        self.flush_message_bytes(&mut run.window.wire);
        if !run.interrupted && step < run.total_steps {
            run.interrupted = self.stop_agreed()?;
        }
        let every = self.cfg.checkpoint_every;
        if every > 0
            && (self.pos.epoch.is_multiple_of(every) || step >= run.total_steps || run.interrupted)
        {
            self.save_checkpoint(run.stopped_window.as_ref().unwrap_or(&run.window))?;
        }
        Ok(())
    }

    /// The run's summary (rank 0 writes it with the charts).
    fn finish(&mut self, run: Run) -> Result<Summary> {
        let cfg = self.cfg.clone();
        let mut last = run.last;
        if last.metric.is_nan() {
            // Resumed at the end: evaluate what the checkpoint holds.
            last = self.evaluate()?;
        }
        let (bytes_sent, bytes_received) = self.traffic()?;
        let node_bytes = self.ex.node_bytes()?;
        let dense = run.dense.bytes(self.pos.step as u64);
        let ratio = |d: u64, s: u64| (s > 0).then(|| d as f64 / s as f64);
        let n = self.step_times.len().max(1) as f64;
        let summary = Summary {
            final_metric: last.metric,
            final_top5: last.top5,
            metric_name: self.task.metric_name.into(),
            final_loss: self.last_loss,
            bytes_sent,
            bytes_received,
            dense_bytes: dense,
            compression_ratio: ratio(dense, bytes_sent),
            message_compression_ratio: ratio(self.pos.dense_message_bytes, self.pos.message_bytes),
            intra_node_bytes_sent: node_bytes.map(|b| b.0),
            inter_node_bytes_sent: node_bytes.map(|b| b.1),
            wall_seconds: run.wall(),
            steps: self.pos.step,
            epochs: self.pos.epoch,
            workers: self.world,
            method: cfg.method.clone(),
            method_config: self.method_config.clone(),
            model: cfg.model.clone(),
            parameters: run.dense.params as usize,
            dataset: cfg.dataset.clone(),
            mean_step_seconds: self.step_times.iter().sum::<f64>() / n,
            mean_idle_fraction: self.idle_fractions.iter().sum::<f64>() / n,
        };
        if self.rank == 0 {
            crate::metrics::write_atomic(
                &cfg.out.join("summary.json"),
                serde_json::to_string_pretty(&summary)?.as_bytes(),
            )?;
            crate::plot::run_charts(&cfg.out, self.task.metric_name)?;
            self.progress.finish();
        }
        Ok(summary)
    }
}
