//! A run's configuration: every command-line flag is also a key of the `--config` TOML
//! file (flags win over the file, the file over the defaults). `validate` rejects wrong
//! combinations before any worker starts, and the resolved configuration is written into
//! the run directory.

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

mod args;
#[cfg(test)]
mod tests;
mod validate;

pub use args::{given_on_command_line, Args};
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
    /// --device cuda, every method but dense with a 16-bit wire: each gradient exchanged
    /// on the GPU, one GPU per worker, as NCCL requires.
    Nccl,
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

/// A run's configuration: `train`'s flags (less `--config` and `--resume`, which are
/// [`Args`]'), every one also a key of the `--config` file and of the run's
/// `config.toml`. The flags' defaults are [`Config::default`]'s.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Model; the list is nn's model registry (`train --help`).
    #[arg(long, default_value_t = Config::default().model)]
    pub model: String,
    /// Dataset. Images: fashion-mnist, mnist (--data-dir), cifar10, imagenet (--data-dir with
    /// train/<class>/ and val/<class>/ image folders, at the model's resolution; top-5
    /// accuracy is recorded too). Language: kjv (default --data-dir data/kjv,
    /// from `datasets prepare kjv`), ptb. Speech: speech (default --data-dir data/speech,
    /// from `datasets prepare speech`), an4 (same manifest layout). Any model: synthetic
    /// (learnable data of the model's input shape).
    #[arg(long, default_value_t = Config::default().dataset)]
    pub dataset: String,
    /// Directory of the dataset files (fashion-mnist default: /usr/share/datasets/fashion-mnist).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Gradient-exchange method (dgc's density warms up over its first 4 epochs; see the
    /// list below).
    #[arg(long, default_value_t = Config::default().method)]
    pub method: String,
    /// A method option as key=value (repeatable), e.g. --method-opt density=0.001.
    #[arg(long = "method-opt")]
    pub method_opts: Vec<String>,
    /// Worker processes to start on this machine.
    #[arg(long, default_value_t = Config::default().workers)]
    pub workers: usize,
    /// Batch size per worker.
    #[arg(long, default_value_t = Config::default().batch_size)]
    pub batch_size: usize,
    /// Epochs to train (1 when neither --epochs nor --steps is given). Given alone on the
    /// command line, it replaces a configuration file's `steps` (as when resuming a
    /// --steps run).
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Stop after this many steps (overrides --epochs).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Base learning rate (default 0.1; the model's recipe's rate where 0.1 diverges, from
    /// nn's model registry: `train --help` lists them).
    #[arg(long, default_value_t = Config::default().lr, hide_default_value = true)]
    pub lr: f64,
    /// Learning-rate schedule.
    #[arg(long, value_enum, default_value_t = Config::default().schedule)]
    pub schedule: Schedule,
    /// Epochs at which multistep multiplies the rate by --gamma (comma-separated); for
    /// step, the first value is the period.
    #[arg(long, value_delimiter = ',')]
    pub milestones: Vec<f64>,
    /// Factor of the step and multistep schedules.
    #[arg(long, default_value_t = Config::default().gamma)]
    pub gamma: f64,
    /// Linear learning-rate warm-up over this many epochs (from 0.1 of the base rate).
    #[arg(long, default_value_t = Config::default().warmup_epochs)]
    pub warmup_epochs: f64,
    /// Optimizer. adam needs a method that leaves momentum to the optimizer
    /// (not dgc's momentum correction).
    #[arg(long, value_enum, default_value_t = Config::default().optimizer)]
    pub optimizer: OptimizerChoice,
    /// SGD momentum (DGC's momentum correction uses it instead of the optimizer). With
    /// --optimizer adam, Adam's β1.
    #[arg(long, default_value_t = Config::default().momentum)]
    pub momentum: f64,
    /// Nesterov momentum (SGD only).
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false)]
    pub nesterov: bool,
    /// Adam's β2.
    #[arg(long, default_value_t = Config::default().adam_beta2)]
    pub adam_beta2: f64,
    /// Adam's ε.
    #[arg(long, default_value_t = Config::default().adam_eps)]
    pub adam_eps: f64,
    /// With --workers N > 1, pinning gives each worker its own share
    /// of the C CPUs this process may use (its CPU set, capped by a container's CPU
    /// quota; C/N each; with N > C, one CPU per N/C workers),
    /// and its thread pool as many threads (unless RAYON_NUM_THREADS says otherwise). auto
    /// pins when N <= C. With N > C, true halves the idle wait for peers but costs some
    /// throughput (RESULTS.md). A multi-node worker honours GRADEX_CPUS=0-3,8,...
    #[arg(long, value_enum, default_value_t = Config::default().pin_cores)]
    pub pin_cores: PinCores,
    /// L2 weight decay.
    #[arg(long, default_value_t = Config::default().weight_decay)]
    pub weight_decay: f64,
    /// Clip the global L2 norm of the exchanged gradient to this (0: off). For dgc use
    /// --method-opt clip=... (DGC clips locally, before compression).
    #[arg(long, default_value_t = Config::default().clip)]
    pub clip: f64,
    /// Seed of initialisation, data order and the methods' random draws.
    #[arg(long, default_value_t = Config::default().seed)]
    pub seed: u64,
    /// Where tensors live.
    #[arg(long, value_enum, default_value_t = Config::default().device)]
    pub device: DeviceChoice,
    /// Collective backend.
    #[arg(long, value_enum, default_value_t = Config::default().backend)]
    pub backend: Backend,
    /// `exchange = "auto" | "slices" | "tensors"` in the config of a run written when
    /// the trainer had two exchange paths: read so that such a run resumes, and ignored
    /// (the paths gave the same results bit for bit). `--exchange` on the command line
    /// is an error that says so (`resolve`).
    #[arg(long = "exchange", hide = true)]
    #[serde(default, skip_serializing, rename = "exchange")]
    pub legacy_exchange: Option<String>,
    /// Run directory: config, metrics.jsonl, summary.json, checkpoints. One that holds an
    /// earlier run is refused unless --resume or --overwrite.
    #[arg(long, default_value = "runs/latest")]
    pub out: PathBuf,
    /// Let a fresh run replace an earlier run in --out (a finished one's summary.json, or
    /// checkpoints); without it such a directory is refused, nothing touched. Not recorded
    /// in the run's config.toml.
    #[arg(long, conflicts_with = "resume")]
    pub overwrite: bool,
    /// Checkpoint every N epochs and where the run ends (1: every epoch; 0: never,
    /// which saves disk and time but leaves nothing to --resume from). Each rank keeps
    /// two generations of its parameters, optimizer state and the method's residuals:
    /// for AlexNet with DGC 2 × 732 MB a rank.
    #[arg(long, default_value_t = Config::default().checkpoint_every)]
    pub checkpoint_every: usize,
    /// Log a metrics line every N steps.
    #[arg(long, default_value_t = Config::default().log_every)]
    pub log_every: usize,
    /// Training samples of the synthetic dataset (images, utterances; tokens for language
    /// models).
    #[arg(long, default_value_t = Config::default().synthetic_samples)]
    pub synthetic_samples: usize,
    /// Evaluate on at most this many test samples, spread evenly over the test set (for
    /// language models its first this many tokens; default: all).
    #[arg(long)]
    pub eval_samples: Option<usize>,
    /// Also evaluate every N steps, not only at the end of each epoch (a finer learning
    /// curve, and the time to reach a metric; no checkpoint is written there).
    #[arg(long, default_value_t = Config::default().eval_every)]
    pub eval_every: usize,
    /// Hidden units of the language or speech model's recurrent layers (default: the paper's).
    #[arg(long)]
    pub hidden: Option<usize>,
    /// Recurrent layers of a speech model (default: the paper's).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Channels of a speech model's two convolutions (default: the paper's 32). The
    /// second convolution dominates a narrow model's arithmetic, so a reduced-width speech
    /// model on a CPU narrows it too.
    #[arg(long)]
    pub conv_channels: Option<usize>,
    /// Dropout of the language model (default: 0.65 at 1500 units, 0.5 at 650, else none).
    #[arg(long)]
    pub dropout: Option<f64>,
    /// Truncated-BPTT window of the language models, in tokens.
    #[arg(long, default_value_t = Config::default().bptt)]
    pub bptt: usize,
    /// Exchange consecutive parameters of fewer than N elements together, in buckets of at
    /// most N elements (0: off). Fewer, larger collectives; the method then compresses each
    /// bucket as one vector (for dgc, N <= dense_below changes nothing but the count).
    #[arg(long, default_value_t = Config::default().bucket_elems)]
    pub bucket_elems: usize,
    /// Hierarchical exchange (torchrun's LOCAL_WORLD_SIZE): ranks come in nodes of N
    /// consecutive ranks; each node averages its gradients densely (its workers share a
    /// fast link: NCCL on GPUs, TCP on CPUs), its first rank runs the method across the
    /// nodes' first ranks only, and sends the result back to its node. Bytes inside and
    /// across nodes are counted apart (summary.json). 0: every rank runs the method (flat).
    /// Every method but dense with a 16-bit wire.
    #[arg(long, default_value_t = Config::default().local_world_size)]
    pub local_world_size: usize,
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
            legacy_exchange: None,
            out: PathBuf::from("runs/latest"),
            log_every: 10,
            synthetic_samples: 4096,
            eval_samples: None,
            eval_every: 0,
            hidden: None,
            layers: None,
            conv_channels: None,
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

/// The most samples (tokens, for a language model) `--dataset synthetic` generates: 2³⁰,
/// whose shuffled order is 8 GiB.
pub const MAX_SYNTHETIC_SAMPLES: usize = 1 << 30;

/// TOML integers are i64: a larger seed could not be written to the run's config.toml
/// (nor overlaid on a `--config` file).
fn check_seed(seed: u64) -> Result<()> {
    if i64::try_from(seed).is_err() {
        bail!(
            "--seed {seed} is above {} (the run's config.toml stores it as a TOML integer)",
            i64::MAX
        );
    }
    Ok(())
}

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

    /// Defaults, then the `--config` file, then the flags given on the command line
    /// (`given`: [`given_on_command_line`]). A rate given by neither the file nor `--lr`
    /// is the model's usual one ([`crate::task::usual_lr`]: 0.01 for LeNet-5 and AlexNet,
    /// 3e-4 for the speech models) where that is below the default 0.1, at which those
    /// diverge (LeNet-5 on Fashion-MNIST: NaN at step 29).
    pub fn resolve(args: &Args, given: &dyn Fn(&str) -> bool) -> Result<Config> {
        let mut lr_given = given("lr");
        let file = match &args.config {
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
        // Before the overlay below, which would fail to write it.
        check_seed(args.run.seed)?;
        if given("legacy_exchange") {
            bail!(
                "--exchange is gone: every device and backend takes one path now (a method's host code over TCP, on the CPU or a GPU, its tensor code over NCCL and in the hierarchical exchange; docs/train.md)"
            );
        }
        // The file's values, with each flag given on the command line written over its
        // key (the keys are the flags' names).
        let mut table = toml::Table::try_from(&file).context("the configuration")?;
        let flags = toml::Table::try_from(&args.run).context("the flags")?;
        for (key, value) in flags {
            if given(&key) {
                table.insert(key, value);
            }
        }
        // `--epochs` on the command line sets the run's length: a `steps` from the file (a
        // resumed `--steps` run's config.toml) would otherwise win in `plan`.
        if given("epochs") && !given("steps") {
            table.remove("steps");
        }
        let mut c: Config = table.try_into().context("the configuration")?;
        if !lr_given {
            if let Some((usual, _)) = crate::task::usual_lr(&c.model) {
                c.lr = usual;
            }
        }
        Ok(c)
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
