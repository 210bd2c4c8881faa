//! DeepSpeech-style acoustic models (Hannun et al. 2014), in the layout of the
//! deepspeech.pytorch implementation that DGC's speech experiments build on.
//!
//! Input: log-spectrograms `[N, 1, 161, T]` (161 bins = 20 ms windows at 16 kHz,
//! n_fft 320). Front end: `conv.0` Conv2d(1→32, 41×11, stride 2×2, padding 20×5) →
//! `conv.1` BatchNorm2d → Hardtanh(0, 20) → `conv.3` Conv2d(32→32, 21×11, stride 2×1,
//! padding 10×5) → `conv.4` BatchNorm2d → Hardtanh(0, 20): 161 bins become 41, so the
//! recurrent input has 32 · 41 = 1312 features per frame. Then `rnns.{i}`: bidirectional
//! recurrent layers whose two directions are **summed** (not concatenated), each but the
//! first preceded by a batch norm over features (`rnns.{i}.batch_norm`); then `fc.0`
//! BatchNorm1d(hidden) and `fc.1` Linear(hidden → classes, no bias). Output: per-frame
//! logits `[T', N, classes]` for CTC, 29 classes (blank, space, apostrophe, a–z).
//!
//! - `deepspeech(RnnKind::Gru, 7, 1200, 29)`: DGC's LibriSpeech model, 7 GRU layers of
//!   1200. This configuration has 122,169,968 parameters = 466.04 MiB (a test asserts
//!   the count), 4.5 % below the 488.08 MiB DGC reports. We take it as the configuration
//!   DGC most likely used because it is the deepspeech.pytorch model at the size the paper
//!   names: that repository's front end and bidirectional, direction-summing recurrent
//!   layers, with depth 7 and hidden size 1200. The variants we computed land further
//!   away: 201 bins (25 ms windows) 474.83 MiB; the unpadded convolutions of its 2017
//!   version (672 features) 448.46 MiB; concatenated directions (2400 inputs per layer)
//!   663.99 MiB.
//! - `deepspeech(RnnKind::Lstm, 5, 800, 29)`: DGC's AN4 model, 5 LSTM layers of 800.
//!
//! [`DeepSpeech::with_channels`] narrows the front end (32 channels in both
//! convolutions; `--conv-channels`). At 32 the second convolution costs
//! 41 · 32 · (32 · 21 · 11) · 2 ≈ 19.4 MFLOP per output frame, three times a
//! bidirectional 256-unit LSTM layer on its 1312 features (6.4 MFLOP), so a model
//! reduced to fit a small CPU must narrow the front end as well as the recurrent layers.

use crate::layers::{Activation, BatchNorm, Conv2d, Linear, Rnn, RnnKind};
use crate::module::{join, Ctx, Module, NamedTensor};
use crate::Sequential;
use tensor::{Conv2dOptions, Error, Result, Rng, Tensor};

/// Spectrogram bins the front end expects (20 ms windows at 16 kHz).
pub const SPECTROGRAM_BINS: usize = 161;

struct RecurrentLayer {
    batch_norm: Option<BatchNorm>,
    rnn: Rnn,
}

pub struct DeepSpeech {
    conv: Sequential,
    rnns: Vec<RecurrentLayer>,
    fc_norm: BatchNorm,
    fc: Linear,
    pub hidden: usize,
    pub classes: usize,
}

/// Frequency rows left after the two strided convolutions (161 → 81 → 41).
pub fn conv_rows(bins: usize) -> usize {
    let after_first = (bins + 2 * 20 - 41) / 2 + 1;
    (after_first + 2 * 10 - 21) / 2 + 1
}

/// Applies a per-feature batch norm to a `[T, N, F]` sequence (as `[T·N, F]`).
fn sequence_norm(bn: &BatchNorm, x: &Tensor, ctx: &mut Ctx) -> Result<Tensor> {
    let d = x.dims().to_vec();
    bn.forward(&x.reshape(vec![d[0] * d[1], d[2]])?, ctx)?
        .reshape(d)
}

pub fn deepspeech(
    kind: RnnKind,
    layers: usize,
    hidden: usize,
    classes: usize,
    rng: &mut Rng,
) -> Result<DeepSpeech> {
    DeepSpeech::with_channels(kind, layers, hidden, PAPER_CHANNELS, classes, rng)
}

/// Channels of both convolutions in deepspeech.pytorch (and DGC).
pub const PAPER_CHANNELS: usize = 32;

impl DeepSpeech {
    /// [`deepspeech`] with `channels` in both convolutions instead of 32.
    pub fn with_channels(
        kind: RnnKind,
        layers: usize,
        hidden: usize,
        channels: usize,
        classes: usize,
        rng: &mut Rng,
    ) -> Result<DeepSpeech> {
        if channels == 0 || hidden == 0 || layers == 0 {
            return Err(Error::msg(format!(
                "deepspeech: channels ({channels}), hidden ({hidden}) and layers ({layers}) must be at least 1"
            )));
        }
        let hardtanh = Activation::Hardtanh {
            min: 0.0,
            max: 20.0,
        };
        // deepspeech.pytorch's two convolutions: (41 × 11, stride 2 × 2, padding 20 × 5)
        // and (21 × 11, stride 2 × 1, padding 10 × 5), each with a bias.
        let conv2d = |input, kernel, stride, padding, rng: &mut Rng| {
            let options = Conv2dOptions {
                stride,
                padding,
                ..Default::default()
            };
            Conv2d::new(input, channels, kernel, options, true, rng)
        };
        let conv = Sequential::new()
            .push_named("0", conv2d(1, (41, 11), (2, 2), (20, 5), rng)?)
            .push_named("1", BatchNorm::new(channels)?)
            .push_named("2", hardtanh)
            .push_named("3", conv2d(channels, (21, 11), (2, 1), (10, 5), rng)?)
            .push_named("4", BatchNorm::new(channels)?)
            .push_named("5", hardtanh);
        let features = channels * conv_rows(SPECTROGRAM_BINS);
        let mut rnns = Vec::new();
        for i in 0..layers {
            let input = if i == 0 { features } else { hidden };
            rnns.push(RecurrentLayer {
                batch_norm: if i == 0 {
                    None
                } else {
                    Some(BatchNorm::new(hidden)?)
                },
                rnn: Rnn::new(kind, input, hidden, 1, true, 0.0, rng)?,
            });
        }
        let fc_norm = BatchNorm::new(hidden)?;
        let fc = Linear::new(hidden, classes, false, rng)?;
        Ok(DeepSpeech {
            conv,
            rnns,
            fc_norm,
            fc,
            hidden,
            classes,
        })
    }
}

/// `[N, 1, 1, T]`: 1 at each sample's first `lengths[b]` of `T` frames, 0 past them, to
/// multiply `[N, C, F, T]` activations by (built once: every convolution-stack module
/// keeps `T`).
fn frame_mask(lengths: &[usize], t: usize, like: &Tensor) -> Result<Tensor> {
    let mask: Vec<f32> = lengths
        .iter()
        .flat_map(|&len| (0..t).map(move |i| if i < len { 1.0 } else { 0.0 }))
        .collect();
    Tensor::from_vec(mask, vec![lengths.len(), 1, 1, t], like.device())?.to_dtype(like.dtype())
}

/// `[T, N, 1]`: the same mask for time-major `[T, N, F]` sequences.
fn sequence_mask(lengths: &[usize], t: usize, like: &Tensor) -> Result<Tensor> {
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| {
            lengths
                .iter()
                .map(move |&len| if i < len { 1.0 } else { 0.0 })
        })
        .collect();
    Tensor::from_vec(mask, vec![t, lengths.len(), 1], like.device())?.to_dtype(like.dtype())
}

impl DeepSpeech {
    /// [`Module::forward`] over a batch padded to `T` frames in which sample `b` has
    /// `lengths[b]`, as deepspeech.pytorch computes it (its `MaskConv` and packed
    /// sequences): after every module of the convolution stack (each convolution, batch
    /// norm and Hardtanh) the frames past a sample's ⌈length / 2⌉ are zeroed, the
    /// recurrent layers' reverse direction starts at each sample's last frame, and each
    /// recurrent layer's outputs are zero at the padded frames (what `pad_packed_sequence`
    /// gives). In evaluation mode a sample's logits within its ⌈length / 2⌉ frames are
    /// then those of the sample alone. In training the batch norms' statistics are taken
    /// over all `N · T'` positions, the padded ones included as the zeros they are in
    /// deepspeech.pytorch (the convolutions' batch norms and the recurrent ones see zeros
    /// there, not the padding's activations), so logits, gradients and running statistics
    /// match deepspeech.pytorch's on a padded batch (tests/golden.rs).
    pub fn forward_lengths(&self, x: &Tensor, lengths: &[usize], ctx: &mut Ctx) -> Result<Tensor> {
        self.run(x, Some(lengths), ctx)
    }

    fn run(&self, x: &Tensor, lengths: Option<&[usize]>, ctx: &mut Ctx) -> Result<Tensor> {
        let d = x.dims();
        if d.len() != 4 || d[1] != 1 || d[2] != SPECTROGRAM_BINS {
            return Err(Error::BadShape {
                op: "DeepSpeech",
                msg: format!("expected [N, 1, {SPECTROGRAM_BINS}, T] spectrograms"),
                shape: x.shape().clone(),
            });
        }
        if let Some(l) = lengths {
            if l.len() != d[0] || l.iter().any(|&t| t == 0 || t > d[3]) {
                return Err(Error::msg(format!(
                    "DeepSpeech: frame counts {l:?} for a batch of {} spectrograms of {} frames",
                    d[0], d[3]
                )));
            }
        }
        // The first convolution has stride 2 in time (kernel 11, padding 5): ⌈T / 2⌉ frames.
        let frames: Option<Vec<usize>> =
            lengths.map(|l| l.iter().map(|&t| t.div_ceil(2)).collect());
        let h = self.conv.forward_layers(x, ctx, 0..1)?;
        let t = h.dims()[3];
        // Only a batch with padding needs the masks (all ones otherwise).
        let frames = frames.filter(|f| f.iter().any(|&len| len < t));
        let mask = match &frames {
            Some(f) => Some(frame_mask(f, t, &h)?),
            None => None,
        };
        let masked = |h: Tensor| match &mask {
            Some(m) => h.mul(m),
            None => Ok(h),
        };
        // MaskConv: zero the padded frames after every module, so that neither the batch
        // norms' statistics nor the next convolution see the padding's activations. The
        // stack is conv `0`, batch norm `1`, Hardtanh `2`, conv `3`, batch norm `4`,
        // Hardtanh `5`. Hardtanh(0, 20) is elementwise and keeps zeros zero, so masking
        // after it equals masking before and after it (values and gradients).
        let mut h = masked(h)?;
        for range in [1..3, 3..4, 4..6] {
            h = masked(self.conv.forward_layers(&h, ctx, range)?)?;
        }
        let (n, c, f) = (h.dims()[0], h.dims()[1], h.dims()[2]);
        // [N, C, F, T] → [T, N, C·F]
        let mut h = h
            .reshape(vec![n, c * f, t])?
            .permute(&[2, 0, 1])?
            .contiguous()?;
        let seq_mask = match &frames {
            Some(f) => Some(sequence_mask(f, t, &h)?),
            None => None,
        };
        for layer in &self.rnns {
            if let Some(bn) = &layer.batch_norm {
                h = sequence_norm(bn, &h, ctx)?;
            }
            let (y, _) = layer
                .rnn
                .forward_seq_lengths(&h, None, frames.as_deref(), ctx)?;
            // Sum the two directions: [T, N, 2H] → [T, N, H].
            let halves = y.chunk(2, 2)?;
            h = halves[0].add(&halves[1])?;
            // Zero at the padded frames, as pad_packed_sequence leaves them: the outputs
            // there (the forward direction run on through the padding, the reverse one
            // over it) would otherwise enter the next batch norm's statistics.
            if let Some(m) = &seq_mask {
                h = h.mul(m)?;
            }
        }
        let h = sequence_norm(&self.fc_norm, &h, ctx)?;
        self.fc.forward(&h, ctx)
    }
}

impl Module for DeepSpeech {
    /// `[N, 1, 161, T]` spectrograms to `[T', N, classes]` logits, T' = ⌈T / 2⌉, every
    /// sample taken as `T` frames long (see [`DeepSpeech::forward_lengths`] for padded
    /// batches).
    fn forward(&self, x: &Tensor, ctx: &mut Ctx) -> Result<Tensor> {
        self.run(x, None, ctx)
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        self.conv.params(&join(prefix, "conv"), out);
        for (i, layer) in self.rnns.iter().enumerate() {
            let p = join(prefix, &format!("rnns.{i}"));
            if let Some(bn) = &layer.batch_norm {
                bn.params(&join(&p, "batch_norm"), out);
            }
            layer.rnn.params(&join(&p, "rnn"), out);
        }
        self.fc_norm.params(&join(prefix, "fc.0"), out);
        self.fc.params(&join(prefix, "fc.1"), out);
    }
    fn buffers(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        self.conv.buffers(&join(prefix, "conv"), out);
        for (i, layer) in self.rnns.iter().enumerate() {
            if let Some(bn) = &layer.batch_norm {
                bn.buffers(&join(prefix, &format!("rnns.{i}.batch_norm")), out);
            }
        }
        self.fc_norm.buffers(&join(prefix, "fc.0"), out);
    }
}
