//! A run's configuration: every command-line flag is also a key of the `--config` TOML
//! file (flags win over the file, the file over the defaults). `validate` rejects wrong
//! combinations before any worker starts, and the resolved configuration is written into
//! the run directory.

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The learning-rate schedule's shape (`--warmup-epochs` adds a warm-up before any).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
#[value(rename_all = "lowercase")]
pub enum Schedule {
    /// The base rate throughout.
    Constant,
    /// × --gamma every --milestones PERIOD epochs.
    Step,
    /// × --gamma at each of --milestones (epochs).
    Multistep,
    /// Cosine decay to 0 over the run (--epochs, or --steps as a fraction of epochs).
    Cosine,
}

/// Where a worker's tensors live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
#[value(rename_all = "lowercase")]
pub enum DeviceChoice {
    /// The CPU.
    Cpu,
    /// GPU `rank mod count`; an error where there is none.
    Cuda,
    /// The GPU when a driver and a device are present, else the CPU.
    Auto,
}

/// The collectives' transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
#[value(rename_all = "lowercase")]
pub enum Backend {
    /// Every method; CPU or GPU tensors, host messages.
    Tcp,
    /// --device cuda and a method on tensors (dense, dgc, gtopk, topk, local): each
    /// gradient exchanged on the GPU, one GPU per worker, as NCCL requires.
    Nccl,
}

/// How gradients reach the method: as tensors on their device, or copied to host slices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
#[value(rename_all = "lowercase")]
pub enum Exchange {
    /// Tensors with --backend nccl; host slices with tcp (the faster path over TCP where
    /// both were measured).
    Auto,
    /// Host slices (every method; the only way with --bucket-elems).
    Slices,
    /// Tensors on the training device (dense, dgc, gtopk, topk, local; the same results as slices, bit for
    /// bit, on the CPU).
    Tensors,
}

/// The optimizer that applies each exchanged gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
#[value(rename_all = "lowercase")]
pub enum OptimizerChoice {
    /// SGD with --momentum (and --nesterov), as torch.optim.SGD.
    Sgd,
    /// Adam as torch.optim.Adam: β1 is --momentum, β2 --adam-beta2, ε --adam-eps; L2
    /// --weight-decay added to the gradient.
    Adam,
}

/// Whether the launcher pins each local worker to its own share of the CPUs. A config
/// file may write it as a word (`"auto"`, `"true"`, `"false"`, as the flag takes) or as a
/// TOML boolean (`pin_cores = false`), which is what a TOML writer reaches for first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
#[value(rename_all = "lowercase")]
pub enum PinCores {
    /// Pin when there are no more workers than CPUs.
    Auto,
    /// Always pin.
    True,
    /// Leave placement to the scheduler.
    False,
}

impl<'de> Deserialize<'de> for PinCores {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Words;
        impl serde::de::Visitor<'_> for Words {
            type Value = PinCores;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("`auto`, `true` or `false` (a word or a boolean)")
            }
            fn visit_bool<E: serde::de::Error>(self, b: bool) -> std::result::Result<PinCores, E> {
                Ok(if b { PinCores::True } else { PinCores::False })
            }
            fn visit_str<E: serde::de::Error>(self, w: &str) -> std::result::Result<PinCores, E> {
                match w {
                    "auto" => Ok(PinCores::Auto),
                    "true" => Ok(PinCores::True),
                    "false" => Ok(PinCores::False),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(w), &self)),
                }
            }
        }
        d.deserialize_any(Words)
    }
}

/// A value of a `ValueEnum` flag as written on the command line, for messages.
fn flag_value<T: ValueEnum + std::fmt::Debug>(v: &T) -> String {
    v.to_possible_value()
        .map_or_else(|| format!("{v:?}"), |p| p.get_name().to_string())
}

/// `--device` as written on the command line, for messages.
impl std::fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&flag_value(self))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub model: String,
    pub dataset: String,
    pub data_dir: Option<PathBuf>,
    pub method: String,
    pub method_opts: Vec<String>,
    pub workers: usize,
    pub batch_size: usize,
    pub epochs: Option<usize>,
    pub steps: Option<usize>,
    pub lr: f64,
    pub schedule: Schedule,
    pub milestones: Vec<f64>,
    pub gamma: f64,
    pub warmup_epochs: f64,
    pub optimizer: OptimizerChoice,
    pub momentum: f64,
    pub nesterov: bool,
    pub adam_beta2: f64,
    pub adam_eps: f64,
    pub weight_decay: f64,
    pub clip: f64,
    pub seed: u64,
    pub device: DeviceChoice,
    pub backend: Backend,
    pub exchange: Exchange,
    pub out: PathBuf,
    pub log_every: usize,
    pub synthetic_samples: usize,
    pub eval_samples: Option<usize>,
    /// Also evaluate every this many steps (0: only at the end of each epoch).
    pub eval_every: usize,
    pub hidden: Option<usize>,
    pub layers: Option<usize>,
    pub dropout: Option<f64>,
    pub bptt: usize,
    pub bucket_elems: usize,
    /// Workers per node of the hierarchical exchange (0: flat; see `--local-world-size`).
    #[serde(default)]
    pub local_world_size: usize,
    pub pin_cores: PinCores,
    /// Save a checkpoint every this many epochs and where the run ends (0: never).
    pub checkpoint_every: usize,
    /// A fresh run may replace an earlier run's records and checkpoints in `out`.
    pub overwrite: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            model: "resnet20".into(),
            dataset: "fashion-mnist".into(),
            data_dir: None,
            method: "dgc".into(),
            method_opts: Vec::new(),
            workers: 1,
            batch_size: 32,
            epochs: None,
            steps: None,
            lr: 0.1,
            schedule: Schedule::Constant,
            milestones: Vec::new(),
            gamma: 0.1,
            warmup_epochs: 0.0,
            optimizer: OptimizerChoice::Sgd,
            momentum: 0.9,
            nesterov: false,
            adam_beta2: 0.999,
            adam_eps: 1e-8,
            weight_decay: 1e-4,
            clip: 0.0,
            seed: 1,
            device: DeviceChoice::Cpu,
            backend: Backend::Tcp,
            exchange: Exchange::Auto,
            out: PathBuf::from("runs/latest"),
            log_every: 10,
            synthetic_samples: 4096,
            eval_samples: None,
            eval_every: 0,
            hidden: None,
            layers: None,
            dropout: None,
            bptt: 35,
            bucket_elems: 0,
            local_world_size: 0,
            pin_cores: PinCores::Auto,
            checkpoint_every: 1,
            overwrite: false,
        }
    }
}

/// Data-parallel training with compressed gradient exchange.
///
/// `train --workers 4 ...` starts 4 worker processes on this machine. With RANK,
/// WORLD_SIZE, MASTER_ADDR, MASTER_PORT and GRADEX_TOKEN set, it runs as one worker of a
/// multi-node job instead (see docs/train.md).
#[derive(Parser, Debug, Default)]
// Negative numbers are values (`--lr -0.1` is then refused as a rate, not read as a flag).
#[command(name = "train", version, after_help = METHOD_HELP, allow_negative_numbers = true)]
pub struct Args {
    /// TOML file with any of the keys below (flag names with '_' for '-').
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Model (default resnet20); the list is nn's model registry (`train --help`).
    #[arg(long)]
    pub model: Option<String>,
    /// Dataset (default fashion-mnist). Images: fashion-mnist, mnist (--data-dir), cifar10, imagenet (--data-dir with
    /// train/<class>/ and val/<class>/ image folders, at the model's resolution; top-5
    /// accuracy is recorded too). Language: kjv (default --data-dir data/kjv,
    /// from `datasets prepare kjv`), ptb. Speech: speech (default --data-dir data/speech,
    /// from `datasets prepare speech`), an4 (same manifest layout). Any model: synthetic
    /// (learnable data of the model's input shape).
    #[arg(long)]
    pub dataset: Option<String>,
    /// Directory of the dataset files (fashion-mnist default: /usr/share/datasets/fashion-mnist).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Gradient-exchange method (default dgc, whose density warms up over its first 4
    /// epochs; see the list below).
    #[arg(long)]
    pub method: Option<String>,
    /// A method option as key=value (repeatable), e.g. --method-opt density=0.001.
    #[arg(long = "method-opt")]
    pub method_opts: Vec<String>,
    /// Worker processes to start on this machine (default 1).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Batch size per worker (default 32).
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Epochs to train (default 1 when --steps is not given). Given alone on the command
    /// line, it replaces a configuration file's `steps` (as when resuming a --steps run).
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Stop after this many steps (overrides --epochs).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Base learning rate (default 0.1; the model's recipe's rate where 0.1 diverges, from
    /// nn's model registry: `train --help` lists them).
    #[arg(long)]
    pub lr: Option<f64>,
    /// Learning-rate schedule (default constant).
    #[arg(long, value_enum)]
    pub schedule: Option<Schedule>,
    /// Epochs at which multistep multiplies the rate by --gamma (comma-separated); for
    /// step, the first value is the period.
    #[arg(long, value_delimiter = ',')]
    pub milestones: Option<Vec<f64>>,
    /// Factor of the step and multistep schedules (default 0.1).
    #[arg(long)]
    pub gamma: Option<f64>,
    /// Linear learning-rate warm-up over this many epochs (from 0.1 of the base rate).
    #[arg(long)]
    pub warmup_epochs: Option<f64>,
    /// Optimizer (default sgd). adam needs a method that leaves momentum to the optimizer
    /// (not dgc's momentum correction).
    #[arg(long, value_enum)]
    pub optimizer: Option<OptimizerChoice>,
    /// SGD momentum (default 0.9; DGC's momentum correction uses it instead of the
    /// optimizer). With --optimizer adam, Adam's β1.
    #[arg(long)]
    pub momentum: Option<f64>,
    /// Nesterov momentum (SGD only).
    #[arg(long)]
    pub nesterov: Option<bool>,
    /// Adam's β2 (default 0.999, PyTorch's).
    #[arg(long)]
    pub adam_beta2: Option<f64>,
    /// Adam's ε (default 1e-8, PyTorch's).
    #[arg(long)]
    pub adam_eps: Option<f64>,
    /// With --workers N > 1, pinning gives each worker its own share
    /// of the C CPUs this process may use (its CPU set, capped by a container's CPU
    /// quota; C/N each; with N > C, one CPU per N/C workers),
    /// and its thread pool as many threads (unless RAYON_NUM_THREADS says otherwise). auto
    /// pins when N <= C. With N > C, true halves the idle wait for peers but costs some
    /// throughput (RESULTS.md). A multi-node worker honours GRADEX_CPUS=0-3,8,...
    #[arg(long, value_enum)]
    pub pin_cores: Option<PinCores>,
    /// L2 weight decay (default 1e-4).
    #[arg(long)]
    pub weight_decay: Option<f64>,
    /// Clip the global L2 norm of the exchanged gradient to this (0: off). For dgc use
    /// --method-opt clip=... (DGC clips locally, before compression).
    #[arg(long)]
    pub clip: Option<f64>,
    /// Seed of initialisation, data order and the methods' random draws (default 1).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Where tensors live (default cpu).
    #[arg(long, value_enum)]
    pub device: Option<DeviceChoice>,
    /// Collective backend (default tcp).
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// How gradients reach the method (default auto).
    #[arg(long, value_enum)]
    pub exchange: Option<Exchange>,
    /// Run directory: config, metrics.jsonl, summary.json, checkpoints (default
    /// runs/latest). One that holds an earlier run is refused unless --resume or
    /// --overwrite.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Continue the run in --out from its last checkpoint.
    #[arg(long)]
    pub resume: bool,
    /// Let a fresh run replace an earlier run in --out (a finished one's summary.json, or
    /// checkpoints); without it such a directory is refused, nothing touched. Not recorded
    /// in the run's config.toml.
    #[arg(long, conflicts_with = "resume")]
    pub overwrite: bool,
    /// Checkpoint every N epochs and where the run ends (default 1: every epoch; 0: never,
    /// which saves disk and time but leaves nothing to --resume from). Each rank keeps
    /// two generations of its parameters, optimizer state and the method's residuals:
    /// for AlexNet with DGC 2 × 732 MB a rank.
    #[arg(long)]
    pub checkpoint_every: Option<usize>,
    /// Log a metrics line every N steps (default 10).
    #[arg(long)]
    pub log_every: Option<usize>,
    /// Training samples of the synthetic dataset (images, utterances; tokens for language
    /// models; default 4096).
    #[arg(long)]
    pub synthetic_samples: Option<usize>,
    /// Evaluate on at most this many test samples, spread evenly over the test set (for
    /// language models its first this many tokens; default: all).
    #[arg(long)]
    pub eval_samples: Option<usize>,
    /// Also evaluate every N steps, not only at the end of each epoch (a finer learning
    /// curve, and the time to reach a metric; no checkpoint is written there).
    #[arg(long)]
    pub eval_every: Option<usize>,
    /// Hidden units of the language or speech model's recurrent layers (default: the paper's).
    #[arg(long)]
    pub hidden: Option<usize>,
    /// Recurrent layers of a speech model (default: the paper's).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Dropout of the language model (default: 0.65 at 1500 units, 0.5 at 650, else none).
    #[arg(long)]
    pub dropout: Option<f64>,
    /// Truncated-BPTT window of the language models, in tokens (default 35).
    #[arg(long)]
    pub bptt: Option<usize>,
    /// Exchange consecutive parameters of fewer than N elements together, in buckets of at
    /// most N elements (0: off). Fewer, larger collectives; the method then compresses each
    /// bucket as one vector (for dgc, N <= dense_below changes nothing but the count).
    #[arg(long)]
    pub bucket_elems: Option<usize>,
    /// Hierarchical exchange (torchrun's LOCAL_WORLD_SIZE): ranks come in nodes of N
    /// consecutive ranks; each node averages its gradients densely (its workers share a
    /// fast link: NCCL on GPUs, TCP on CPUs), its first rank runs the method across the
    /// nodes' first ranks only, and sends the result back to its node. Bytes inside and
    /// across nodes are counted apart (summary.json). 0: every rank runs the method (flat).
    /// Needs a method on tensors.
    #[arg(long)]
    pub local_world_size: Option<usize>,
}

/// The most samples (tokens, for a language model) `--dataset synthetic` generates: 2³⁰,
/// whose shuffled order is 8 GiB.
pub const MAX_SYNTHETIC_SAMPLES: usize = 1 << 30;

const METHOD_HELP: &str = "Methods and their options (--method NAME --method-opt key=value):
(run with --help to see them all; the table is compress::help_text)";

impl Config {
    /// The device the worker of local rank `rank` (its index among its node's workers)
    /// trains on: `cpu`; `cuda`, GPU `rank mod count`; `auto`, the GPU when one is
    /// usable, else the CPU.
    pub fn device_for(&self, rank: usize) -> Result<tensor::Device> {
        let count = tensor::cuda::device_count();
        let gpu = || -> Option<tensor::Device> {
            (count > 0)
                .then(|| rank % count)
                .filter(|&o| tensor::cuda::is_available(o))
                .map(tensor::Device::Cuda)
        };
        match self.device {
            DeviceChoice::Cpu => Ok(tensor::Device::Cpu),
            DeviceChoice::Auto => Ok(gpu().unwrap_or(tensor::Device::Cpu)),
            DeviceChoice::Cuda => gpu().with_context(|| {
                format!("--device cuda: rank {rank} finds no usable CUDA device ({count} present)")
            }),
        }
    }

    /// A fresh run writes its resolved configuration to `OUT/config.toml`: where that is
    /// the `--config` file itself, the user's file (its comments, its layout) would be
    /// replaced. Refused; `--resume` reads and rewrites it, as it is the run's own.
    pub fn check_config_kept(args: &Args, out: &Path) -> Result<()> {
        let Some(given) = args.config.as_deref().filter(|_| !args.resume) else {
            return Ok(());
        };
        let written = out.join("config.toml");
        if data::prepare::same_file(given, &written) {
            bail!(
                "--config {} is the file this run writes its configuration to ({}): copy it elsewhere to start a new run from it, or give --resume to continue the run it belongs to",
                given.display(),
                written.display()
            );
        }
        Ok(())
    }

    /// Defaults, then the `--config` file, then the flags. A rate given by neither the
    /// file nor `--lr` is the model's usual one ([`crate::task::usual_lr`]: 0.01 for
    /// LeNet-5 and AlexNet, 3e-4 for the speech models) where that is below the default
    /// 0.1, at which those diverge (LeNet-5 on Fashion-MNIST: NaN at step 29).
    pub fn resolve(args: &Args) -> Result<Config> {
        let mut lr_given = args.lr.is_some();
        let mut c = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading the config file {}", path.display()))?;
                let c = toml::from_str::<Config>(&text)
                    .with_context(|| format!("parsing the config file {}", path.display()))?;
                // Parsed above as a Config, so it is a table; `lr` is a top-level key.
                lr_given |=
                    toml::from_str::<toml::Table>(&text).is_ok_and(|t| t.contains_key("lr"));
                // Permission to replace a run is given per command: in a file it would
                // replace a finished run every time the file is used, without a word.
                if c.overwrite {
                    bail!(
                        "{}: overwrite = true is not a configuration key; give --overwrite on the command that may replace a run",
                        path.display()
                    );
                }
                c
            }
            None => Config::default(),
        };
        macro_rules! take {
            ($($f:ident),*) => { $( if let Some(v) = &args.$f { c.$f = v.clone(); } )* };
        }
        take!(
            model,
            dataset,
            method,
            workers,
            batch_size,
            lr,
            schedule,
            milestones,
            gamma,
            warmup_epochs,
            optimizer,
            momentum,
            nesterov,
            adam_beta2,
            adam_eps,
            pin_cores,
            weight_decay,
            clip,
            seed,
            device,
            backend,
            exchange,
            out,
            log_every,
            synthetic_samples,
            eval_every,
            bptt,
            bucket_elems,
            local_world_size,
            checkpoint_every
        );
        if args.data_dir.is_some() {
            c.data_dir = args.data_dir.clone();
        }
        if args.epochs.is_some() {
            c.epochs = args.epochs;
            // `--epochs` on the command line sets the run's length: a `steps` from the
            // file (a resumed `--steps` run's config.toml) would otherwise win in `plan`.
            if args.steps.is_none() {
                c.steps = None;
            }
        }
        if args.steps.is_some() {
            c.steps = args.steps;
        }
        for (field, arg) in [
            (&mut c.eval_samples, args.eval_samples),
            (&mut c.hidden, args.hidden),
            (&mut c.layers, args.layers),
        ] {
            if arg.is_some() {
                *field = arg;
            }
        }
        if args.dropout.is_some() {
            c.dropout = args.dropout;
        }
        if !args.method_opts.is_empty() {
            c.method_opts = args.method_opts.clone();
        }
        if args.overwrite {
            c.overwrite = true;
        }
        if !lr_given {
            if let Some((usual, _)) = crate::task::usual_lr(&c.model) {
                c.lr = usual;
            }
        }
        Ok(c)
    }

    /// Everything that can be checked before a worker starts.
    pub fn validate(&self) -> Result<()> {
        if self.workers == 0 || self.batch_size == 0 {
            bail!("--workers and --batch-size must be at least 1");
        }
        if self.lr <= 0.0 || !self.lr.is_finite() {
            bail!("--lr must be positive");
        }
        if !(0.0..1.0).contains(&self.momentum) {
            bail!("--momentum must be in [0, 1)");
        }
        if self.nesterov && self.momentum == 0.0 {
            bail!("--nesterov needs --momentum > 0");
        }
        if self.optimizer == OptimizerChoice::Adam {
            if self.nesterov {
                bail!("--nesterov is SGD's; --optimizer adam has no Nesterov form here");
            }
            if !(0.0..1.0).contains(&self.adam_beta2) {
                bail!("--adam-beta2 must be in [0, 1)");
            }
            if !(self.adam_eps > 0.0 && self.adam_eps.is_finite()) {
                bail!("--adam-eps must be positive");
            }
        }
        // TOML integers are i64: a larger seed would fail only when config.toml is written.
        if i64::try_from(self.seed).is_err() {
            bail!(
                "--seed {} is above {} (the run's config.toml stores it as a TOML integer)",
                self.seed,
                i64::MAX
            );
        }
        if self.steps == Some(0) || self.epochs == Some(0) {
            bail!("--steps and --epochs must be at least 1");
        }
        // The launcher would start every worker before each found the job too large.
        if self.workers > comm::MAX_WORLD {
            bail!(
                "--workers {} is over the {} ranks a job supports",
                self.workers,
                comm::MAX_WORLD
            );
        }
        if self.log_every == 0 {
            bail!("--log-every must be at least 1 (steps between metrics lines)");
        }
        for (flag, v) in [
            ("--weight-decay", self.weight_decay),
            ("--clip", self.clip),
            ("--warmup-epochs", self.warmup_epochs),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                bail!("{flag} must be a finite value ≥ 0 (got {v})");
            }
        }
        if !(self.gamma > 0.0 && self.gamma.is_finite()) {
            bail!("--gamma must be positive (got {})", self.gamma);
        }
        if self.schedule == Schedule::Multistep
            && (self.milestones.iter().any(|&m| !(m > 0.0 && m.is_finite()))
                || self.milestones.windows(2).any(|w| w[0] >= w[1]))
        {
            bail!(
                "--milestones {:?}: multistep's epochs must be positive and increasing",
                self.milestones
            );
        }
        if self.eval_samples == Some(0) {
            bail!("--eval-samples must be at least 1 (it limits the test set; leave it out for the whole set)");
        }
        // Every rank evaluates its shard of images or utterances, a sample each at least; a
        // language model's test text is cut into EVAL_STREAMS streams of at least 2 tokens
        // whatever the number of workers.
        if let Some(n) = self.eval_samples {
            if crate::task::is_language_model(&self.model) {
                let least = crate::task::EVAL_MIN_TOKENS;
                if n < least {
                    bail!(
                        "--eval-samples {n} is too few: a language model's test text is cut into {} streams of at least 2 tokens, {least} tokens",
                        crate::task::EVAL_STREAMS
                    );
                }
            } else if n < self.workers {
                bail!(
                    "--eval-samples {n} is too few for {} workers: each evaluates its own share, at least a sample",
                    self.workers
                );
            }
        }
        // Every epoch shuffles an index a sample (a generated text is held whole): a set
        // past this bound ends in an abort on allocation or the OOM killer (10^11: exit 137).
        if self.dataset == "synthetic" {
            let n = self.synthetic_samples.max(self.eval_samples.unwrap_or(0));
            if n > MAX_SYNTHETIC_SAMPLES {
                bail!(
                    "--synthetic-samples / --eval-samples {n} is more than a generated set may have (at most {MAX_SYNTHETIC_SAMPLES}: each epoch's shuffled order takes 8 bytes a sample, a generated text 4 bytes a token); for a longer run give --epochs or --steps"
                );
            }
        }
        // Synthetic image and speech sets count samples; the text one counts tokens and
        // checks its windows itself.
        let per_step = self.workers * self.batch_size;
        if self.dataset == "synthetic"
            && !crate::task::is_language_model(&self.model)
            && self.synthetic_samples < per_step
        {
            bail!(
                "--synthetic-samples {} is less than one step's {per_step} samples ({} workers × batch {})",
                self.synthetic_samples,
                self.workers,
                self.batch_size
            );
        }
        if self.schedule == Schedule::Step && self.milestones.first().is_none_or(|&p| p <= 0.0) {
            bail!("--schedule step needs --milestones PERIOD (epochs, > 0)");
        }
        if self.schedule == Schedule::Multistep && self.milestones.is_empty() {
            bail!("--schedule multistep needs --milestones E1,E2,... (epochs where the rate is multiplied by --gamma)");
        }
        if self.schedule == Schedule::Step && self.milestones.len() > 1 {
            bail!("--schedule step takes one --milestones PERIOD (the rate is multiplied by --gamma every PERIOD epochs); E1,E2,... is --schedule multistep");
        }
        // Flags a schedule or optimizer would not read are errors, not silently constant
        // rates: `--milestones 30,60` without `--schedule multistep` trained at one rate.
        // (gamma and the Adam options are compared with their defaults, the only way a
        // resolved configuration can tell; setting a default explicitly is harmless.)
        let d = Config::default();
        if matches!(self.schedule, Schedule::Constant | Schedule::Cosine) {
            let name = flag_value(&self.schedule);
            if !self.milestones.is_empty() {
                bail!("--milestones is for --schedule step or multistep; this run's schedule is {name}");
            }
            if self.gamma != d.gamma {
                bail!("--gamma is for --schedule step or multistep; this run's schedule is {name}");
            }
        }
        if self.optimizer == OptimizerChoice::Sgd {
            for (flag, set) in [
                ("--adam-beta2", self.adam_beta2 != d.adam_beta2),
                ("--adam-eps", self.adam_eps != d.adam_eps),
            ] {
                if set {
                    bail!("{flag} is for --optimizer adam; this run's optimizer is sgd");
                }
            }
        }
        let spec = compress::MethodSpec::parse(&self.method, &self.method_opts)?;
        // Build the method once here, so a bad option value (density=2) is an error before
        // any worker starts rather than one from every worker.
        let method = compress::build(
            &spec,
            &compress::Context {
                rank: 0,
                world: self.workers,
                seed: self.seed,
                momentum: self.momentum,
                nesterov: self.nesterov,
                weight_decay: self.weight_decay,
            },
        )
        .map_err(|e| match e {
            // Its text already begins "method configuration: ".
            e @ compress::CompressError::Config(_) => anyhow::Error::new(e),
            e => anyhow::Error::new(e).context("method configuration"),
        })?;
        if self.optimizer == OptimizerChoice::Adam && method.replaces_optimizer() {
            bail!("--optimizer adam with {}: the method applies SGD momentum and weight decay itself (DGC's momentum correction); use --optimizer sgd, or --method-opt momentum_correction=false --method-opt masking=false", method.describe());
        }
        if self.local_world_size > 0 {
            let l = self.local_world_size;
            if !self.workers.is_multiple_of(l) {
                bail!(
                    "--local-world-size {l}: {} workers do not make whole nodes of {l}",
                    self.workers
                );
            }
            if !method.on_tensors() {
                bail!("--local-world-size: the hierarchical exchange runs methods on tensors; --method {} {:?} does not ({} do)", spec.name, self.method_opts, compress::on_tensors_text());
            }
            if self.exchange == Exchange::Slices {
                bail!("--local-world-size exchanges tensors; --exchange slices does not combine with it");
            }
            if self.bucket_elems > 0 {
                bail!("--local-world-size exchanges each parameter's tensor; --bucket-elems needs the flat exchange");
            }
        }
        if self.exchange == Exchange::Tensors {
            if !method.on_tensors() {
                bail!("--exchange tensors: --method {} {:?} does not run on tensors yet ({} do); use --exchange slices or auto", spec.name, self.method_opts, compress::on_tensors_text());
            }
            if self.bucket_elems > 0 {
                bail!("--exchange tensors exchanges each parameter's gradient tensor; --bucket-elems needs --exchange slices");
            }
        }
        match self.backend {
            Backend::Tcp => {}
            // NCCL moves GPU tensors: the methods that run on tensors exchange over it;
            // the others encode host byte buffers, which the TCP backend carries.
            Backend::Nccl => {
                if self.device != DeviceChoice::Cuda {
                    bail!("--backend nccl needs --device cuda (NCCL reduces GPU buffers; got --device {})", self.device);
                }
                if !method.on_tensors() {
                    bail!("--backend nccl runs the methods on tensors ({}); --method {} {:?} exchanges host messages: use --backend tcp", compress::on_tensors_text(), spec.name, self.method_opts);
                }
                if self.bucket_elems > 0 {
                    bail!("--backend nccl exchanges each parameter's gradient tensor in place; --bucket-elems is for --backend tcp");
                }
                if self.exchange == Exchange::Slices {
                    bail!(
                        "--backend nccl exchanges tensors; --exchange slices is for --backend tcp"
                    );
                }
            }
        }
        match self.device {
            DeviceChoice::Cpu | DeviceChoice::Auto => {}
            // Counting devices needs only the driver; the launcher must not open a context
            // (and hold GPU memory) for workers it only supervises. Each worker checks
            // its own device fully in `device_for`.
            DeviceChoice::Cuda => {
                if tensor::cuda::device_count() == 0 {
                    bail!("--device cuda: no CUDA device (no driver, or no GPU; see crates/tensor/CUDA.md); use --device cpu or auto");
                }
            }
        }
        if self.clip > 0.0 && spec.name == "dgc" {
            bail!("--clip with --method dgc: DGC clips locally before compression; use --method-opt clip={}", self.clip);
        }
        crate::task::check(self)?;
        Ok(())
    }

    /// Total steps and epochs of the run, given the batches per epoch.
    pub fn plan(&self, batches_per_epoch: usize) -> (usize, usize) {
        match self.steps {
            Some(s) => (s, s.div_ceil(batches_per_epoch.max(1))),
            None => {
                let e = self.epochs.unwrap_or(1);
                (e * batches_per_epoch, e)
            }
        }
    }

    /// The learning-rate schedule of a run of `total_epochs` (fractional where `--steps`
    /// ends inside an epoch: cosine decays over the run's length, whichever flag set it).
    pub fn schedule(&self, total_epochs: f64) -> nn::optim::LrSchedule {
        use nn::optim::LrSchedule;
        let base = match self.schedule {
            Schedule::Step => LrSchedule::Step {
                every: self.milestones[0],
                gamma: self.gamma,
            },
            Schedule::Multistep => LrSchedule::MultiStep {
                milestones: self.milestones.clone(),
                gamma: self.gamma,
            },
            Schedule::Cosine => LrSchedule::Cosine {
                total: total_epochs,
                min_lr: 0.0,
            },
            Schedule::Constant => LrSchedule::Constant,
        };
        if self.warmup_epochs > 0.0 {
            LrSchedule::Warmup {
                epochs: self.warmup_epochs,
                start_factor: 0.1,
                after: Box::new(base),
            }
        } else {
            base
        }
    }

    /// The configuration of one worker of a job of `world` ranks (WORLD_SIZE): `workers`
    /// becomes the job's size. A node of a multi-node job leaves `--workers` at its default
    /// of 1 (one process here) or gives the job's size; any other value is refused, since
    /// it is either a mistake or a request to launch local workers inside a job.
    pub fn for_job(&self, world: usize) -> Result<Config> {
        if self.workers != 1 && self.workers != world {
            bail!(
                "--workers {} disagrees with WORLD_SIZE={world}: inside a job (RANK and WORLD_SIZE set) this process is one worker; leave --workers out or give the job's size",
                self.workers
            );
        }
        Ok(Config {
            workers: world,
            ..self.clone()
        })
    }

    /// Writes `config.toml`, what `--resume` and `--config` read back. `overwrite` is
    /// recorded as false: permission to replace a run is given for one command, not
    /// passed on to every run started from this file.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let recorded = Config {
            overwrite: false,
            ..self.clone()
        };
        let text = toml::to_string_pretty(&recorded).context("serialising the configuration")?;
        crate::metrics::write_atomic(&dir.join("config.toml"), text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_of_a_job_takes_the_jobs_size() {
        let node = Config::default(); // --workers left out: 1
        assert_eq!(node.for_job(4).unwrap().workers, 4);
        let launched = Config {
            workers: 4,
            ..Config::default()
        };
        assert_eq!(launched.for_job(4).unwrap().workers, 4);
        let e = launched.for_job(2).unwrap_err().to_string();
        assert!(e.contains("--workers 4 disagrees with WORLD_SIZE=2"), "{e}");
        // The step's samples are checked against the job's size: 2 nodes × batch 32 need
        // 64 synthetic samples even though each node says --workers 1.
        let small = Config {
            dataset: "synthetic".into(),
            model: "lenet5".into(),
            synthetic_samples: 40,
            ..Config::default()
        };
        small.validate().unwrap();
        let e = small
            .for_job(2)
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("less than one step's 64 samples"), "{e}");
    }

    #[test]
    fn flags_that_would_be_ignored_are_errors() {
        let multistep = Config {
            schedule: Schedule::Multistep,
            dataset: "synthetic".into(),
            ..Config::default()
        };
        let e = multistep.validate().unwrap_err().to_string();
        assert!(e.contains("multistep needs --milestones"), "{e}");
        // Milestones or a gamma under a schedule that reads neither, Adam's options under
        // SGD: each used to train as if it were not given.
        let synthetic = || Config {
            dataset: "synthetic".into(),
            ..Config::default()
        };
        for (c, want) in [
            (
                Config {
                    milestones: vec![30.0, 60.0],
                    ..synthetic()
                },
                "--milestones is for --schedule step or multistep; this run's schedule is constant",
            ),
            (
                Config {
                    schedule: Schedule::Cosine,
                    gamma: 0.5,
                    ..synthetic()
                },
                "--gamma is for --schedule step or multistep; this run's schedule is cosine",
            ),
            (
                Config {
                    schedule: Schedule::Step,
                    milestones: vec![30.0, 60.0],
                    ..synthetic()
                },
                "--schedule step takes one --milestones PERIOD",
            ),
            (
                Config {
                    adam_eps: 1e-6,
                    ..synthetic()
                },
                "--adam-eps is for --optimizer adam",
            ),
        ] {
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        Config {
            schedule: Schedule::Multistep,
            milestones: vec![30.0, 60.0],
            gamma: 0.2,
            ..synthetic()
        }
        .validate()
        .unwrap();
        let e = Config {
            seed: u64::MAX,
            ..synthetic()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("--seed 18446744073709551615 is above"), "{e}");
        // An evaluation that would fail only after the first epoch fails now.
        let few = Config {
            dataset: "synthetic".into(),
            workers: 4,
            eval_samples: Some(3),
            ..Config::default()
        };
        let e = few.validate().unwrap_err().to_string();
        assert!(
            e.contains("--eval-samples 3 is too few for 4 workers"),
            "{e}"
        );
        // A language model's test text is cut into 10 streams of at least 2 tokens,
        // however many workers share them.
        let lm = |n: usize, workers: usize| Config {
            model: "lstm_lm".into(),
            dataset: "synthetic".into(),
            workers,
            eval_samples: Some(n),
            ..Config::default()
        };
        let e = lm(19, 1).validate().unwrap_err().to_string();
        assert!(e.contains("--eval-samples 19 is too few"), "{e}");
        lm(20, 16).validate().unwrap();
        let char_dropout = Config {
            model: "char_lstm".into(),
            dataset: "kjv".into(),
            dropout: Some(0.5),
            ..Config::default()
        };
        let e = format!("{:#}", char_dropout.validate().unwrap_err());
        assert!(e.contains("--dropout: --model char_lstm is fixed"), "{e}");
    }

    /// Values no run can mean are refused before a worker starts (each used to run).
    #[test]
    fn nonsense_values_are_errors() {
        let synthetic = || Config {
            dataset: "synthetic".into(),
            ..Config::default()
        };
        assert!(synthetic().validate().is_ok());
        let multistep = |m: Vec<f64>| Config {
            schedule: Schedule::Multistep,
            milestones: m,
            ..synthetic()
        };
        for (c, want) in [
            (
                Config {
                    workers: comm::MAX_WORLD + 1,
                    batch_size: 1,
                    synthetic_samples: comm::MAX_WORLD + 1,
                    ..synthetic()
                },
                "ranks a job supports",
            ),
            (
                Config {
                    log_every: 0,
                    ..synthetic()
                },
                "--log-every must be at least 1",
            ),
            (
                Config {
                    synthetic_samples: MAX_SYNTHETIC_SAMPLES + 1,
                    ..synthetic()
                },
                "more than a generated set may have",
            ),
            (
                Config {
                    eval_samples: Some(MAX_SYNTHETIC_SAMPLES + 1),
                    ..synthetic()
                },
                "more than a generated set may have",
            ),
            (
                Config {
                    weight_decay: -1.0,
                    ..synthetic()
                },
                "--weight-decay must be",
            ),
            (
                Config {
                    clip: -1.0,
                    ..synthetic()
                },
                "--clip must be",
            ),
            (
                Config {
                    warmup_epochs: f64::NAN,
                    ..synthetic()
                },
                "--warmup-epochs must be",
            ),
            (
                Config {
                    gamma: 0.0,
                    ..multistep(vec![1.0])
                },
                "--gamma must be positive",
            ),
            (multistep(vec![3.0, 1.0]), "positive and increasing"),
            (multistep(vec![-1.0, 2.0]), "positive and increasing"),
            (
                Config {
                    model: "lenet5".into(),
                    bptt: 10,
                    ..synthetic()
                },
                "--bptt is for the language models",
            ),
        ] {
            let e = format!("{:#}", c.validate().unwrap_err());
            assert!(e.contains(want), "want {want:?}: {e}");
        }
        assert!(multistep(vec![1.0, 2.5]).validate().is_ok());
    }

    /// `--help` states the defaults a run takes when a flag is left out, as
    /// `Config::default` has them (a changed default must change its help too).
    #[test]
    fn help_states_the_defaults() {
        use clap::CommandFactory;
        let d = Config::default();
        let help = Args::command().render_long_help().to_string();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        for want in [
            format!("(default {}", d.model),
            format!("(default {}", d.dataset),
            format!("(default {}", d.method),
            format!("(default {})", d.workers),
            format!("(default {})", d.batch_size),
            format!("(default {};", d.lr),
            format!("(default {})", flag_value(&d.schedule)),
            format!("(default {})", d.gamma),
            format!("(default {:e})", d.weight_decay),
            format!("(default {})", d.seed),
            format!("(default {})", d.device),
            format!("(default {})", flag_value(&d.backend)),
            format!("(default {})", d.log_every),
            format!("default {})", d.synthetic_samples),
            format!("(default {})", d.bptt),
        ] {
            assert!(help.contains(&want), "--help lacks {want:?}");
        }
    }

    /// Without `--lr` or an `lr` key in the `--config` file, a model whose recipe trains
    /// below 0.1 gets its recipe's rate; a rate given either way is kept, 0.1 included.
    #[test]
    fn a_rate_left_out_is_the_models_usual_one() {
        use clap::Parser;
        let lr = |argv: &[&str]| {
            let argv = ["train"].iter().chain(argv).copied();
            Config::resolve(&Args::try_parse_from(argv).unwrap())
                .unwrap()
                .lr
        };
        assert_eq!(lr(&[]), Config::default().lr);
        assert_eq!(lr(&["--model", "resnet56"]), 0.1);
        assert_eq!(lr(&["--model", "lenet5"]), 0.01);
        assert_eq!(lr(&["--model", "deepspeech"]), 3e-4);
        assert_eq!(lr(&["--model", "lenet5", "--lr", "0.1"]), 0.1);
        let dir = std::env::temp_dir().join(format!("gradex-usual-lr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (with, without) = (dir.join("with.toml"), dir.join("without.toml"));
        std::fs::write(&with, "model = \"alexnet\"\nlr = 0.1\n").unwrap();
        std::fs::write(&without, "model = \"alexnet\"\n").unwrap();
        let (with, without) = (with.to_str().unwrap(), without.to_str().unwrap());
        assert_eq!(lr(&["--config", with]), 0.1);
        assert_eq!(lr(&["--config", without]), 0.01);
        assert_eq!(lr(&["--config", without, "--lr", "0.02"]), 0.02);
        // The model named by the flag, over the file's.
        assert_eq!(lr(&["--config", with, "--model", "lenet5"]), 0.1);
        assert_eq!(lr(&["--config", without, "--model", "resnet20"]), 0.1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `--lr -0.1` is a negative rate (refused as one), not an unknown flag `-0`.
    #[test]
    fn negative_numbers_are_values() {
        use clap::Parser;
        let a = Args::try_parse_from(["train", "--lr", "-0.1"]).unwrap();
        assert_eq!(a.lr, Some(-0.1));
    }

    #[test]
    fn cosine_decays_over_the_steps_of_the_run() {
        let c = Config {
            schedule: Schedule::Cosine,
            steps: Some(5000),
            ..Config::default()
        };
        // 1,875 batches an epoch: the run is 2.67 epochs, and at epoch 2 the rate is
        // still up (it used to reach 0 after one epoch when --epochs was not given).
        let (total, _) = c.plan(1875);
        let s = c.schedule(total as f64 / 1875.0);
        let at = |e: f64| s.lr(1.0, e);
        assert!(at(2.0) > 0.05, "{}", at(2.0));
        assert!(at(1.0) > at(2.0) && at(2.0) > at(2.6));
        assert!(at(5000.0 / 1875.0).abs() < 1e-12);
    }

    #[test]
    fn pin_cores_reads_words_and_booleans() {
        let read = |text: &str| toml::from_str::<Config>(text).map(|c| c.pin_cores);
        assert_eq!(read("pin_cores = \"auto\"").unwrap(), PinCores::Auto);
        assert_eq!(read("pin_cores = \"true\"").unwrap(), PinCores::True);
        assert_eq!(read("pin_cores = false").unwrap(), PinCores::False);
        assert_eq!(read("pin_cores = true").unwrap(), PinCores::True);
        assert_eq!(read("").unwrap(), PinCores::Auto);
        for bad in ["pin_cores = \"yes\"", "pin_cores = 1"] {
            let e = read(bad).unwrap_err().to_string();
            assert!(e.contains("`auto`, `true` or `false`"), "{bad}: {e}");
        }
        // What a run directory's config.toml holds reads back as the same value.
        for p in [PinCores::Auto, PinCores::True, PinCores::False] {
            let c = Config {
                pin_cores: p,
                ..Config::default()
            };
            let text = toml::to_string_pretty(&c).unwrap();
            assert_eq!(read(&text).unwrap(), p, "{text}");
        }
    }
}
