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

pub use args::Args;
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
    /// --device cuda and a method on tensors (every method but dense with a 16-bit
    /// wire): each gradient exchanged on the GPU, one GPU per worker, as NCCL requires.
    Nccl,
}

/// How gradients reach the method: as tensors on their device, or copied to host slices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
#[value(rename_all = "lowercase")]
pub enum Exchange {
    /// Tensors with --backend nccl or --local-world-size; host slices otherwise (the
    /// faster path over TCP where both were measured).
    Auto,
    /// Host slices (every method; the only way with --bucket-elems).
    Slices,
    /// Tensors on the training device (every method but dense with a 16-bit wire; the
    /// same results as slices, bit for bit, on the CPU).
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

/// The most samples (tokens, for a language model) `--dataset synthetic` generates: 2³⁰,
/// whose shuffled order is 8 GiB.
pub const MAX_SYNTHETIC_SAMPLES: usize = 1 << 30;

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
