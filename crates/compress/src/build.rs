//! Building a method from a [`MethodSpec`] and what the trainer knows: the rank, the
//! world size, the seed and the optimizer's momentum and weight decay (DGC's momentum
//! correction takes over both).

use crate::methods::dense::{self, Dense};
use crate::methods::dgc::{Dgc, DgcConfig};
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
use crate::options::{check_density, MethodSpec};
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

pub fn build(spec: &MethodSpec, ctx: &Context) -> Result<Box<dyn Method>> {
    if ctx.world == 0 || ctx.rank >= ctx.world {
        return Err(CompressError::Config(format!(
            "rank {} in a world of {}",
            ctx.rank, ctx.world
        )));
    }
    let mut o = spec.reader();
    let density = |o: &mut crate::options::Opts, name: &str| -> Result<f64> {
        let d = o.f64("density")?.unwrap_or(0.001);
        check_density(name, d)
    };
    Ok(match spec.name.as_str() {
        "dense" => Box::new(Dense::new(
            match o.choice("wire", &["f32", "f16", "bf16"])?.as_str() {
                "f16" => dense::Wire::F16,
                "bf16" => dense::Wire::Bf16,
                _ => dense::Wire::F32,
            },
        )),
        "topk" | "local" => {
            let local = spec.name == "local";
            let cfg = DroppingConfig {
                density: density(&mut o, &spec.name)?,
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
            };
            Box::new(GradientDropping::new(cfg, ctx.world))
        }
        "dgc" => {
            let cfg = DgcConfig {
                density: density(&mut o, "dgc")?,
                dense_below: o.usize("dense_below")?.unwrap_or(0),
                dense_1d: o.bool("dense_1d")?,
                momentum: ctx.momentum,
                nesterov: ctx.nesterov,
                weight_decay: ctx.weight_decay,
                momentum_correction: o.bool("momentum_correction")?,
                masking: o.bool("masking")?,
                clip: o.f64("clip")?.unwrap_or(0.0),
                clip_dense: o.bool("clip_dense")?,
                warmup_epochs: o.f64("warmup_epochs")?.unwrap_or(0.0),
                warmup_densities: o.f64_list("warmup_densities")?,
                sampling: o.bool("sampling")?,
                sample_fraction: o.f64("sample_fraction")?.unwrap_or(0.01),
            };
            Box::new(Dgc::new(cfg, ctx.world, ctx.rng(1))?)
        }
        "gtopk" => Box::new(
            GTopK::new(
                density(&mut o, "gtopk")?,
                o.usize("dense_below")?.unwrap_or(0),
                ctx.world,
            )?
            .with_warmup(
                o.f64("warmup_epochs")?.unwrap_or(0.0),
                o.f64_list("warmup_densities")?,
            )?,
        ),
        "sbc" => {
            let p = o.usize("preset")?.unwrap_or(1);
            let (delay, dens) = sbc::preset(p).ok_or_else(|| {
                CompressError::Config(format!("sbc preset {p}: expected 1, 2 or 3"))
            })?;
            let delay = o.usize("delay")?.unwrap_or(delay);
            let dens = o.f64("density")?.unwrap_or(dens);
            Box::new(Sbc::new(delay, dens, ctx.world)?.with_masking(o.bool("masking")?))
        }
        "qsgd" => {
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
            Box::new(
                Qsgd::new(bits, bucket, coding, min_size, ctx.seed, ctx.rank)?.with_scale(scale),
            )
        }
        "terngrad" => Box::new(TernGrad::new(
            ctx.seed,
            ctx.rank,
            o.usize("float_last")?.unwrap_or(0),
        )),
        "onebit" => Box::new(OneBit::new(o.usize("bucket")?.unwrap_or(0))),
        "fedavg" => Box::new(FedAvg::new(o.usize("delay")?.unwrap_or(10))?),
        "signsgd" => Box::new(Sign::new("signsgd", SignKind::Vote { momentum: 0.0 })?),
        "signum" => Box::new(Sign::new(
            "signum",
            SignKind::Vote {
                momentum: o.f64("momentum")?.unwrap_or(0.9),
            },
        )?),
        "efsignsgd" => Box::new(Sign::new("efsignsgd", SignKind::ErrorFeedback)?),
        "randomk" => Box::new(RandomK::new(o.f64("density")?.unwrap_or(0.01), ctx.seed)?),
        "thresholdv" => Box::new(ThresholdV::new(o.f64("threshold")?.unwrap_or(0.01))?),
        "powersgd" => Box::new(PowerSgd::new(PowerSgdConfig {
            rank: o.usize("rank")?.unwrap_or(1),
            start_iter: o.usize("start_iter")?.unwrap_or(1000) as u64,
            min_compression_rate: o.f64("min_compression_rate")?.unwrap_or(2.0),
            error_feedback: o.bool("error_feedback")?,
            warm_start: o.bool("warm_start")?,
            batched: o.bool("batched")?,
            seed: ctx.seed,
        })?),
        other => {
            return Err(CompressError::Config(format!(
                "method '{other}' is listed but has no builder"
            )))
        }
    })
}
