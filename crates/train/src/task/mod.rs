//! What is trained on what, and how a batch becomes a loss and an evaluation metric.
//! Three kinds of task, as in the papers:
//!
//! - image classification (ResNets, VGG-16, AlexNet, LeNet-5): cross-entropy, accuracy;
//! - word or character language modelling (the 2-layer LSTM LMs): truncated BPTT over
//!   contiguous token streams, the hidden state carried from window to window (detached)
//!   within an epoch, per-token cross-entropy, perplexity;
//! - speech recognition (DeepSpeech's GRU network, the AN4 LSTM): CTC over spectrograms,
//!   word error rate of greedy decoding.
//!
//! A model that does not fit the dataset is an error before any worker starts.

mod images;
mod speech;
mod text;

use crate::config::Config;
use crate::wer;
use anyhow::{bail, Context, Result};
use data::{Batch, Dataset, Loader, TokenBatches};
use images::{check_image, image_data, image_shape};
use nn::layers::RnnState;
use nn::loss::{cross_entropy, ctc_loss, CtcReduction};
pub use nn::models::{Kind, Model};
use nn::models::{Knob, ModelInfo, Spec};
use nn::Ctx;
use speech::{speech_data, speech_outputs, SPEECH_CLASSES};
use std::sync::Arc;
use tensor::{no_grad, Device, Rng, Tensor};
use text::text_data;

/// Whether `model` is a language model (its synthetic data counts tokens, not samples).
pub fn is_language_model(model: &str) -> bool {
    nn::models::find(model).is_ok_and(|m| m.kind == Kind::Language)
}

/// The learning rate `model`'s recipe trains it at, where that is below the default 0.1
/// (its registry entry's): the rate such a model gets when none is given
/// (`Config::resolve`), and the hint when a loss diverges (LeNet-5 on Fashion-MNIST at
/// 0.1 with momentum 0.9, dense, 2 workers × 32: NaN at step 29).
pub fn usual_lr(model: &str) -> Option<(f64, &'static str)> {
    nn::models::find(model).ok()?.usual_lr
}

/// Streams of the language model's evaluation, over the whole test text whatever the
/// number of workers (PyTorch's word-LM example uses 10).
pub const EVAL_STREAMS: usize = 10;
/// The fewest test tokens a language model can be evaluated on: each of the
/// [`EVAL_STREAMS`] streams needs an input and its next token.
pub const EVAL_MIN_TOKENS: usize = 2 * EVAL_STREAMS;

/// The model's registry entry, or an error that lists the models by kind.
pub fn model_info(model: &str) -> Result<&'static ModelInfo> {
    nn::models::find(model).map_err(|_| {
        let list = |k: Kind| nn::models::names_of(k).join(", ");
        anyhow::anyhow!(
            "--model {model}: expected an image model ({}), a language model ({}) or a speech model ({})",
            list(Kind::Image),
            list(Kind::Language),
            list(Kind::Speech)
        )
    })
}

/// The data of a split: samples drawn in shuffled batches, or a token stream.
enum Split {
    Samples(Arc<dyn Dataset>),
    Tokens(Arc<Vec<u32>>),
}

pub struct Task {
    pub model: Model,
    pub kind: Kind,
    /// Where the model's parameters live and batches are sent.
    pub device: Device,
    train: Split,
    test: Split,
    pub metric_name: &'static str,
    /// Classes of an image task (0 for the others); top-5 accuracy needs at least 5.
    pub classes: usize,
    /// BPTT window of the language model.
    bptt: usize,
    /// The language model's state at the end of the last window (detached).
    state: Option<RnnState>,
}

/// A rank's training batches for one epoch at a time; every rank gets the same count.
pub enum Source {
    Shuffled(Loader),
    Windows {
        tokens: TokenBatches,
        bptt: usize,
        per_epoch: usize,
    },
}

impl Source {
    pub fn batches_per_epoch(&self) -> usize {
        match self {
            Source::Shuffled(l) => l.batches_per_epoch(),
            Source::Windows { per_epoch, .. } => *per_epoch,
        }
    }
    pub fn epoch(&self, epoch: usize) -> Box<dyn Iterator<Item = Result<Batch>> + '_> {
        match self {
            Source::Shuffled(l) => Box::new(l.epoch(epoch).map(|b| b.map_err(Into::into))),
            // The same text every epoch, in order (as PyTorch's word LM example).
            Source::Windows {
                tokens,
                bptt,
                per_epoch,
            } => Box::new((0..*per_epoch).map(move |i| {
                let (x, y) = tokens.window(i, *bptt)?;
                Ok(Batch::new(x, y))
            })),
        }
    }
}

/// Sums every rank contributes to an evaluation (added up over ranks).
pub struct EvalSums {
    pub numerator: f64,
    pub denominator: f64,
    pub loss_sum: f64,
    pub loss_count: f64,
    /// Image classification with at least 5 classes: test images whose label is among
    /// the 5 largest logits (over `denominator` images); 0 for the other tasks.
    pub top5: f64,
}

/// The model/dataset combination is one we can build, and the sequence options fit it.
pub fn check(c: &Config) -> Result<()> {
    let info = model_info(&c.model)?;
    let kind = info.kind;
    // --bptt has a default, so only a value other than it can tell that it was given.
    if kind != Kind::Language && c.bptt != Config::default().bptt {
        bail!(
            "--bptt is for the language models' truncated backpropagation, not --model {}",
            c.model
        );
    }
    // The sizes a model lets a user change are in its registry entry.
    for (flag, knob, set) in [
        ("--hidden", Knob::Hidden, c.hidden.is_some()),
        ("--layers", Knob::Layers, c.layers.is_some()),
        ("--dropout", Knob::Dropout, c.dropout.is_some()),
        ("--conv-channels", Knob::Channels, c.conv_channels.is_some()),
    ] {
        if set && !info.takes(knob) {
            let takers: Vec<&str> = nn::models::MODELS
                .iter()
                .filter(|m| m.takes(knob))
                .map(|m| m.name)
                .collect();
            bail!(
                "{flag}: --model {} is fixed ({}); {flag} sets a size of {}",
                c.model,
                info.about,
                takers.join(", ")
            );
        }
    }
    match kind {
        Kind::Image => check_image(c, info)?,
        Kind::Language => {
            if !["kjv", "ptb", "synthetic"].contains(&c.dataset.as_str()) {
                bail!(
                    "--dataset {}: language models train on kjv, ptb or synthetic",
                    c.dataset
                );
            }
            if info.reads_characters() && c.dataset == "synthetic" {
                bail!(
                    "--model {} needs a character corpus (--dataset kjv or ptb)",
                    c.model
                );
            }
            if c.bptt == 0 {
                bail!("--bptt must be at least 1");
            }
        }
        Kind::Speech => {
            if !["speech", "an4", "synthetic"].contains(&c.dataset.as_str()) {
                bail!(
                    "--dataset {}: speech models train on speech, an4 or synthetic",
                    c.dataset
                );
            }
        }
    }
    if c.hidden == Some(0) || c.layers == Some(0) || c.conv_channels == Some(0) {
        bail!("--hidden, --layers and --conv-channels must be at least 1");
    }
    if c.dropout.is_some_and(|d| !(0.0..1.0).contains(&d)) {
        bail!("--dropout must be in [0, 1)");
    }
    Ok(())
}

impl Task {
    /// The task of `c`, its model built on `device` (initial values are drawn on the CPU
    /// from the seed, so every device starts from the same model).
    pub fn new(c: &Config, device: Device) -> Result<Task> {
        check(c)?;
        let info = model_info(&c.model)?;
        let kind = info.kind;
        let build = |image: [usize; 3], outputs: usize| {
            let spec = Spec {
                image,
                outputs,
                hidden: c.hidden,
                layers: c.layers,
                dropout: c.dropout,
                channels: c.conv_channels,
            };
            // Initial values are drawn from the seed on whichever device.
            nn::init::with_default_device(device, || (info.build)(&spec, &mut Rng::new(c.seed)))
                .with_context(|| format!("building {} on {device:?}", c.model))
        };
        let mut classes = 0;
        let (model, train, test, metric_name) = match kind {
            Kind::Image => {
                let (shape, n) = image_shape(c, info)?;
                classes = n;
                let (train, test) = image_data(c, shape, n)?;
                (build(shape, n)?, train, test, "accuracy")
            }
            Kind::Language => {
                let (train, test, vocab) = text_data(c, info)?;
                (
                    build([0; 3], vocab)?,
                    Split::Tokens(Arc::new(train)),
                    Split::Tokens(Arc::new(test)),
                    "perplexity",
                )
            }
            Kind::Speech => {
                let (train, test) = speech_data(c)?;
                (build([0; 3], SPEECH_CLASSES)?, train, test, "wer")
            }
        };
        Ok(Task {
            model,
            kind,
            device,
            train,
            test,
            metric_name,
            classes,
            bptt: c.bptt,
            state: None,
        })
    }

    /// The training split's size: samples, or tokens for a language model.
    pub fn train_len(&self) -> usize {
        match &self.train {
            Split::Samples(ds) => ds.len(),
            Split::Tokens(stream) => stream.len(),
        }
    }

    /// What [`Task::train_len`] counts.
    pub fn train_unit(&self) -> &'static str {
        match &self.train {
            Split::Samples(_) => "samples",
            Split::Tokens(_) => "tokens",
        }
    }

    /// This rank's training batches.
    pub fn source(&self, batch: usize, rank: usize, world: usize, seed: u64) -> Result<Source> {
        match &self.train {
            Split::Samples(ds) => Ok(Source::Shuffled(Loader::new(
                ds.clone(),
                batch,
                rank,
                world,
                seed,
            )?)),
            Split::Tokens(stream) => {
                let tokens = TokenBatches::new(stream, batch, world, rank)
                    .with_context(|| format!("rank {rank}: its share of the training text"))?;
                // Shards differ by a token at most, but every rank must run the same
                // number of steps: the smallest shard's window count.
                let mut per_epoch = usize::MAX;
                for r in 0..world {
                    let t = TokenBatches::new(stream, batch, world, r)?;
                    per_epoch = per_epoch.min(t.windows(self.bptt));
                }
                Ok(Source::Windows {
                    tokens,
                    bptt: self.bptt,
                    per_epoch,
                })
            }
        }
    }

    /// Forgets the carried language-model state (at the start of an epoch).
    pub fn reset_state(&mut self) {
        self.state = None;
    }

    /// The carried language-model state by name (`h`, and `c` for an LSTM), for a
    /// checkpoint written inside an epoch; empty at an epoch's start and for other tasks.
    pub fn carried_state(&self) -> Vec<(&'static str, Tensor)> {
        let Some(s) = &self.state else {
            return Vec::new();
        };
        let mut v = vec![("h", s.h.clone())];
        if let Some(c) = &s.c {
            v.push(("c", c.clone()));
        }
        v
    }

    /// Restores what [`Task::carried_state`] gave (`h` is required, `c` optional).
    pub fn set_carried_state(&mut self, h: Tensor, c: Option<Tensor>) -> Result<()> {
        if !matches!(self.model, Model::Language(_)) {
            bail!(
                "the checkpoint carries a language model's hidden state, but this model is not one"
            );
        }
        self.state = Some(RnnState {
            h: h.to_device(self.device)?,
            c: c.map(|c| c.to_device(self.device)).transpose()?,
        });
        Ok(())
    }

    /// The training loss of one batch (for the language model, the mean over the window's
    /// tokens, continuing from the last window's state).
    pub fn loss(&mut self, batch: &Batch, ctx: &mut Ctx) -> Result<Tensor> {
        let inputs = batch.inputs.to_device(self.device)?;
        let labels = batch.labels.to_device(self.device)?;
        match &self.model {
            Model::Image(m) => Ok(cross_entropy(&m.forward(&inputs, ctx)?, &labels, None)?),
            Model::Language(m) => {
                let (logits, state) = m.forward_with_state(&inputs, self.state.as_ref(), ctx)?;
                self.state = Some(detach(&state));
                let v = logits.dims()[2];
                let flat = logits.reshape(vec![logits.elem_count() / v, v])?;
                Ok(cross_entropy(&flat, &labels, None)?)
            }
            Model::Speech(m) => {
                let (log_probs, targets, lengths) = speech_outputs(m, batch, &inputs, ctx)?;
                // Per-utterance loss averaged over the batch, as deepspeech.pytorch, whose
                // learning rates the speech recipes use (PyTorch's 'mean' also divides
                // by each transcript's length, scaling the rate down by that length).
                Ok(ctc_loss(
                    &log_probs,
                    &targets,
                    &lengths,
                    CtcReduction::BatchMean,
                    true,
                )?)
            }
        }
    }

    /// This rank's share of the test metric's sums (no gradients; evaluation mode).
    pub fn evaluate(&mut self, batch_size: usize, rank: usize, world: usize) -> Result<EvalSums> {
        let mut s = EvalSums {
            numerator: 0.0,
            denominator: 0.0,
            loss_sum: 0.0,
            loss_count: 0.0,
            top5: 0.0,
        };
        let mut ctx = Ctx::eval();
        no_grad(|| -> Result<()> {
            match (&self.model, &self.test) {
                (Model::Language(m), Split::Tokens(stream)) => {
                    // The test text in EVAL_STREAMS streams, each rank some of them whole
                    // with the state carried through: the tokens scored and the streams
                    // they are in do not depend on the number of workers. Ranks past the
                    // number of streams score none.
                    let cols = data::shard_range(EVAL_STREAMS, world, rank);
                    if cols.is_empty() {
                        return Ok(());
                    }
                    let tokens = match TokenBatches::columns(stream, EVAL_STREAMS, cols) {
                        Ok(t) => t,
                        Err(e) => bail!("rank {rank}: the test text is too short to evaluate: {e}"),
                    };
                    let mut state: Option<RnnState> = None;
                    for i in 0..tokens.windows(self.bptt) {
                        let (x, y) = tokens.window(i, self.bptt)?;
                        let (logits, st) = m.forward_with_state(
                            &x.to_device(self.device)?,
                            state.as_ref(),
                            &mut ctx,
                        )?;
                        state = Some(st);
                        let v = logits.dims()[2];
                        let n = y.elem_count() as f64;
                        let flat = logits.reshape(vec![logits.elem_count() / v, v])?;
                        let nll = cross_entropy(&flat, &y.to_device(self.device)?, None)?
                            .to_scalar::<f32>()? as f64;
                        s.numerator += nll * n;
                        s.denominator += n;
                    }
                    s.loss_sum = s.numerator;
                    s.loss_count = s.denominator;
                }
                (model, Split::Samples(ds)) => {
                    let mut loader = Loader::new(
                        ds.clone(),
                        batch_size.min(ds.len() / world).max(1),
                        rank,
                        world,
                        0,
                    )?;
                    loader.shuffle = false;
                    loader.keep_last = true;
                    for batch in loader.epoch(0) {
                        let batch = batch?;
                        let inputs = batch.inputs.to_device(self.device)?;
                        match model {
                            Model::Image(m) => {
                                let labels_t = batch.labels.to_device(self.device)?;
                                let logits = m.forward(&inputs, &mut ctx)?;
                                let n = labels_t.elem_count() as f64;
                                s.loss_sum += cross_entropy(&logits, &labels_t, None)?
                                    .to_scalar::<f32>()?
                                    as f64
                                    * n;
                                s.loss_count += n;
                                let pred = logits.argmax(1, false)?.to_vec::<u32>()?;
                                let labels = batch.labels.to_vec::<u32>()?;
                                s.numerator +=
                                    pred.iter().zip(&labels).filter(|(a, b)| a == b).count() as f64;
                                s.denominator += n;
                                if self.classes >= 5 {
                                    s.top5 +=
                                        top_k_hits(&logits.to_vec::<f32>()?, &labels, 5)? as f64;
                                }
                            }
                            Model::Speech(m) => {
                                let (log_probs, targets, lengths) =
                                    speech_outputs(m, &batch, &inputs, &mut ctx)?;
                                // The per-utterance losses summed; the count makes
                                // the test loss the training loss's per-utterance mean.
                                s.loss_sum += ctc_loss(
                                    &log_probs,
                                    &targets,
                                    &lengths,
                                    CtcReduction::Sum,
                                    true,
                                )?
                                .to_scalar::<f32>()?
                                    as f64;
                                s.loss_count += targets.len() as f64;
                                // Best class per frame: [T, N].
                                let best = log_probs.argmax(2, false)?.to_vec::<u32>()?;
                                let batch_n = targets.len();
                                for (i, target) in targets.iter().enumerate() {
                                    let frames: Vec<u32> =
                                        (0..lengths[i]).map(|t| best[t * batch_n + i]).collect();
                                    let hyp = data::speech::decode(&wer::greedy_ctc(&frames));
                                    let reference = data::speech::decode(target);
                                    let (errors, words) = wer::word_errors(&hyp, &reference);
                                    s.numerator += errors as f64;
                                    s.denominator += words as f64;
                                }
                            }
                            Model::Language(_) => {
                                bail!("the language model evaluates on a token stream")
                            }
                        }
                    }
                }
                _ => bail!("the task's model and test data do not match"),
            }
            Ok(())
        })?;
        Ok(s)
    }

    /// Top-5 accuracy from the sums of every rank, for image tasks of at least 5 classes
    /// (`classes` is 0 for the other tasks).
    pub fn top5(&self, s: &EvalSums) -> Option<f64> {
        (self.classes >= 5).then(|| s.top5 / s.denominator.max(1.0))
    }

    /// The metric and the mean test loss from the sums of every rank.
    pub fn finish(&self, s: &EvalSums) -> (f64, f64) {
        let loss = s.loss_sum / s.loss_count.max(1.0);
        let metric = match self.kind {
            Kind::Language => loss.exp(),
            _ => s.numerator / s.denominator.max(1.0),
        };
        (metric, loss)
    }
}

/// How many rows of `logits` (`[labels.len(), C]`, row-major) hold their label among
/// their `k` largest values: the label's logit has fewer than `k` strictly larger ones,
/// so ties count in the label's favour (top-1 takes argmax's first maximum instead).
fn top_k_hits(logits: &[f32], labels: &[u32], k: usize) -> Result<usize> {
    let n = labels.len();
    if n == 0 || !logits.len().is_multiple_of(n) {
        bail!("{} logits for {n} labels", logits.len());
    }
    let classes = logits.len() / n;
    let mut hits = 0;
    for (row, &label) in logits.chunks_exact(classes).zip(labels) {
        let Some(&own) = row.get(label as usize) else {
            bail!("label {label} of {classes} classes");
        };
        hits += (row.iter().filter(|&&v| v > own).count() < k) as usize;
    }
    Ok(hits)
}

fn detach(s: &RnnState) -> RnnState {
    RnnState {
        h: s.h.detach(),
        c: s.c.as_ref().map(|c| c.detach()),
    }
}

#[cfg(test)]
mod tests {
    use super::{top_k_hits, Task, EVAL_STREAMS};
    use crate::config::Config;
    use tensor::Device;

    /// A language model's test perplexity scores the same tokens in the same streams
    /// for any number of workers: the ranks' sums add up to one worker's (to rounding),
    /// ranks past the number of streams score nothing.
    #[test]
    fn language_model_evaluation_does_not_depend_on_the_number_of_workers() {
        let c = Config {
            model: "lstm_lm".into(),
            dataset: "synthetic".into(),
            hidden: Some(16),
            synthetic_samples: 2000,
            eval_samples: Some(1003),
            ..Config::default()
        };
        let mut task = Task::new(&c, Device::Cpu).unwrap();
        let sums = |task: &mut Task, world: usize| -> (f64, f64) {
            (0..world).fold((0.0, 0.0), |(nll, n), rank| {
                let s = task.evaluate(c.batch_size, rank, world).unwrap();
                (nll + s.numerator, n + s.denominator)
            })
        };
        let (nll, n) = sums(&mut task, 1);
        // 1,003 tokens in 10 streams of 100: 99 predictions each.
        assert_eq!(n, (EVAL_STREAMS * 99) as f64);
        for world in [2, 3, 4, 12] {
            let (other, m) = sums(&mut task, world);
            assert_eq!(m, n, "{world} workers");
            assert!(
                (other - nll).abs() <= 1e-5 * nll,
                "{world} workers: {other} against {nll}"
            );
        }
        let idle = task.evaluate(c.batch_size, 11, 12).unwrap();
        assert_eq!((idle.numerator, idle.denominator), (0.0, 0.0));
    }

    #[test]
    fn top_k_counts_labels_among_the_k_largest_with_ties_in_their_favour() {
        // Row 0: label 2 is the 2nd largest; row 1: label 0 is the smallest of 4;
        // row 2: label 1 ties the largest value.
        let logits = [
            0.5, 0.9, 0.7, 0.1, //
            -1.0, 0.0, 1.0, 2.0, //
            3.0, 3.0, 0.0, 0.0,
        ];
        let labels = [2, 0, 1];
        assert_eq!(top_k_hits(&logits, &labels, 1).unwrap(), 1);
        assert_eq!(top_k_hits(&logits, &labels, 2).unwrap(), 2);
        assert_eq!(top_k_hits(&logits, &labels, 3).unwrap(), 2);
        assert_eq!(top_k_hits(&logits, &labels, 4).unwrap(), 3);
        assert!(
            top_k_hits(&logits, &[0, 9, 1], 1).is_err(),
            "label out of range"
        );
        assert!(
            top_k_hits(&logits[..11], &labels, 1).is_err(),
            "ragged logits"
        );
    }
}
