//! The method registry: one entry per method — its name, summary, options with their
//! defaults and meanings (which `--help` prints and `MethodSpec::parse` checks against),
//! and its constructor — and building a method from a [`MethodSpec`] and what the trainer
//! knows: the rank, the world size, the seed and the optimizer's momentum and weight decay
//! (DGC's momentum correction takes over both). Adding a method is its file under
//! `methods/` and one entry here (docs/compress.md, "Adding a method").

use crate::methods::dense::Dense;
use crate::methods::dgc::{Decay, DenseClip, Dgc, DgcConfig};
use crate::methods::dropping::{DroppingConfig, GradientDropping, LocalMode};
use crate::methods::fedavg::FedAvg;
use crate::methods::gtopk::GTopK;
use crate::methods::onebit::OneBit;
use crate::methods::powersgd::{PowerSgd, PowerSgdConfig};
use crate::methods::qsgd::{self, Coding, Qsgd};
use crate::methods::randomk::RandomK;
use crate::methods::sbc::{self, Sbc};
use crate::methods::sign::{Sign, SignKind};
use crate::methods::terngrad::TernGrad;
use crate::methods::threshold::ThresholdV;
use crate::options::{check_density, MethodInfo, MethodSpec, Opts};
use crate::{CompressError, Method, Result};
use tensor::Rng;

/// The job-wide facts a method needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Context {
    pub rank: usize,
    pub world: usize,
    pub seed: u64,
    pub momentum: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
}

impl Context {
    fn rng(&self, salt: u64) -> Rng {
        Rng::for_rank(
            self.seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            self.rank,
        )
    }
}

fn density(o: &mut Opts, name: &str) -> Result<f64> {
    let d = o.f64("density")?.unwrap_or(0.001);
    check_density(name, d)
}

/// Gradient dropping, plain (`topk`) or with the local gradient (`local`).
fn dropping(o: &mut Opts, ctx: &Context, local: bool) -> Result<Box<dyn Method>> {
    let name = if local { "local" } else { "topk" };
    let cfg = DroppingConfig {
        density: density(o, name)?,
        dense_below: o.usize("dense_below")?.unwrap_or(0),
        local: if local {
            Some(LocalMode::parse(
                &o.choice("mode", &["sum", "partial", "error"])?,
            )?)
        } else {
            None
        },
        sync_every: if local {
            o.usize("sync_every")?.unwrap_or(0)
        } else {
            0
        },
        warmup_steps: o.usize("warmup_steps")?.unwrap_or(0),
        warmup_epochs: o.f64("warmup_epochs")?.unwrap_or(0.0),
        warmup_densities: o.f64_list("warmup_densities")?,
    };
    cfg.validate(name)?;
    Ok(Box::new(GradientDropping::new(cfg, ctx.world)))
}

const SPARSE_COMMON: [(&str, &str, &str); 2] = [
    (
        "density",
        "0.001",
        "fraction of each tensor's entries sent per step (1 - drop ratio)",
    ),
    (
        "dense_below",
        "0",
        "tensors with fewer elements are exchanged dense",
    ),
];

/// Paper 001's drop-ratio warm-up, which both gradient-dropping methods take.
const DROP_WARMUP: (&str, &str, &str) = (
    "warmup_steps",
    "0",
    "T of the drop-ratio warm-up R_t = R^max(1, T/t) (0: off)",
);

/// Paper 002's staged density warm-up (DGC's form), which gradient dropping takes too,
/// so that Top-k S-SGD and gTop-k S-SGD can warm up alike.
const STAGED_WARMUP: [(&str, &str, &str); 2] = [
    (
        "warmup_epochs",
        "0",
        "epochs of staged density warm-up, paper 002's (0: off; not with warmup_steps)",
    ),
    (
        "warmup_densities",
        "0.25,0.0725,0.015,0.004",
        "densities of the staged warm-up, evenly spread over warmup_epochs (paper 002's)",
    ),
];

pub const METHODS: &[MethodInfo] = &[
    MethodInfo {
        name: "dense",
        summary: "ring allreduce of the full gradient (the baseline)",
        options: &[(
            "wire",
            "f32",
            "f32, f16 or bf16 (a 16-bit ring allreduce: IEEE half or bfloat16)",
        )],
        build: |o, _| Ok(Box::new(Dense::new(
            match o.choice("wire", &["f32", "f16", "bf16"])?.as_str() {
                "f16" => Some(comm::Wire16::F16),
                "bf16" => Some(comm::Wire16::Bf16),
                _ => None,
            },
        ))),
    },
    MethodInfo {
        name: "topk",
        summary: "gradient dropping (paper 001 Alg. 1): residual, top-k, TopKAllReduce",
        options: &[
            SPARSE_COMMON[0],
            SPARSE_COMMON[1],
            DROP_WARMUP,
            STAGED_WARMUP[0],
            STAGED_WARMUP[1],
        ],
        build: |o, ctx| dropping(o, ctx, false),
    },
    MethodInfo {
        name: "local",
        summary: "gradient dropping combined with the local gradient (paper 001 Alg. 2)",
        options: &[
            SPARSE_COMMON[0],
            SPARSE_COMMON[1],
            (
                "mode",
                "partial",
                "sum, partial or error: how the local gradient is combined",
            ),
            (
                "sync_every",
                "500",
                "average the parameters every N steps (0: never)",
            ),
            DROP_WARMUP,
            STAGED_WARMUP[0],
            STAGED_WARMUP[1],
        ],
        build: |o, ctx| dropping(o, ctx, true),
    },
    MethodInfo {
        name: "dgc",
        summary: "Deep Gradient Compression (paper 000 Alg. 3/4), each technique switchable",
        options: &[
            SPARSE_COMMON[0],
            (
                "dense_below",
                "1000",
                "tensors with fewer elements (biases, batch norm) go dense",
            ),
            (
                "dense_1d",
                "false",
                "every 1-D tensor (bias, batch norm) goes dense, whatever its size (the paper's Table 3 sizes)",
            ),
            (
                "momentum_correction",
                "true",
                "accumulate the velocity, not the gradient (Eq. 7)",
            ),
            (
                "masking",
                "true",
                "momentum factor masking (needs momentum_correction)",
            ),
            (
                "clip",
                "0",
                "clipping threshold on the averaged gradient; each rank clips its mean gradient per tensor at clip·N^1/2, the paper's N^-1/2 on its 1/N share (0: off)",
            ),
            (
                "clip_dense",
                "off",
                "with clip > 0, how the tensors sent dense are clipped: off, averaged (after the allreduce, at clip, as the reference code's memory would with a clipping function set) or local (each rank at clip·N^1/2 before it); both cost dgc_table4's LM row perplexity (226 and 154 against 135)",
            ),
            (
                "decay",
                "dense",
                "where weight decay enters under momentum correction: dense (the reference code's DGCSGD: every step, a momentum buffer of its own, outside the compression) or compressed (added to the gradient before momentum correction, sparsified with it)",
            ),
            (
                "warmup_epochs",
                "4",
                "epochs of exponential sparsity warm-up (0: off)",
            ),
            (
                "warmup_densities",
                "0.25,0.0625,0.015625,0.004",
                "densities of the warm-up stages, evenly spread over warmup_epochs",
            ),
            (
                "sampling",
                "true",
                "sampled threshold (hierarchical selection); false: exact top-k",
            ),
            (
                "sample_fraction",
                "0.01",
                "fraction of entries sampled for the threshold",
            ),
        ],
        build: |o, ctx| {
            let cfg = DgcConfig {
                density: density(o, "dgc")?,
                dense_below: o.usize("dense_below")?.unwrap_or(0),
                dense_1d: o.bool("dense_1d")?,
                momentum: ctx.momentum,
                nesterov: ctx.nesterov,
                weight_decay: ctx.weight_decay,
                momentum_correction: o.bool("momentum_correction")?,
                masking: o.bool("masking")?,
                clip: o.f64("clip")?.unwrap_or(0.0),
                clip_dense: DenseClip::parse(&o.choice("clip_dense", &DenseClip::NAMES)?)?,
                decay: Decay::parse(&o.choice("decay", &Decay::NAMES)?)?,
                warmup_epochs: o.f64("warmup_epochs")?.unwrap_or(0.0),
                warmup_densities: o.f64_list("warmup_densities")?,
                sampling: o.bool("sampling")?,
                sample_fraction: o.f64("sample_fraction")?.unwrap_or(0.01),
            };
            Ok(Box::new(Dgc::new(cfg, ctx.world, ctx.rng(1))?))
},
    },
    MethodInfo {
        name: "gtopk",
        summary: "gTop-k S-SGD (paper 002 Alg. 4): local top-k, gTopKAllReduce, put-back",
        options: &[
            SPARSE_COMMON[0],
            SPARSE_COMMON[1],
            (
                "warmup_epochs",
                "0",
                "epochs of density warm-up (0: off; the paper's convergence runs: 4)",
            ),
            (
                "warmup_densities",
                "0.25,0.0725,0.015,0.004",
                "densities of the warm-up stages, evenly spread over warmup_epochs (the paper's)",
            ),
        ],
        build: |o, ctx| Ok(Box::new(
            GTopK::new(
                density(o, "gtopk")?,
                o.usize("dense_below")?.unwrap_or(0),
                ctx.world,
            )?
            .with_warmup(
                o.f64("warmup_epochs")?.unwrap_or(0.0),
                o.f64_list("warmup_densities")?,
            )?,
        )),
    },
    MethodInfo {
        name: "sbc",
        summary: "Sparse Binary Compression (paper 003): delay, binarization, Golomb positions",
        options: &[
            (
                "preset",
                "1",
                "1: no delay, p = 0.1 %; 2: 10 steps, 1 %; 3: 100 steps, 1 %",
            ),
            (
                "delay",
                "",
                "local steps between exchanges (overrides the preset)",
            ),
            (
                "density",
                "",
                "fraction p kept per side (overrides the preset)",
            ),
            (
                "masking",
                "true",
                "momentum masking: zero the optimizer's momentum where an exchange sent (§VII-A)",
            ),
        ],
        build: |o, ctx| {
            let p = o.usize("preset")?.unwrap_or(1);
            let (delay, dens) = sbc::preset(p).ok_or_else(|| {
                CompressError::Config(format!("sbc preset {p}: expected 1, 2 or 3"))
            })?;
            let delay = o.usize("delay")?.unwrap_or(delay);
            let dens = o.f64("density")?.unwrap_or(dens);
            Ok(Box::new(Sbc::new(delay, dens, ctx.world)?.with_masking(o.bool("masking")?)))
},
    },
    MethodInfo {
        name: "qsgd",
        summary: "QSGD (paper 004): stochastic quantization per bucket, Elias coding",
        options: &[
            (
                "preset",
                "4bit",
                "2bit (d=128), 4bit (d=512), 8bit (d=512) or 8bit-8192",
            ),
            (
                "bits",
                "",
                "bits per level: s = 2^bits - 1 levels (overrides the preset)",
            ),
            ("bucket", "", "bucket size d (overrides the preset)"),
            (
                "coding",
                "elias",
                "elias (recursive code of gaps, signs, levels) or fixed",
            ),
            (
                "norm",
                "l2",
                "bucket scale: l2 (Lemma 3.1's analysed form) or max (the paper's experiments, §4)",
            ),
            (
                "min_size",
                "10000",
                "tensors with fewer elements are sent unquantized",
            ),
        ],
        build: |o, ctx| {
            let name = o.raw("preset").unwrap_or_default();
            let (bits, bucket) = qsgd::preset(&name).ok_or_else(|| {
                CompressError::Config(format!(
                    "qsgd preset '{name}': expected 2bit, 4bit, 8bit or 8bit-8192"
                ))
            })?;
            let bits = match o.usize("bits")? {
                Some(b) => u32::try_from(b).map_err(|_| {
                    CompressError::Config(format!("qsgd option bits={b}: must be in 1..=16"))
                })?,
                None => bits,
            };
            let bucket = o.usize("bucket")?.unwrap_or(bucket);
            let coding = match o.choice("coding", &["elias", "fixed"])?.as_str() {
                "fixed" => Coding::Fixed,
                _ => Coding::Elias,
            };
            let scale = match o.choice("norm", &["l2", "max"])?.as_str() {
                "max" => qsgd::Scale::Max,
                _ => qsgd::Scale::L2,
            };
            let min_size = o.usize("min_size")?.unwrap_or(10_000);
            Ok(Box::new(
                Qsgd::new(bits, bucket, coding, min_size, ctx.seed, ctx.rank)?.with_scale(scale),
            ))
        },
    },
    MethodInfo {
        name: "terngrad",
        summary: "TernGrad: stochastic ternary {-1, 0, 1} times the tensor's max magnitude",
        options: &[(
            "float_last",
            "0",
            "the last N parameter tensors go as f32 (Wen et al.'s AlexNet: its last layer, 2)",
        )],
        build: |o, ctx| Ok(Box::new(TernGrad::new(
            ctx.seed,
            ctx.rank,
            o.usize("float_last")?.unwrap_or(0),
        ))),
    },
    MethodInfo {
        name: "onebit",
        summary: "1-bit SGD with error feedback: sign per value, two means per bucket",
        options: &[(
            "bucket",
            "0",
            "values sharing one pair of means (0: the whole tensor)",
        )],
        build: |o, _| Ok(Box::new(OneBit::new(o.usize("bucket")?.unwrap_or(0)))),
    },
    MethodInfo {
        name: "powersgd",
        summary: "PowerSGD (Vogels et al.) as PyTorch's powerSGD_hook: rank-r P, Q by one power iteration, error feedback, warm start",
        options: &[
            ("rank", "1", "the approximation's rank r"),
            (
                "start_iter",
                "1000",
                "steps allreduced dense before compression starts (PyTorch's default)",
            ),
            (
                "min_compression_rate",
                "2",
                "matrices compressing less (n*m / ((n+m)*r)) go dense",
            ),
            ("error_feedback", "true", "keep what the approximation left out"),
            ("warm_start", "true", "start each step's Q from the last one"),
            (
                "batched",
                "false",
                "every tensor as one zero-padded square matrix (batched_powerSGD_hook)",
            ),
        ],
        build: |o, ctx| Ok(Box::new(PowerSgd::new(PowerSgdConfig {
            rank: o.usize("rank")?.unwrap_or(1),
            start_iter: o.usize("start_iter")?.unwrap_or(1000) as u64,
            min_compression_rate: o.f64("min_compression_rate")?.unwrap_or(2.0),
            error_feedback: o.bool("error_feedback")?,
            warm_start: o.bool("warm_start")?,
            batched: o.bool("batched")?,
            seed: ctx.seed,
        })?)),
    },
    MethodInfo {
        name: "signsgd",
        summary: "signSGD with majority vote (Bernstein et al.): one bit a value, the update the sign of the ranks' summed signs (±1: the learning rate is the step)",
        options: &[],
        build: |_, _| Ok(Box::new(Sign::new("signsgd", SignKind::Vote { momentum: 0.0 })?)),
    },
    MethodInfo {
        name: "signum",
        summary: "signum: signSGD on the rank's momentum m = beta*m + (1-beta)*g, majority vote",
        options: &[("momentum", "0.9", "beta of the method's own momentum, in [0, 1)")],
        build: |o, _| Ok(Box::new(Sign::new(
            "signum",
            SignKind::Vote {
                momentum: o.f64("momentum")?.unwrap_or(0.9),
            },
        )?)),
    },
    MethodInfo {
        name: "efsignsgd",
        summary: "EF-signSGD (Karimireddy et al.): (|p|_1/n)*sign(p) of p = g + e, error feedback, averaged",
        options: &[],
        build: |_, _| Ok(Box::new(Sign::new("efsignsgd", SignKind::ErrorFeedback)?)),
    },
    MethodInfo {
        name: "randomk",
        summary: "random-k: the same k random positions on every rank (from the seed), their residual values allreduced",
        options: &[(
            "density",
            "0.01",
            "fraction of each tensor's entries sent per step",
        )],
        build: |o, ctx| Ok(Box::new(RandomK::new(o.f64("density")?.unwrap_or(0.01), ctx.seed)?)),
    },
    MethodInfo {
        name: "thresholdv",
        summary: "threshold-v: every residual entry with |e| >= v sent as a pair, TopKAllReduce",
        options: &[("threshold", "0.01", "v, the magnitude an entry must reach")],
        build: |o, _| Ok(Box::new(ThresholdV::new(o.f64("threshold")?.unwrap_or(0.01))?)),
    },
    MethodInfo {
        name: "fedavg",
        summary: "Federated Averaging: local steps, then dense parameter averaging",
        options: &[("delay", "10", "local steps between averagings")],
        build: |o, _| Ok(Box::new(FedAvg::new(o.usize("delay")?.unwrap_or(10))?)),
    },
];

/// The method `spec` names, built for `ctx` (its entry's constructor).
pub fn build(spec: &MethodSpec, ctx: &Context) -> Result<Box<dyn Method>> {
    if ctx.world == 0 || ctx.rank >= ctx.world {
        return Err(CompressError::Config(format!(
            "rank {} in a world of {}",
            ctx.rank, ctx.world
        )));
    }
    let info = crate::options::method_info(&spec.name)?;
    (info.build)(&mut spec.reader(), ctx)
}
