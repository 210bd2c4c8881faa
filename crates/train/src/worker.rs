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
//! With `--backend nccl` (dense only) the hooks hand the GPU gradient tensors themselves
//! to the compression thread, which averages them with NCCL; nothing is copied to the
//! host.
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

use crate::bucket::{Buckets, Collector};
use crate::checkpoint::{self, Position};
use crate::config::{Config, OptimizerChoice};
use crate::exchanger::{Exchanger, Job, Reply};
use crate::metrics::{EvalRecord, MetricsWriter, StepRecord, Summary};
use crate::task::Task;
use anyhow::{bail, Context, Result};
use comm::Communicator;
use compress::{build, MethodSpec, ParamSpec, StepInfo, UpdateKind, WireStats};
use nn::optim::{Adam, Optimizer, Sgd};
use nn::Ctx;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tensor::{no_grad, Device, Rng, Tensor};

/// An exchanged gradient: host values (every method over TCP) or a GPU tensor (NCCL).
enum Grad {
    Host(Vec<f32>),
    Device(Tensor),
}

/// Per-step timings, summed between log lines.
#[derive(Clone, Default)]
struct Window {
    steps: usize,
    loss: f64,
    step: f64,
    compute: f64,
    idle: f64,
    overlap: f64,
    wire: WireStats,
}

impl Window {
    /// Its fields as numbers, for a checkpoint's metadata (counts are exact in f64).
    fn to_values(&self) -> Vec<f64> {
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
    fn from_values(v: &[f64]) -> Window {
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
    /// `--backend nccl`: gradients go to the compression thread as GPU tensors.
    nccl: bool,
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
    /// Rank 0's output: a bar on a terminal (launched workers are piped: plain lines).
    progress: crate::progress::Progress,
}

/// Test hook: with GRADEX_FAULT_RANK=r and GRADEX_FAULT_STEP=s, rank r dies abruptly
/// (no cleanup, like a killed process) when it reaches step s. The tests use it to check
/// that a dead worker ends the job with an error naming it and leaves a checkpoint that
/// resumes.
fn fault_injection(rank: usize, step: usize) {
    let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<usize>().ok());
    if var("GRADEX_FAULT_RANK") == Some(rank) && var("GRADEX_FAULT_STEP") == Some(step) {
        eprintln!("rank {rank}: GRADEX_FAULT_STEP={step} reached, exiting abruptly");
        std::process::exit(17);
    }
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

/// A checkpoint's name for an optimizer state entry: SGD's momentum keeps the name it had
/// before Adam (`optim/{i}`), so older checkpoints still resume; others add their key.
fn optim_name(index: usize, key: &str) -> String {
    if key == "momentum" {
        format!("optim/{index}")
    } else {
        format!("optim/{index}/{key}")
    }
}

/// `t`'s values on the host, for what must not be silently empty (checkpoints, the
/// initial broadcast).
fn host_f32(t: &Tensor, what: &str) -> Result<Vec<f32>> {
    t.to_vec::<f32>()
        .with_context(|| format!("copying {what} to the host"))
}

/// `t`'s values on the host, or nothing: the exchange paths hand an empty vector to the
/// method, which refuses it with an error naming the parameter.
fn tensor_f32(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap_or_default()
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
        let ex = Exchanger::spawn(comm, method, nccl.then_some(device))?;
        let collector = Arc::new(Collector::new(buckets, ex.jobs.clone(), ex.reads_weights));
        let fired: Arc<Vec<AtomicBool>> =
            Arc::new(params.iter().map(|_| AtomicBool::new(false)).collect());
        for (i, p) in params.iter().enumerate() {
            let (collector, fired, w) = (collector.clone(), fired.clone(), p.tensor.clone());
            // Copying the weights out costs a pass over the parameter on the backward
            // thread: only for methods that read them.
            let reads = ex.reads_weights;
            if nccl {
                let jobs = ex.jobs.clone();
                p.tensor.register_grad_hook(move |g| {
                    fired[i].store(true, Ordering::SeqCst);
                    // A send fails only when the thread has stopped; its error reply
                    // is what the training thread reports.
                    let _ = jobs.send(Job::ExchangeDevice {
                        index: i,
                        grad: g.clone(),
                    });
                })?;
                continue;
            }
            p.tensor.register_grad_hook(move |g| {
                fired[i].store(true, Ordering::SeqCst);
                // A conversion failure sends empty buffers, which the method rejects
                // with an error naming the parameter.
                collector.deliver(
                    i,
                    tensor_f32(g),
                    if reads { tensor_f32(&w) } else { Vec::new() },
                );
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
            nccl,
            pos: Position::default(),
            traffic_base: (0, 0),
            idle_fractions: Vec::new(),
            step_times: Vec::new(),
            last_loss: f64::NAN,
            progress: crate::progress::Progress::new(),
            method_config,
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

    fn save_checkpoint(&self, window: &Window) -> Result<()> {
        let mut tensors = Vec::new();
        for p in &self.params {
            tensors.push((
                format!("param/{}", p.name),
                host_f32(&p.tensor, &p.name)?,
                p.tensor.dims().to_vec(),
            ));
        }
        for b in &self.buffers {
            tensors.push((
                format!("buffer/{}", b.name),
                host_f32(&b.tensor, &b.name)?,
                b.tensor.dims().to_vec(),
            ));
        }
        for (i, key, t) in self.opt.state() {
            let name = optim_name(i, key);
            let values = host_f32(&t, &name)?;
            tensors.push((name, values, t.dims().to_vec()));
        }
        for (k, v) in self.ex.state()? {
            let n = v.len();
            tensors.push((format!("method/{k}"), v, vec![n]));
        }
        for (k, t) in self.task.carried_state() {
            let name = format!("state/{k}");
            let values = host_f32(&t, &name)?;
            tensors.push((name, values, t.dims().to_vec()));
        }
        let pos = Position {
            world: self.world,
            loss: self.last_loss,
            log_window: window.to_values(),
            ..self.pos.clone()
        };
        checkpoint::save_generation(&self.cfg.out, self.rank, &tensors, &pos)
    }

    /// The checkpoint file every rank can resume from: the ranks exchange the steps of
    /// both generations they hold and take the newest step all of them have. A
    /// checkpoint of another world size is refused.
    fn agree(&self) -> Result<std::path::PathBuf> {
        let out = &self.cfg.out;
        let files = [
            checkpoint::path(out, self.rank),
            checkpoint::prev_path(out, self.rank),
        ];
        let mut mine = [None, None];
        for (slot, f) in mine.iter_mut().zip(&files) {
            if let Some(p) = checkpoint::read_position(f)? {
                if p.world != 0 && p.world != self.world {
                    bail!(
                        "{} was written by a {}-worker run; this run has {} (resume with --workers {})",
                        f.display(),
                        p.world,
                        self.world,
                        p.world
                    );
                }
                *slot = Some(p.step);
            }
        }
        // Each rank's two generations as 8-byte steps + 1 (0: no file).
        let encode = |s: Option<usize>| s.map_or(0u64, |s| s as u64 + 1).to_le_bytes();
        let all = self
            .ex
            .allgather([encode(mine[0]), encode(mine[1])].concat())?;
        let decoded: Vec<[Option<usize>; 2]> = all
            .iter()
            .enumerate()
            .map(|(r, b)| {
                let x = |g: usize| -> Result<Option<usize>> {
                    let raw = b.get(8 * g..8 * g + 8).with_context(|| {
                        format!(
                            "rank {r} sent {} bytes of checkpoint steps, not 16",
                            b.len()
                        )
                    })?;
                    let x = u64::from_le_bytes(raw.try_into()?);
                    Ok((x > 0).then(|| (x - 1) as usize))
                };
                Ok([x(0)?, x(1)?])
            })
            .collect::<Result<_>>()?;
        let step_of = |r: usize, g: usize| -> Option<usize> { decoded[r][g] };
        let holds = |r: usize, s: usize| step_of(r, 0) == Some(s) || step_of(r, 1) == Some(s);
        let chosen = mine
            .iter()
            .flatten()
            .copied()
            .filter(|&s| (0..self.world).all(|r| holds(r, s)))
            .max();
        let Some(step) = chosen else {
            let listing: Vec<String> = (0..self.world)
                .map(|r| match (step_of(r, 0), step_of(r, 1)) {
                    (None, None) => format!("rank {r}: none"),
                    (a, b) => format!(
                        "rank {r}: {}",
                        [a, b]
                            .iter()
                            .flatten()
                            .map(|s| format!("step {s}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                })
                .collect();
            let none = decoded.iter().all(|g| g.iter().all(Option::is_none));
            let why = if none && self.cfg.checkpoint_every == 0 {
                " (a run with --checkpoint-every 0 writes none); without --resume, --overwrite starts the run afresh"
            } else {
                ""
            };
            bail!(
                "no checkpoint step that every rank holds under {} ({}){why}",
                out.join("checkpoint").display(),
                listing.join("; ")
            );
        };
        if mine[0] == Some(step) {
            Ok(files[0].clone())
        } else {
            eprintln!(
                "rank {}: resuming from its previous checkpoint (step {step}): its newest ({}) is not held by every rank",
                self.rank,
                mine[0].map_or("missing".to_string(), |s| format!("step {s}"))
            );
            // The previous generation becomes the current one, replacing the abandoned
            // newer file: otherwise the next save would rotate that file into the
            // previous slot and drop the step every rank holds, and a second crash
            // during that save would leave no common step.
            std::fs::rename(&files[1], &files[0])
                .with_context(|| format!("making {} the current checkpoint", files[1].display()))?;
            Ok(files[0].clone())
        }
    }

    /// A checkpoint's step and epoch are a place in the data only for the epochs that
    /// wrote it: resuming with another `--batch-size`, `--workers`,
    /// `--synthetic-samples` or data would skip or repeat batches (or, with the epoch's
    /// batches all "done", end the run at once), so it is an error. Batches per epoch
    /// alone do not tell: 4,096 and 4,100 samples give 2 workers 64 batches of 32 each,
    /// but shuffle differently; so the batch size and the training split's length are
    /// compared too, where the checkpoint records them.
    fn check_epoch_length(
        &self,
        per_epoch: usize,
        batch_size: usize,
        train_len: usize,
    ) -> Result<()> {
        let p = &self.pos;
        let recorded = p.per_epoch;
        // Older checkpoints did not record it: their step must at least lie in their epoch.
        let fits = if recorded > 0 {
            recorded == per_epoch
        } else {
            p.step >= p.epoch * per_epoch && p.step - p.epoch * per_epoch <= per_epoch
        };
        if !fits {
            bail!(
                "the checkpoint stands at step {} (epoch {}) of a run with {} batches per epoch; this run has {per_epoch} (resume with the batch size, workers and data that wrote it)",
                p.step,
                p.epoch,
                if recorded > 0 { recorded.to_string() } else { "other".into() }
            );
        }
        if p.batch_size != 0 && p.batch_size != batch_size {
            bail!(
                "the checkpoint was written with --batch-size {}; this run has {batch_size} (resume with the batch size that wrote it)",
                p.batch_size
            );
        }
        if p.train_len != 0 && p.train_len != train_len {
            bail!(
                "the checkpoint was written on a training split of {} {}; this run's has {train_len} (resume with the data and --synthetic-samples that wrote it)",
                p.train_len,
                self.task.train_unit()
            );
        }
        Ok(())
    }

    /// Every rank's verdict on a step that must succeed everywhere before any rank acts on
    /// it (here: resuming, before rank 0 truncates `metrics.jsonl` and the ranks rewrite
    /// `config.toml`). A rank that failed gets its own error back; the others get one
    /// naming the first rank that failed and why. Ranks failing before this point (an
    /// error returned on the way) end their process, which the others see as a dead peer.
    fn all_ranks_ok(&self, mine: Result<()>, what: &str) -> Result<()> {
        let msg = match &mine {
            Ok(()) => Vec::new(),
            // At least one byte, so that an empty message means success.
            Err(e) => format!("{e:#} ").into_bytes(),
        };
        let all = self.ex.allgather(msg)?;
        mine?;
        if let Some((r, m)) = all.iter().enumerate().find(|(_, m)| !m.is_empty()) {
            bail!(
                "rank {r} could not {what}: {}",
                String::from_utf8_lossy(m).trim_end()
            );
        }
        Ok(())
    }

    /// Restores this rank from the checkpoint `file`: parameters and buffers, the
    /// optimizer's state, the method's state, the carried language-model state and the
    /// position (with the bytes the run had moved before it).
    fn load_checkpoint(&mut self, file: &std::path::Path) -> Result<()> {
        let saved = checkpoint::load(file)?;
        no_grad(|| -> Result<()> {
            for p in &self.params {
                p.tensor.assign(&checkpoint::take(
                    &saved,
                    &format!("param/{}", p.name),
                    p.tensor.dims(),
                )?)?;
            }
            for b in &self.buffers {
                b.tensor.assign(&checkpoint::take(
                    &saved,
                    &format!("buffer/{}", b.name),
                    b.tensor.dims(),
                )?)?;
            }
            Ok(())
        })?;
        let mut method_state = Vec::new();
        let (mut carried_h, mut carried_c) = (None, None);
        for (name, data, shape) in &saved.tensors {
            if let Some(rest) = name.strip_prefix("optim/") {
                let (i, key) = rest.split_once('/').unwrap_or((rest, "momentum"));
                let i: usize = i
                    .parse()
                    .with_context(|| format!("checkpoint tensor {name}"))?;
                let p = self
                    .params
                    .get(i)
                    .with_context(|| format!("checkpoint tensor {name}: no parameter {i}"))?;
                let t = Tensor::from_vec(data.clone(), shape.clone(), p.tensor.device())?;
                self.opt
                    .load_state(i, key, t, p.tensor.dims())
                    .with_context(|| {
                        format!(
                            "checkpoint tensor {name}, for --optimizer {}",
                            self.opt.name()
                        )
                    })?;
            } else if let Some(k) = name.strip_prefix("method/") {
                method_state.push((k.to_string(), data.clone()));
            } else if let Some(k) = name.strip_prefix("state/") {
                let t = Tensor::from_vec(data.clone(), shape.clone(), Device::Cpu)?;
                match k {
                    "h" => carried_h = Some(t),
                    "c" => carried_c = Some(t),
                    _ => bail!("checkpoint tensor {name}: no such carried state"),
                }
            }
        }
        self.ex.load_state(method_state)?;
        if let Some(h) = carried_h {
            self.task.set_carried_state(h, carried_c)?;
        }
        self.pos = saved.position;
        self.traffic_base = (self.pos.bytes_sent, self.pos.bytes_received);
        Ok(())
    }

    /// Trains to the configured end and returns the summary (every rank computes it;
    /// rank 0 writes the files).
    pub fn run(&mut self, resume: bool) -> Result<Summary> {
        let started = Instant::now();
        let cfg = self.cfg.clone();
        let lead = self.rank == 0;
        std::fs::create_dir_all(&cfg.out)
            .with_context(|| format!("creating the run directory {}", cfg.out.display()))?;
        let mut loaded = Ok(());
        if resume {
            let file = self
                .agree()
                .with_context(|| format!("resuming from {}", cfg.out.display()))?;
            loaded = self
                .load_checkpoint(&file)
                .with_context(|| format!("resuming from {}", file.display()));
        } else {
            // Every rank's verdict before any rank removes anything of the earlier run.
            let fresh = if cfg.overwrite {
                Ok(())
            } else {
                checkpoint::earlier_run(&cfg.out, [self.rank], lead)
            };
            self.all_ranks_ok(fresh, "start a fresh run")?;
            checkpoint::remove(&cfg.out, self.rank)?;
            if lead {
                remove_results(&cfg.out)?;
            }
            self.broadcast_model()?;
        }
        let source = self
            .task
            .source(cfg.batch_size, self.rank, self.world, cfg.seed)?;
        let per_epoch = source.batches_per_epoch();
        let train_len = self.task.train_len();
        if resume {
            let fits =
                loaded.and_then(|_| self.check_epoch_length(per_epoch, cfg.batch_size, train_len));
            self.all_ranks_ok(fits, "resume")?;
            self.last_loss = self.pos.loss;
        }
        self.pos.per_epoch = per_epoch;
        self.pos.batch_size = cfg.batch_size;
        self.pos.train_len = train_len;
        // Only once the checkpoint has been found to fit this configuration, so that a
        // refused resume leaves the run's records and configuration as they were.
        let mut metrics = if resume {
            MetricsWriter::resume(&cfg.out, lead, self.pos.step)?
        } else {
            MetricsWriter::open(&cfg.out, lead, true)?
        };
        // Every rank writes it (the same bytes), so that each node of a multi-node job
        // without a shared file system has the configuration `--resume` reads.
        cfg.write(&cfg.out)?;
        let (total_steps, epochs) = cfg.plan(per_epoch);
        let schedule = cfg.schedule(total_steps as f64 / per_epoch.max(1) as f64);
        let n_params: usize = self.params.iter().map(|p| p.tensor.elem_count()).sum();
        let world = self.world as u64;
        let dense_ring = move |count: u64| -> u64 {
            // A ring allreduce sends 2(P−1)/P of the vector from every rank.
            if world > 1 {
                count * 2 * (world - 1) * 4 * n_params as u64 / world
            } else {
                0
            }
        };
        let wall_before = self.pos.wall_seconds;
        // A resumed run continues the log window the checkpoint was written in, so that
        // its records are the uninterrupted run's (a window spans a `--steps` stop).
        let mut window = if resume {
            Window::from_values(&self.pos.log_window)
        } else {
            Window::default()
        };
        let mut step = self.pos.step;
        let mut stopped_window: Option<Window> = None;
        let mut last = Evaluation::none();
        if lead {
            self.progress.line(&format!(
                "training {} on {} with {} ({} workers × batch {}, rank 0 on {:?}), {} steps in {} epochs of {}",
                cfg.model,
                cfg.dataset,
                cfg.method,
                self.world,
                cfg.batch_size,
                self.task.device,
                total_steps,
                epochs,
                per_epoch
            ));
        }
        for epoch in self.pos.epoch..epochs {
            // A checkpoint written inside this epoch (where `--steps` ended) carries the
            // language model's state; elsewhere an epoch starts from none.
            let done = step.saturating_sub(epoch * per_epoch);
            if done == 0 {
                self.task.reset_state();
            }
            let mut ran = false;
            for batch in source.epoch(epoch).skip(done) {
                if step >= total_steps {
                    break;
                }
                ran = true;
                let batch = batch?;
                fault_injection(self.rank, step);
                let epoch_f = step as f64 / per_epoch as f64;
                let lr = schedule.lr(cfg.lr, epoch_f);
                self.opt.set_lr(lr);
                self.ex.send(Job::Begin(StepInfo {
                    step: step as u64,
                    epoch: epoch_f,
                }))?;
                let t0 = Instant::now();
                let mut ctx = Ctx {
                    training: true,
                    rng: Rng::for_rank(
                        cfg.seed ^ (step as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                        self.rank,
                    ),
                };
                let loss = self.task.loss(&batch, &mut ctx)?;
                let loss_value = loss.to_scalar::<f32>()? as f64;
                if !loss_value.is_finite() {
                    // run() adds the rank to the message.
                    bail!("the loss is {loss_value} at step {step} (learning rate {lr} too high?)");
                }
                loss.backward()?;
                let backward_end = Instant::now();
                for (i, f) in self.fired.iter().enumerate() {
                    if !f.swap(false, Ordering::SeqCst) {
                        let p = &self.params[i].tensor;
                        if self.nccl {
                            let zeros = Tensor::zeros(p.dims().to_vec(), p.dtype(), p.device())?;
                            self.ex.send(Job::ExchangeDevice {
                                index: i,
                                grad: zeros,
                            })?;
                            continue;
                        }
                        let n = p.elem_count();
                        self.collector.deliver(
                            i,
                            vec![0.0; n],
                            if self.ex.reads_weights {
                                tensor_f32(&self.params[i].tensor)
                            } else {
                                Vec::new()
                            },
                        );
                    }
                }
                let mut updates: Vec<Option<(Grad, UpdateKind)>> =
                    (0..self.params.len()).map(|_| None).collect();
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
                            grad,
                            stats,
                            started,
                        } => {
                            let slot = updates.get_mut(index).with_context(|| {
                                format!("compression thread: an update for parameter {index}")
                            })?;
                            *slot = Some((Grad::Device(grad), UpdateKind::Gradient));
                            (started, stats)
                        }
                        _ => bail!("compression thread: unexpected reply during the exchange"),
                    };
                    first_start = Some(first_start.map_or(started, |f: Instant| f.min(started)));
                    window.wire.add(&stats);
                }
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
                window.overlap += first_start.map_or(0.0, |f| {
                    if f < backward_end {
                        (backward_end - f).as_secs_f64()
                    } else {
                        -(f - backward_end).as_secs_f64()
                    }
                });
                self.idle_fractions.push(idle / step_s);
                self.step_times.push(step_s);
                step += 1;
                self.pos.step = step;
                if lead {
                    self.progress.step(step, total_steps);
                }
                let log_due = step.is_multiple_of(cfg.log_every.max(1));
                if log_due || step == total_steps {
                    if !log_due {
                        // A record off the --log-every grid, where --steps ends: a run
                        // resumed from here continues the window as it stood, so that
                        // its next record is an uninterrupted run's. The message bytes
                        // go into the position now, so the saved window has none.
                        let mut open = window.clone();
                        (open.wire.message_bytes, open.wire.dense_bytes) = (0, 0);
                        stopped_window = Some(open);
                    }
                    self.log(
                        &mut window,
                        &mut metrics,
                        step,
                        total_steps,
                        per_epoch,
                        lr,
                        &dense_ring,
                    )?;
                }
                if cfg.eval_every > 0
                    && step.is_multiple_of(cfg.eval_every)
                    && !step.is_multiple_of(per_epoch)
                    && step < total_steps
                {
                    // Mid-epoch: the epoch's end evaluates anyway.
                    let wall = wall_before + started.elapsed().as_secs_f64();
                    let epoch_f = step as f64 / per_epoch as f64;
                    self.evaluate_and_record(&mut metrics, step, epoch_f, wall)?;
                }
            }
            if !ran {
                break; // resumed where the run had already stopped
            }
            if step >= (epoch + 1) * per_epoch {
                self.pos.epoch = epoch + 1;
            }
            let wall = wall_before + started.elapsed().as_secs_f64();
            // Whole at an epoch's end; a fraction where --steps stopped within one.
            let epoch_at = if per_epoch > 0 {
                step as f64 / per_epoch as f64
            } else {
                (epoch + 1) as f64
            };
            last = self.evaluate_and_record(&mut metrics, step, epoch_at, wall)?;
            // The evaluation's time counts towards the run's.
            self.pos.wall_seconds = wall_before + started.elapsed().as_secs_f64();
            (self.pos.bytes_sent, self.pos.bytes_received) = self.traffic()?;
            self.flush_message_bytes(&mut window.wire);
            let every = cfg.checkpoint_every;
            if every > 0 && (self.pos.epoch.is_multiple_of(every) || step >= total_steps) {
                self.save_checkpoint(stopped_window.as_ref().unwrap_or(&window))?;
            }
            if step >= total_steps {
                break;
            }
        }
        if last.metric.is_nan() {
            // Resumed at the end: evaluate what the checkpoint holds.
            last = self.evaluate()?;
        }
        let (bytes_sent, bytes_received) = self.traffic()?;
        let dense = dense_ring(self.pos.step as u64);
        let ratio = |d: u64, s: u64| {
            if s > 0 {
                Some(d as f64 / s as f64)
            } else {
                None
            }
        };
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
            wall_seconds: wall_before + started.elapsed().as_secs_f64(),
            steps: self.pos.step,
            epochs: self.pos.epoch,
            workers: self.world,
            method: cfg.method.clone(),
            method_config: self.method_config.clone(),
            model: cfg.model.clone(),
            parameters: n_params,
            dataset: cfg.dataset.clone(),
            mean_step_seconds: self.step_times.iter().sum::<f64>() / n,
            mean_idle_fraction: self.idle_fractions.iter().sum::<f64>() / n,
        };
        if lead {
            crate::metrics::write_atomic(
                &cfg.out.join("summary.json"),
                serde_json::to_string_pretty(&summary)?.as_bytes(),
            )?;
            crate::plot::run_charts(&cfg.out, self.task.metric_name)?;
            self.progress.finish();
        }
        Ok(summary)
    }

    fn apply(&mut self, updates: Vec<Option<(Grad, UpdateKind)>>, lr: f64) -> Result<()> {
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

    fn sync_weights(&mut self, wire: &mut WireStats) -> Result<()> {
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

    #[allow(clippy::too_many_arguments)]
    fn log(
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
    fn evaluate_and_record(
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
            wall_seconds: wall_before_eval + t.elapsed().as_secs_f64(),
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
    fn evaluate(&mut self) -> Result<Evaluation> {
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
struct Evaluation {
    metric: f64,
    loss: f64,
    /// What the metric averages over (see [`EvalRecord`]).
    count: u64,
    /// Top-5 accuracy of an image task with at least 5 classes.
    top5: Option<f64>,
}

impl Evaluation {
    /// Before the first evaluation.
    fn none() -> Self {
        Evaluation {
            metric: f64::NAN,
            loss: f64::NAN,
            count: 0,
            top5: None,
        }
    }
}
