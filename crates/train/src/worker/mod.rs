//! One worker of a data-parallel job. Per step:
//!
//! 1. the sharded loader's next batch → forward → loss → backward; each parameter's
//!    gradient-ready hook hands (index, gradient, weights) to the compression thread,
//!    which runs the method's exchange while backward continues with earlier layers;
//! 2. once backward has returned, parameters whose hook did not fire (unused in this
//!    graph) are sent with zero gradients, in index order, so every rank issues the same
//!    collectives;
//! 3. the training thread waits for the remaining updates (that wait is the step's idle
//!    time), then applies them in index order: `Gradient` updates through the optimizer
//!    (SGD with momentum and weight decay, or Adam), `Direction` updates as `w −= lr·d`;
//! 4. methods that communicate weights (delay, periodic averaging) do so after the step,
//!    and the optimizer's momentum is zeroed where a method asks (SBC's masking).
//!
//! The hooks hand each gradient tensor itself to the compression thread (a bucket's
//! members concatenated, with `--bucket-elems`), which exchanges it over NCCL or TCP:
//! only what crosses a TCP wire is copied to the host, and the updates come back on the
//! gradients' device. The same path on every device and backend.
//!
//! Every `log_every` steps rank 0 appends a line to `metrics.jsonl`; at the end of each
//! epoch (and every `eval_every` steps, if set) the test set is evaluated (each rank its
//! shard, counts summed); at the end of every `checkpoint_every`-th epoch (and where the
//! run ends; never when it is 0) every rank writes its checkpoint.
//!
//! `--resume`: the ranks first agree on the newest checkpoint generation they all hold
//! (a job that died while its ranks were saving leaves them a generation apart), then each
//! restores parameters, buffers, the optimizer's state, the method's state, the position and the
//! carried language-model state; a checkpoint written inside an epoch resumes by skipping
//! that epoch's finished batches (the loader's order and augmentation are deterministic
//! per epoch). Bytes and wall time continue from the checkpoint's, and `metrics.jsonl`
//! loses what the interrupted run logged after it.
//!
//! An interrupt (Ctrl-C, SIGTERM: `crate::interrupt`) is agreed on at log lines (after
//! their step's evaluation) and epoch ends; the ranks then save as at an epoch's end and
//! return `Interrupted` instead of a summary.
//!
//! Here: the worker's setup; `run.rs` is its run, stage by stage; `step.rs` is one
//! training step, `record.rs` the log lines and evaluations, `resume.rs` the checkpoints.

use crate::bucket::{Buckets, Collector};
use crate::checkpoint::{self, Position};
use crate::config::{Config, OptimizerChoice};
use crate::exchanger::Exchanger;
use crate::metrics::Summary;
use crate::progress::say_err;
use crate::task::Task;
use anyhow::{bail, Context, Result};
use comm::Communicator;
use compress::{build, MethodSpec, ParamSpec, WireStats};
use nn::optim::{Adam, Optimizer, Sgd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tensor::{no_grad, Device, Tensor};

mod faults;
mod record;
mod resume;
mod run;
mod step;

pub struct Worker {
    cfg: Config,
    rank: usize,
    world: usize,
    task: Task,
    params: Vec<nn::NamedTensor>,
    buffers: Vec<nn::NamedTensor>,
    opt: Box<dyn Optimizer>,
    ex: Exchanger,
    /// Groups the hooks' gradients into buckets and sends each when complete.
    collector: Arc<Collector>,
    fired: Arc<Vec<AtomicBool>>,
    pos: Position,
    /// Bytes the run had sent and received before this process (a resumed run's
    /// checkpoint); the exchanger's counters start from zero in every process.
    traffic_base: (u64, u64),
    /// Idle fraction per step, for the summary.
    idle_fractions: Vec<f64>,
    step_times: Vec<f64>,
    last_loss: f64,
    /// The method with its resolved options, as `describe` gives it.
    method_config: String,
    /// The method's density warm-up in epochs (0: none), for the note on a shorter run.
    method_warmup: f64,
    /// Rank 0's output: a bar on a terminal (launched workers are piped: plain lines).
    progress: crate::progress::Progress,
    /// Whether rank 0 has said where an interrupted run will stop.
    interrupt_noted: bool,
    /// The step before which the test hook interrupts this rank (see `note_interrupt`).
    interrupt_hook: Option<usize>,
}

/// Removes an earlier run's summary and charts from `out` (a fresh run's rank 0, at its
/// start), so that a run that dies leaves none of them beside its own records.
fn remove_results(out: &std::path::Path) -> Result<()> {
    let charts = crate::plot::RUN_CHARTS
        .iter()
        .flat_map(|c| crate::plot::chart_files(&out.join(c.stem)));
    crate::metrics::remove_present(
        std::iter::once(out.join("summary.json")).chain(charts),
        "the earlier run's",
    )
}

/// `t`'s values on the host, for what must not be silently empty (checkpoints, the
/// initial broadcast).
fn host_f32(t: &Tensor, what: &str) -> Result<Vec<f32>> {
    t.to_vec::<f32>()
        .with_context(|| format!("copying {what} to the host"))
}

impl Worker {
    /// The worker of job rank `rank` of `world`, on the device its `local_rank` (its index
    /// among its node's workers) picks.
    pub fn new(
        cfg: &Config,
        rank: usize,
        local_rank: usize,
        world: usize,
        comm: Communicator,
    ) -> Result<Worker> {
        let device = cfg.device_for(local_rank)?;
        let task = Task::new(cfg, device)?;
        let params = task.model.module().named_params();
        let buffers = task.model.module().named_buffers();
        let spec = MethodSpec::parse(&cfg.method, &cfg.method_opts)?;
        let ctx = compress::Context {
            rank,
            world,
            seed: cfg.seed,
            momentum: cfg.momentum,
            nesterov: cfg.nesterov,
            weight_decay: cfg.weight_decay,
        };
        let mut method = build(&spec, &ctx)?;
        let specs: Vec<ParamSpec> = params
            .iter()
            .map(|p| ParamSpec::new(&p.name, p.tensor.dims()))
            .collect();
        let sizes: Vec<usize> = params.iter().map(|p| p.tensor.elem_count()).collect();
        let buckets = Buckets::plan(&sizes, cfg.bucket_elems);
        method.init(&buckets.specs(&specs))?;
        let method_config = method.describe();
        let method_warmup = method.warmup_epochs();
        let opt: Box<dyn Optimizer> = match cfg.optimizer {
            OptimizerChoice::Sgd => Box::new(Sgd::new(
                cfg.lr,
                cfg.momentum,
                cfg.nesterov,
                cfg.weight_decay,
            )?),
            OptimizerChoice::Adam => Box::new(Adam::new(
                cfg.lr,
                cfg.momentum,
                cfg.adam_beta2,
                cfg.adam_eps,
                cfg.weight_decay,
            )),
        };
        let nccl = cfg.backend == crate::config::Backend::Nccl;
        let labels = buckets.labels(&specs);
        let ex = Exchanger::spawn(comm, method, device, nccl, cfg.local_world_size, labels)?;
        let collector = Arc::new(Collector::new(buckets, ex.jobs.clone()));
        let fired: Arc<Vec<AtomicBool>> =
            Arc::new(params.iter().map(|_| AtomicBool::new(false)).collect());
        for (i, p) in params.iter().enumerate() {
            let (collector, fired, w) = (collector.clone(), fired.clone(), p.tensor.clone());
            let reads = ex.reads_weights;
            p.tensor.register_grad_hook(move |g| {
                fired[i].store(true, Ordering::SeqCst);
                // The weights are read before the optimizer writes them: it waits for
                // every update.
                collector.deliver(i, g.clone(), reads.then(|| w.clone()));
            })?;
        }
        Ok(Worker {
            cfg: cfg.clone(),
            rank,
            world,
            task,
            params,
            buffers,
            opt,
            ex,
            collector,
            fired,
            pos: Position::default(),
            traffic_base: (0, 0),
            idle_fractions: Vec::new(),
            step_times: Vec::new(),
            last_loss: f64::NAN,
            progress: crate::progress::Progress::new(),
            method_config,
            method_warmup,
            interrupt_noted: false,
            interrupt_hook: faults::interrupt_step(rank),
        })
    }

    /// Every rank starts from rank 0's parameters and buffers.
    fn broadcast_model(&self) -> Result<()> {
        let all: Vec<&nn::NamedTensor> = self.params.iter().chain(&self.buffers).collect();
        self.broadcast_from_rank0(&all)
    }

    /// Rank 0's values of `tensors` on every rank (collective).
    fn broadcast_from_rank0(&self, tensors: &[&nn::NamedTensor]) -> Result<()> {
        let mut bytes = Vec::new();
        if self.rank == 0 {
            for t in tensors {
                bytes.extend(
                    host_f32(&t.tensor, &t.name)?
                        .iter()
                        .flat_map(|x| x.to_le_bytes()),
                );
            }
        }
        let got = self.ex.broadcast(bytes)?;
        if self.rank == 0 {
            return Ok(());
        }
        let mut off = 0;
        for t in tensors {
            let n = t.tensor.elem_count();
            let chunk = got
                .get(off..off + 4 * n)
                .context("rank 0's model is smaller than ours (different --model?)")?;
            let v: Vec<f32> = chunk
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            no_grad(|| {
                t.tensor
                    .assign(&Tensor::from_vec(v, t.tensor.dims().to_vec(), Device::Cpu)?)
            })?;
            off += 4 * n;
        }
        if off != got.len() {
            bail!(
                "rank 0's model has {} bytes, ours {off} (different --model?)",
                got.len()
            );
        }
        Ok(())
    }

    /// Whether any rank has been interrupted (collective: every rank calls it at the same
    /// points, its log lines and epoch ends). A one-float allreduce, kept out of the
    /// method's byte counts like the other bookkeeping collectives.
    fn stop_agreed(&self) -> Result<bool> {
        let mine = if crate::interrupt::requested() {
            1.0
        } else {
            0.0
        };
        let all = self.ex.allreduce(vec![mine])?;
        Ok(all.first().is_some_and(|&n| n > 0.0))
    }

    /// On rank 0, the first step after an interrupt says where the run will stop. Test
    /// hook (`faults`, tests only): `GRADEX_INTERRUPT_STEP=RANK:STEP` interrupts that rank
    /// before that step.
    fn note_interrupt(&mut self, step: usize, log_every: usize) {
        if self.interrupt_hook == Some(step) {
            crate::interrupt::request();
        }
        if self.rank == 0 && !self.interrupt_noted && crate::interrupt::requested() {
            self.interrupt_noted = true;
            say_err(&format!(
                "interrupt: stopping at the next log line (--log-every {log_every}) or epoch end, with a checkpoint; interrupt again to stop at once, losing the steps since the last checkpoint"
            ));
        }
    }

    /// The end of an interrupted run, once its checkpoint is saved (unless
    /// `--checkpoint-every 0`) as at an epoch's end: rank 0's charts of what was logged,
    /// and no summary.
    fn stop_interrupted(&mut self, total_steps: usize) -> Result<Summary> {
        let saved = self.cfg.checkpoint_every > 0;
        if self.rank == 0 {
            crate::plot::run_charts(&self.cfg.out, self.task.metric_name)?;
            self.progress.finish();
        }
        Err(crate::interrupt::Interrupted {
            step: Some(self.pos.step),
            total: Some(total_steps),
            saved,
            out: self.cfg.out.clone(),
        }
        .into())
    }

    /// The run's payload bytes sent and received so far (a resumed run's include the
    /// checkpoint's).
    fn traffic(&self) -> Result<(u64, u64)> {
        let t = self.ex.counters()?;
        Ok((
            self.traffic_base.0 + t.payload_sent,
            self.traffic_base.1 + t.payload_received,
        ))
    }

    /// Moves the message bytes gathered since the last call into the run's totals (at
    /// each log line, and before a checkpoint, which must not lose a partial window).
    fn flush_message_bytes(&mut self, wire: &mut WireStats) {
        self.pos.message_bytes += wire.message_bytes as u64;
        self.pos.dense_message_bytes += wire.dense_bytes as u64;
        wire.message_bytes = 0;
        wire.dense_bytes = 0;
    }
}
