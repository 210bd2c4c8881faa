//! [`Config::validate`]: everything that can be checked before a worker starts, one
//! function per concern (the run's sizes, the optimizer, the schedule, the evaluation and
//! synthetic data, the method and how it is exchanged, the device, the model and its
//! data), so that a wrong combination is one error from the launcher, not one from every
//! worker.

use super::{check_seed, MAX_SYNTHETIC_SAMPLES};
use super::{flag_value, Backend, Config, DeviceChoice, OptimizerChoice, Schedule};
use anyhow::{bail, Result};

impl Config {
    /// Everything that can be checked before a worker starts.
    pub fn validate(&self) -> Result<()> {
        self.check_sizes()?;
        self.check_optimizer()?;
        self.check_schedule()?;
        self.check_evaluation_and_data()?;
        let (spec, method) = self.check_method()?;
        self.check_exchange(&spec, method.as_ref())?;
        self.check_device()?;
        crate::task::check(self)
    }

    /// Workers, batch, steps and epochs, the seed, the log interval.
    fn check_sizes(&self) -> Result<()> {
        if self.workers == 0 || self.batch_size == 0 {
            bail!("--workers and --batch-size must be at least 1");
        }
        check_seed(self.seed)?;
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
        Ok(())
    }

    /// The rate, momentum, Adam's options and the regularisers.
    fn check_optimizer(&self) -> Result<()> {
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
        for (flag, v) in [
            ("--weight-decay", self.weight_decay),
            ("--clip", self.clip),
            ("--warmup-epochs", self.warmup_epochs),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                bail!("{flag} must be a finite value ≥ 0 (got {v})");
            }
        }
        // Flags the optimizer would not read are errors (compared with their defaults, as
        // the schedule's in `check_schedule`).
        let d = Config::default();
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
        Ok(())
    }

    /// The schedule's factor and milestones, and no schedule flag it would not read.
    fn check_schedule(&self) -> Result<()> {
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
        if self.schedule == Schedule::Step && self.milestones.first().is_none_or(|&p| p <= 0.0) {
            bail!("--schedule step needs --milestones PERIOD (epochs, > 0)");
        }
        if self.schedule == Schedule::Multistep && self.milestones.is_empty() {
            bail!("--schedule multistep needs --milestones E1,E2,... (epochs where the rate is multiplied by --gamma)");
        }
        if self.schedule == Schedule::Step && self.milestones.len() > 1 {
            bail!("--schedule step takes one --milestones PERIOD (the rate is multiplied by --gamma every PERIOD epochs); E1,E2,... is --schedule multistep");
        }
        // Flags a schedule would not read are errors, not silently constant rates:
        // `--milestones 30,60` without `--schedule multistep` trained at one rate. (gamma
        // is compared with its default, the only way a resolved configuration can tell;
        // setting a default explicitly is harmless.)
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
        Ok(())
    }

    /// The test-set limit against the workers and the model, and a synthetic set's size.
    fn check_evaluation_and_data(&self) -> Result<()> {
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
        Ok(())
    }

    /// The method and its options, built once here so that a bad option value
    /// (density=2) is an error before any worker starts; its fit with the optimizer and
    /// `--clip`.
    fn check_method(&self) -> Result<(compress::MethodSpec, Box<dyn compress::Method>)> {
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
        if self.clip > 0.0 && spec.name == "dgc" {
            bail!("--clip with --method dgc: DGC clips locally before compression; use --method-opt clip={}", self.clip);
        }
        Ok((spec, method))
    }

    /// The hierarchical exchange and the backend against the method.
    fn check_exchange(
        &self,
        spec: &compress::MethodSpec,
        method: &dyn compress::Method,
    ) -> Result<()> {
        if self.local_world_size > 0 {
            let l = self.local_world_size;
            if !self.workers.is_multiple_of(l) {
                bail!(
                    "--local-world-size {l}: {} workers do not make whole nodes of {l}",
                    self.workers
                );
            }
            if let Some(why) = method.tcp_only() {
                bail!(
                    "--local-world-size: --method {} {:?} does not run over a subgroup: {why}",
                    spec.name,
                    self.method_opts
                );
            }
        }
        if self.backend == Backend::Nccl {
            if self.device != DeviceChoice::Cuda {
                bail!("--backend nccl needs --device cuda (NCCL reduces GPU buffers; got --device {})", self.device);
            }
            if let Some(why) = method.tcp_only() {
                bail!("--backend nccl: --method {} {:?} does not run over NCCL: {why}; use --backend tcp", spec.name, self.method_opts);
            }
        }
        Ok(())
    }

    /// A CUDA device where `--device cuda` asks for one.
    fn check_device(&self) -> Result<()> {
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
        Ok(())
    }
}
