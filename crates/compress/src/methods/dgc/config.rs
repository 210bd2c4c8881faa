//! DGC's configuration: which of the paper's techniques run, and the two choices where
//! the reference code (`dgc/optim/sgd.py`, `dgc/memory.py`) departs from the obvious
//! reading of the paper: where weight decay enters ([`Decay`]) and how the tensors sent
//! dense are clipped ([`DenseClip`]).

use crate::exchange::{check_warmup, warmup_density};
use crate::method::ParamSpec;
use crate::{CompressError, Result};
use tensor::sparsify::{self, Accumulate, AccumulateRule};

/// Where weight decay enters under momentum correction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decay {
    /// As the reference's `DGCSGD`: applied densely every step, outside the compressed
    /// momentum, with a momentum buffer of its own (`d ← m·d + wd·w`, added to the
    /// averaged direction; Nesterov adds `wd·w + m·d`). Every weight decays every step.
    Dense,
    /// Added to the gradient before momentum correction (`g += wd·w`), so it is
    /// accumulated, sparsified and sent with it: a weight decays only when it is sent.
    Compressed,
}

impl Decay {
    pub const NAMES: [&'static str; 2] = ["dense", "compressed"];
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "dense" => Ok(Decay::Dense),
            "compressed" => Ok(Decay::Compressed),
            _ => Err(CompressError::Config(format!(
                "dgc: decay={s} is not one of dense, compressed"
            ))),
        }
    }
}

/// How the tensors DGC sends dense (below `dense_below`, or 1-D with `dense_1d`) are
/// clipped, when `clip` is set. Off by default: on dgc_table4's quick LM row (the LSTM's
/// biases sent dense, clip 0.25) `averaged` took DGC's perplexity from 134.6 to 226.3,
/// and `local` to 153.8 (benchmarks/RESULTS.md, dgc_table4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenseClip {
    /// As the reference's memory would for them (`compensate(.., accumulate=False)` after
    /// the allreduce, which clips when a clipping function is configured; none of its
    /// configurations sets one): the averaged tensor, per tensor, at `clip`.
    Averaged,
    /// Each rank's mean gradient before the allreduce, per tensor, at `clip · √N`: the
    /// compressed tensors' local rule.
    Local,
    /// Not clipped.
    Off,
}

impl DenseClip {
    /// `true` and `false` read as `local` and `off`, the option's earlier boolean form.
    pub const NAMES: [&'static str; 5] = ["averaged", "local", "off", "true", "false"];
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "averaged" => Ok(DenseClip::Averaged),
            "local" | "true" => Ok(DenseClip::Local),
            "off" | "false" => Ok(DenseClip::Off),
            _ => Err(CompressError::Config(format!(
                "dgc: clip_dense={s} is not one of averaged, local, off"
            ))),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct DgcConfig {
    pub density: f64,
    pub dense_below: usize,
    /// Every 1-D tensor (biases, batch norm) dense too, whatever its length.
    pub dense_1d: bool,
    pub momentum: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
    pub momentum_correction: bool,
    pub masking: bool,
    /// Clipping threshold on the averaged gradient (0: off); each rank clips its own mean
    /// gradient at `clip · √N` (the paper's `clip / √N` on its 1/N share).
    pub clip: f64,
    /// How the tensors sent dense are clipped (with `clip` > 0; see [`DenseClip`]).
    pub clip_dense: DenseClip,
    /// Where weight decay enters under momentum correction.
    pub decay: Decay,
    pub warmup_epochs: f64,
    pub warmup_densities: Vec<f64>,
    pub sampling: bool,
    pub sample_fraction: f64,
}

impl DgcConfig {
    /// Gradient dropping: every DGC technique off.
    pub fn all_off(density: f64) -> Self {
        DgcConfig {
            density,
            dense_below: 0,
            dense_1d: false,
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
            momentum_correction: false,
            masking: false,
            clip: 0.0,
            clip_dense: DenseClip::Off,
            decay: Decay::Dense,
            warmup_epochs: 0.0,
            warmup_densities: Vec::new(),
            sampling: false,
            sample_fraction: 0.01,
        }
    }
    pub fn validate(&self) -> Result<()> {
        crate::options::check_density("dgc", self.density)?;
        check_warmup("dgc", self.warmup_epochs, &self.warmup_densities)?;
        if self.masking && !self.momentum_correction {
            return Err(CompressError::Config(
                "dgc: masking=true needs momentum_correction=true (without it the momentum lives in the optimizer, which DGC does not mask)".into(),
            ));
        }
        if !(self.sample_fraction > 0.0 && self.sample_fraction <= 1.0) {
            return Err(CompressError::Config(format!(
                "dgc: sample_fraction {} must be in (0, 1]",
                self.sample_fraction
            )));
        }
        if self.clip < 0.0 {
            return Err(CompressError::Config("dgc: clip must be ≥ 0".into()));
        }
        Ok(())
    }
    /// The density at a (fractional) epoch: the warm-up stage's, never below `density`.
    pub fn density_at(&self, epoch: f64) -> f64 {
        warmup_density(
            self.density,
            self.warmup_epochs,
            &self.warmup_densities,
            epoch,
        )
    }
}

/// The factor that clips `grad` to `clip · √world` (1 when it is within, or `clip` is 0):
/// the paper's per-node threshold `clip / √N` on its 1/N share, on our mean gradient.
/// A NaN norm gives 1 and an infinite one 0 (under which the inf entries become NaN):
/// either way a diverged gradient reaches the encoder, which names it.
pub(super) fn clip_factor(grad: &[f32], clip: f64, world: usize) -> f32 {
    if clip <= 0.0 {
        return 1.0;
    }
    // In the GPU's order, so that DgcOnDevice clips by the same factor bit for bit.
    clip_from_sum_sq(sparsify::sum_of_squares_slice(grad), clip, world)
}

/// [`clip_factor`] from Σ g², which the tensor path takes on the gradient's device.
pub(super) fn clip_from_sum_sq(sum_sq: f64, clip: f64, world: usize) -> f32 {
    if clip <= 0.0 {
        return 1.0;
    }
    let limit = clip * (world as f64).sqrt();
    let norm = sum_sq.sqrt();
    if norm > limit {
        (limit / norm) as f32
    } else {
        1.0
    }
}

impl DgcConfig {
    /// Whether a parameter of this shape is exchanged dense (`dense_below`, `dense_1d`).
    pub(super) fn is_dense(&self, p: &ParamSpec) -> bool {
        p.numel() < self.dense_below || (self.dense_1d && p.shape.len() <= 1)
    }
    /// Whether weight decay runs outside the compression, on a buffer of its own
    /// ([`Decay::Dense`] under momentum correction, with a non-zero decay).
    pub fn dense_decay(&self) -> bool {
        self.momentum_correction && self.weight_decay != 0.0 && self.decay == Decay::Dense
    }
    /// Whether the weights are added into the accumulation ([`Decay::Compressed`]).
    pub(super) fn compressed_decay(&self) -> bool {
        self.momentum_correction && self.weight_decay != 0.0 && self.decay == Decay::Compressed
    }
    /// [`Decay::Dense`]'s step as one accumulation pass: the decay buffer as the
    /// velocity, the direction as the accumulator, the weights read as the gradient at
    /// scale `wd`, so that `d = m·d + wd·w; out += d` (Nesterov: `d = m·(d + wd·w);
    /// out += d + wd·w`).
    pub(super) fn decay_accumulation(&self) -> Accumulate {
        Accumulate {
            rule: if self.nesterov {
                AccumulateRule::Nesterov
            } else {
                AccumulateRule::Momentum
            },
            scale: self.weight_decay as f32,
            momentum: self.momentum as f32,
            weight_decay: 0.0,
        }
    }
    /// The accumulation this configuration runs, with clipping factor `scale`.
    pub(super) fn accumulation(&self, scale: f32) -> Accumulate {
        Accumulate {
            rule: match (self.momentum_correction, self.nesterov) {
                (false, _) => AccumulateRule::Plain,
                (true, false) => AccumulateRule::Momentum,
                (true, true) => AccumulateRule::Nesterov,
            },
            scale,
            momentum: self.momentum as f32,
            weight_decay: if self.compressed_decay() {
                self.weight_decay as f32
            } else {
                0.0
            },
        }
    }
}
