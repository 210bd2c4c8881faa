//! `train`'s flags: each is also a key of the `--config` file (`Config`), given here as
//! an `Option` so that [`Config::resolve`](super::Config::resolve) can tell a flag left
//! out from one given.

use super::{Backend, DeviceChoice, Exchange, OptimizerChoice, PinCores, Schedule};
use clap::Parser;
use std::path::PathBuf;

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

const METHOD_HELP: &str = "Methods and their options (--method NAME --method-opt key=value):
(run with --help to see them all; the table is compress::help_text)";
