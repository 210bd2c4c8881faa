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

use crate::config::Config;
use crate::wer;
use anyhow::{bail, Context, Result};
use data::{Batch, Dataset, ImageDataset, Loader, SyntheticImages, TokenBatches};
use nn::layers::{RnnKind, RnnState};
use nn::loss::{cross_entropy, ctc_loss, CtcReduction};
use nn::models::{DeepSpeech, LstmLm};
use nn::{Ctx, Module};
use std::path::PathBuf;
use std::sync::Arc;
use tensor::{no_grad, Device, Rng, Tensor};

const IMAGE_MODELS: [&str; 9] = [
    "resnet20",
    "resnet32",
    "resnet44",
    "resnet56",
    "resnet110",
    "lenet5",
    "vgg16",
    "alexnet",
    "resnet50",
];
const LANGUAGE_MODELS: [&str; 3] = ["lstm_lm", "lstm_lm_medium", "char_lstm"];
const SPEECH_MODELS: [&str; 2] = ["deepspeech", "an4_lstm"];

/// Where `datasets prepare kjv|speech --out DIR` writes when the README is followed.
const KJV_DEFAULT_DIR: &str = "data/kjv";
const SPEECH_DEFAULT_DIR: &str = "data/speech";
/// Vocabulary of the synthetic token stream.
const SYNTHETIC_VOCAB: usize = 100;
/// Output classes of the speech models: blank, apostrophe, A–Z, space.
const SPEECH_CLASSES: usize = 29;
/// Streams of the language model's evaluation (PyTorch's word-LM example uses 10).
const EVAL_STREAMS: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Image,
    Language,
    Speech,
}

pub fn kind_of(model: &str) -> Result<Kind> {
    if IMAGE_MODELS.contains(&model) {
        Ok(Kind::Image)
    } else if LANGUAGE_MODELS.contains(&model) {
        Ok(Kind::Language)
    } else if SPEECH_MODELS.contains(&model) {
        Ok(Kind::Speech)
    } else {
        bail!(
            "--model {model}: expected an image model ({}), a language model ({}) or a speech model ({})",
            IMAGE_MODELS.join(", "),
            LANGUAGE_MODELS.join(", "),
            SPEECH_MODELS.join(", ")
        )
    }
}

pub enum Model {
    Image(Box<dyn Module>),
    Language(LstmLm),
    Speech(DeepSpeech),
}

impl Model {
    pub fn module(&self) -> &dyn Module {
        match self {
            Model::Image(m) => m.as_ref(),
            Model::Language(m) => m,
            Model::Speech(m) => m,
        }
    }
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
}

/// `[C, H, W]` and the number of classes of an image dataset, without loading it.
fn image_shape(c: &Config) -> Result<([usize; 3], usize)> {
    Ok(match c.dataset.as_str() {
        "fashion-mnist" => ([1, 28, 28], 10),
        "cifar10" => ([3, 32, 32], 10),
        "synthetic" => {
            let s = nn::models::input_shape(&c.model)
                .with_context(|| format!("model {} has no image input shape", c.model))?;
            (
                [s[0], s[1], s[2]],
                if c.model == "resnet50" || c.model == "alexnet" {
                    1000
                } else {
                    10
                },
            )
        }
        d => bail!("--dataset {d}: image models train on fashion-mnist, cifar10 or synthetic"),
    })
}

/// The model/dataset combination is one we can build, and the sequence options fit it.
pub fn check(c: &Config) -> Result<()> {
    let kind = kind_of(&c.model)?;
    match kind {
        Kind::Image => {
            for (flag, set) in [
                ("--hidden", c.hidden.is_some()),
                ("--layers", c.layers.is_some()),
                ("--dropout", c.dropout.is_some()),
            ] {
                if set {
                    bail!(
                        "{flag} is for the language and speech models, not --model {}",
                        c.model
                    );
                }
            }
            check_image(c)?
        }
        Kind::Language => {
            if !["kjv", "ptb", "synthetic"].contains(&c.dataset.as_str()) {
                bail!(
                    "--dataset {}: language models train on kjv, ptb or synthetic",
                    c.dataset
                );
            }
            if c.layers.is_some_and(|l| l != 2) {
                bail!("--layers: the language models have the papers' 2 LSTM layers");
            }
            if c.model == "char_lstm" && c.hidden.is_some() {
                bail!("--hidden: char_lstm is SBC's fixed 2 × 200 network");
            }
            if c.model == "char_lstm" && c.dataset == "synthetic" {
                bail!("--model char_lstm needs a character corpus (--dataset kjv or ptb)");
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
            if c.dropout.is_some() {
                bail!("--dropout: the speech models have no dropout");
            }
        }
    }
    if c.hidden == Some(0) || c.layers == Some(0) {
        bail!("--hidden and --layers must be at least 1");
    }
    if c.dropout.is_some_and(|d| !(0.0..1.0).contains(&d)) {
        bail!("--dropout must be in [0, 1)");
    }
    Ok(())
}

fn check_image(c: &Config) -> Result<()> {
    let ([ch, h, w], _) = image_shape(c)?;
    let fixed = |want: [usize; 3]| -> Result<()> {
        if [ch, h, w] != want {
            bail!(
                "--model {} expects {:?} inputs, but --dataset {} gives {:?}",
                c.model,
                want,
                c.dataset,
                [ch, h, w]
            );
        }
        Ok(())
    };
    match c.model.as_str() {
        "vgg16" => fixed([3, 32, 32])?,
        "alexnet" => fixed([3, 227, 227])?,
        "resnet50" => fixed([3, 224, 224])?,
        "lenet5" if h != 28 || w != 28 => bail!(
            "--model lenet5 expects 28×28 inputs, --dataset {} gives {h}×{w}",
            c.dataset
        ),
        _ => {}
    }
    Ok(())
}

fn build_image_model(c: &Config, channels: usize, classes: usize) -> Result<Box<dyn Module>> {
    let mut rng = Rng::new(c.seed);
    let m: Box<dyn Module> = match c.model.as_str() {
        "lenet5" => Box::new(nn::models::lenet5_caffe(channels, classes, &mut rng)?),
        "vgg16" => Box::new(nn::models::vgg16_cifar(classes, &mut rng)?),
        "alexnet" => Box::new(nn::models::alexnet_caffe(classes, &mut rng)?),
        "resnet50" => Box::new(nn::models::resnet50(classes, &mut rng)?),
        name => {
            let depth: usize = name
                .strip_prefix("resnet")
                .and_then(|d| d.parse().ok())
                .with_context(|| format!("model {name}"))?;
            Box::new(nn::models::resnet_cifar(
                depth, channels, classes, &mut rng,
            )?)
        }
    };
    Ok(m)
}

fn limit<D: Dataset + 'static>(ds: D, n: Option<usize>) -> Arc<dyn Dataset> {
    match n {
        Some(n) if n < ds.len() => Arc::new(Subset { inner: ds, n }),
        _ => Arc::new(ds),
    }
}

/// The first `n` samples of a dataset (evaluation on part of a test set).
struct Subset<D> {
    inner: D,
    n: usize,
}

impl<D: Dataset> Dataset for Subset<D> {
    fn len(&self) -> usize {
        self.n
    }
    fn batch(&self, indices: &[usize], rng: &mut Rng) -> data::Result<data::Batch> {
        self.inner.batch(indices, rng)
    }
}

fn image_data(c: &Config, [ch, h, w]: [usize; 3], classes: usize) -> Result<(Split, Split)> {
    Ok(match c.dataset.as_str() {
        "synthetic" => (
            Split::Samples(Arc::new(SyntheticImages {
                n: c.synthetic_samples,
                shape: [ch, h, w],
                classes,
                seed: c.seed,
            })),
            Split::Samples(Arc::new(SyntheticImages {
                n: c.eval_samples.unwrap_or(1024),
                shape: [ch, h, w],
                classes,
                seed: c.seed ^ 0x5EED,
            })),
        ),
        "fashion-mnist" => {
            let dir = c
                .data_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(data::prepare::FASHION_MNIST_SYSTEM_DIR));
            let file = |n: &str| dir.join(n);
            let missing = || {
                format!("Fashion-MNIST not found in {}: `apt-get install dataset-fashion-mnist`, or --data-dir DIR with the four IDX files", dir.display())
            };
            let train = data::read_mnist(
                &file("train-images-idx3-ubyte.gz"),
                &file("train-labels-idx1-ubyte.gz"),
                10,
            )
            .with_context(missing)?;
            let test = data::read_mnist(
                &file("t10k-images-idx3-ubyte.gz"),
                &file("t10k-labels-idx1-ubyte.gz"),
                10,
            )
            .with_context(missing)?
            .with_stats(train.mean.clone(), train.std.clone());
            (
                Split::Samples(Arc::new(train)),
                Split::Samples(limit::<ImageDataset>(test, c.eval_samples)),
            )
        }
        "cifar10" => {
            let dir = c.data_dir.clone().context("--dataset cifar10 needs --data-dir (the directory of data_batch_1.bin ... test_batch.bin)")?;
            let names: Vec<PathBuf> = (1..=5)
                .map(|i| dir.join(format!("data_batch_{i}.bin")))
                .collect();
            let refs: Vec<&std::path::Path> = names.iter().map(|p| p.as_path()).collect();
            let train = data::read_cifar10(&refs)?.with_augment(data::Augment::cifar());
            let test = data::read_cifar10(&[dir.join("test_batch.bin").as_path()])?
                .with_stats(train.mean.clone(), train.std.clone());
            (
                Split::Samples(Arc::new(train)),
                Split::Samples(limit::<ImageDataset>(test, c.eval_samples)),
            )
        }
        d => bail!("--dataset {d}"),
    })
}

/// Token streams (train, test) and the vocabulary size.
fn text_data(c: &Config) -> Result<(Vec<u32>, Vec<u32>, usize)> {
    if c.dataset == "synthetic" {
        let stream = |n: usize, seed: u64| {
            data::SyntheticTokens {
                n,
                vocab: SYNTHETIC_VOCAB,
                seed,
            }
            .stream()
        };
        // One bigram table (the seed), two stretches of its text.
        let all = stream(c.synthetic_samples + c.eval_samples.unwrap_or(4096), c.seed);
        let (train, test) = all.split_at(c.synthetic_samples);
        return Ok((train.to_vec(), test.to_vec(), SYNTHETIC_VOCAB));
    }
    let dir = match (&c.data_dir, c.dataset.as_str()) {
        (Some(d), _) => d.clone(),
        (None, "kjv") => PathBuf::from(KJV_DEFAULT_DIR),
        (None, d) => bail!("--dataset {d} needs --data-dir (the directory of ptb.train.txt, ptb.valid.txt, ptb.test.txt)"),
    };
    let prefix = if c.model == "char_lstm" {
        "ptb.char"
    } else {
        "ptb"
    };
    let corpus = data::TextCorpus::load(&dir, prefix).with_context(|| {
        format!(
            "reading {prefix}.{{train,valid,test}}.txt in {} (for the King James Bible: apt-get install bible-kjv, then cargo run --release -p data --bin datasets -- prepare kjv --out {})",
            dir.display(),
            dir.display()
        )
    })?;
    let mut test = corpus.test;
    if let Some(n) = c.eval_samples {
        test.truncate(n);
    }
    Ok((corpus.train, test, corpus.vocab.len()))
}

fn speech_data(c: &Config) -> Result<(Split, Split)> {
    if c.dataset == "synthetic" {
        let make = |n: usize, seed: u64| -> Arc<dyn Dataset> {
            Arc::new(data::SyntheticSpeech {
                n,
                bins: nn::models::SPECTROGRAM_BINS,
                max_frames: 120,
                classes: SPEECH_CLASSES,
                seed,
            })
        };
        return Ok((
            Split::Samples(make(c.synthetic_samples, c.seed)),
            Split::Samples(make(c.eval_samples.unwrap_or(64), c.seed ^ 0x5EED)),
        ));
    }
    let dir = match (&c.data_dir, c.dataset.as_str()) {
        (Some(d), _) => d.clone(),
        (None, "speech") => PathBuf::from(SPEECH_DEFAULT_DIR),
        (None, d) => bail!("--dataset {d} needs --data-dir (the directory of train_manifest.csv and test_manifest.csv)"),
    };
    let load = |split: &str| {
        let manifest = dir.join(format!("{split}_manifest.csv"));
        data::speech::SpeechDataset::load(&manifest).with_context(|| {
            format!(
                "reading {} (for the synthesized corpus: apt-get install espeak-ng, then cargo run --release -p data --bin datasets -- prepare speech --out {})",
                manifest.display(),
                dir.display()
            )
        })
    };
    let train = load("train")?;
    let test = load("test")?;
    Ok((
        Split::Samples(Arc::new(train)),
        Split::Samples(limit(test, c.eval_samples)),
    ))
}

impl Task {
    /// The task of `c`, its model built on `device` (initial values are drawn on the CPU
    /// from the seed, so every device starts from the same model).
    pub fn new(c: &Config, device: Device) -> Result<Task> {
        check(c)?;
        let kind = kind_of(&c.model)?;
        let on_device = |f: &dyn Fn() -> Result<Model>| {
            nn::init::with_default_device(device, f)
                .with_context(|| format!("building {} on {device:?}", c.model))
        };
        let (model, train, test, metric_name) = match kind {
            Kind::Image => {
                let (shape, classes) = image_shape(c)?;
                let (train, test) = image_data(c, shape, classes)?;
                let model =
                    on_device(&|| Ok(Model::Image(build_image_model(c, shape[0], classes)?)))?;
                (model, train, test, "accuracy")
            }
            Kind::Language => {
                let (train, test, vocab) = text_data(c)?;
                let model = on_device(&|| {
                    let mut rng = Rng::new(c.seed);
                    let m = match c.model.as_str() {
                        "char_lstm" => nn::models::char_lstm(vocab, &mut rng)?,
                        name => {
                            let paper = if name == "lstm_lm" { 1500 } else { 650 };
                            let hidden = c.hidden.unwrap_or(paper);
                            // The papers' dropout for their sizes; none for others unless asked.
                            let dropout = c.dropout.unwrap_or(match hidden {
                                1500 => 0.65,
                                650 => 0.5,
                                _ => 0.0,
                            });
                            nn::models::lstm_lm(vocab, hidden, dropout, &mut rng)?
                        }
                    };
                    Ok(Model::Language(m))
                })?;
                (
                    model,
                    Split::Tokens(Arc::new(train)),
                    Split::Tokens(Arc::new(test)),
                    "perplexity",
                )
            }
            Kind::Speech => {
                let (train, test) = speech_data(c)?;
                let model = on_device(&|| {
                    let mut rng = Rng::new(c.seed);
                    let (rnn, layers, hidden) = match c.model.as_str() {
                        "deepspeech" => (RnnKind::Gru, 7, 1200),
                        _ => (RnnKind::Lstm, 5, 800),
                    };
                    Ok(Model::Speech(nn::models::deepspeech(
                        rnn,
                        c.layers.unwrap_or(layers),
                        c.hidden.unwrap_or(hidden),
                        SPEECH_CLASSES,
                        &mut rng,
                    )?))
                })?;
                (model, train, test, "wer")
            }
        };
        Ok(Task {
            model,
            kind,
            device,
            train,
            test,
            metric_name,
            bptt: c.bptt,
            state: None,
        })
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
                Ok(ctc_loss(
                    &log_probs,
                    &targets,
                    &lengths,
                    CtcReduction::Mean,
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
        };
        let mut ctx = Ctx::eval();
        no_grad(|| -> Result<()> {
            match (&self.model, &self.test) {
                (Model::Language(m), Split::Tokens(stream)) => {
                    // Each rank a contiguous share in 10 streams, the state carried.
                    let tokens = match TokenBatches::new(stream, EVAL_STREAMS, world, rank) {
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
                            }
                            Model::Speech(m) => {
                                let (log_probs, targets, lengths) =
                                    speech_outputs(m, &batch, &inputs, &mut ctx)?;
                                let n = targets.len() as f64;
                                s.loss_sum += ctc_loss(
                                    &log_probs,
                                    &targets,
                                    &lengths,
                                    CtcReduction::Mean,
                                    true,
                                )?
                                .to_scalar::<f32>()?
                                    as f64
                                    * n;
                                s.loss_count += n;
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

fn detach(s: &RnnState) -> RnnState {
    RnnState {
        h: s.h.detach(),
        c: s.c.as_ref().map(|c| c.detach()),
    }
}

/// Log-probabilities `[T', N, classes]`, each sample's labels and its output frame count.
fn speech_outputs(
    m: &DeepSpeech,
    batch: &Batch,
    inputs: &Tensor,
    ctx: &mut Ctx,
) -> Result<(Tensor, Vec<Vec<u32>>, Vec<usize>)> {
    let logits = m.forward(inputs, ctx)?;
    let log_probs = logits.log_softmax(2)?;
    let frames = log_probs.dims()[0];
    let labels = batch.labels.to_vec::<u32>()?;
    let mut targets = Vec::with_capacity(batch.label_lengths.len());
    let mut at = 0;
    for &len in &batch.label_lengths {
        let l = labels
            .get(at..at + len)
            .context("the batch's label lengths exceed its labels")?;
        targets.push(l.to_vec());
        at += len;
    }
    // The first convolution has stride 2 in time: T' = ⌈T / 2⌉.
    let lengths = batch
        .input_lengths
        .iter()
        .map(|&t| t.div_ceil(2).min(frames))
        .collect();
    Ok((log_probs, targets, lengths))
}
