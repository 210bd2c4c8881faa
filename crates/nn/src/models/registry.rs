//! The models by name: one entry per model in [`MODELS`] carries everything the trainer,
//! the table binaries and `--help` need to know about it — its kind of task, the input
//! its paper gives it and the inputs it accepts, its outputs, the sizes a user may change,
//! the learning rate its recipe uses, and its constructor. Adding a model is its file
//! (the network) and one entry here.

use super::{
    alexnet_caffe, char_lstm, lenet5_caffe, lstm_lm, lstm_lm_dropout, resnet50, resnet_cifar,
    vgg16_cifar, DeepSpeech, LstmLm, PAPER_CHANNELS,
};
use crate::layers::RnnKind;
use crate::Module;
use tensor::{Error, Result, Rng};

/// The kind of task a model is trained on: each has its data, loss and metric in the
/// trainer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Image classification: cross-entropy, accuracy.
    Image,
    /// Language modelling over words or characters: truncated BPTT, perplexity.
    Language,
    /// Speech recognition over spectrograms: CTC, word error rate.
    Speech,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Image => "image",
            Kind::Language => "language",
            Kind::Speech => "speech",
        }
    }
}

/// What a model reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Images `[C, H, W]`: `paper` is the input of its paper (and of synthetic data),
    /// `fit` which datasets' images it accepts.
    Image { paper: [usize; 3], fit: Fit },
    /// Token streams: words, or characters.
    Tokens { characters: bool },
    /// Spectrogram frames.
    Spectrogram,
}

/// The image shapes a model accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// Any `[C, H, W]` (global average pooling before the classifier).
    Any,
    /// Any number of channels at this height and width (a flattening classifier).
    Size(usize, usize),
    /// Exactly this `[C, H, W]`.
    Exactly([usize; 3]),
}

/// A size of the network that a user may set (`--hidden`, `--layers`, `--dropout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Knob {
    Hidden,
    Layers,
    Dropout,
    /// Channels of a speech model's convolutions.
    Channels,
}

/// What a model is built for: the dataset's input and outputs, and the sizes a user set
/// (None: the paper's).
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// `[C, H, W]` of an image model's input (unused by the others).
    pub image: [usize; 3],
    /// Classes, vocabulary, or output characters.
    pub outputs: usize,
    pub hidden: Option<usize>,
    pub layers: Option<usize>,
    pub dropout: Option<f64>,
    /// Channels of a speech model's convolutions.
    pub channels: Option<usize>,
}

/// A built model, typed by its kind: the trainer drives a language model's state and a
/// speech model's frame lengths itself.
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

    pub fn into_module(self) -> Box<dyn Module> {
        match self {
            Model::Image(m) => m,
            Model::Language(m) => Box::new(m),
            Model::Speech(m) => Box::new(m),
        }
    }
}

/// One model.
pub struct ModelInfo {
    pub name: &'static str,
    pub kind: Kind,
    /// One line: the network and the paper it is from.
    pub about: &'static str,
    pub input: Input,
    /// The paper's classes, vocabulary or output characters.
    pub outputs: usize,
    /// The sizes a user may change.
    pub knobs: &'static [Knob],
    /// The learning rate its recipe trains it at, and whose recipe, where that is below
    /// the trainer's default of 0.1 (which diverges for these).
    pub usual_lr: Option<(f64, &'static str)>,
    pub build: fn(&Spec, &mut Rng) -> Result<Model>,
}

impl ModelInfo {
    /// The paper's configuration.
    pub fn paper_spec(&self) -> Spec {
        Spec {
            image: self.paper_image().unwrap_or([0; 3]),
            outputs: self.outputs,
            hidden: None,
            layers: None,
            dropout: None,
            channels: None,
        }
    }

    /// The paper's `[C, H, W]` input of an image model; None for the others.
    pub fn paper_image(&self) -> Option<[usize; 3]> {
        match self.input {
            Input::Image { paper, .. } => Some(paper),
            _ => None,
        }
    }

    /// Whether it is a language model over characters (it reads a corpus's character
    /// files).
    pub fn reads_characters(&self) -> bool {
        self.input == Input::Tokens { characters: true }
    }

    /// Whether a user may set `knob`.
    pub fn takes(&self, knob: Knob) -> bool {
        self.knobs.contains(&knob)
    }
}

fn image(m: impl Module + 'static) -> Model {
    Model::Image(Box::new(m))
}

/// `resnetN` for the CIFAR depths: one entry each, the depth read from the name.
macro_rules! resnet_cifar_entry {
    ($name:literal, $depth:literal) => {
        ModelInfo {
            name: $name,
            kind: Kind::Image,
            about: concat!(
                "ResNet-",
                $depth,
                " for CIFAR (He et al. 2016, option A shortcuts); any image size"
            ),
            input: Input::Image {
                paper: [3, 32, 32],
                fit: Fit::Any,
            },
            outputs: 10,
            knobs: &[],
            usual_lr: None,
            build: |s, rng| Ok(image(resnet_cifar($depth, s.image[0], s.outputs, rng)?)),
        }
    };
}

/// Every model, in the order `--help` lists them.
pub const MODELS: &[ModelInfo] = &[
    resnet_cifar_entry!("resnet20", 20),
    resnet_cifar_entry!("resnet32", 32),
    resnet_cifar_entry!("resnet44", 44),
    resnet_cifar_entry!("resnet56", 56),
    resnet_cifar_entry!("resnet110", 110),
    ModelInfo {
        name: "lenet5",
        kind: Kind::Image,
        about: "Caffe's LeNet-5 (SBC's LeNet5-Caffe); 28×28 images",
        input: Input::Image {
            paper: [1, 28, 28],
            fit: Fit::Size(28, 28),
        },
        outputs: 10,
        knobs: &[],
        usual_lr: Some((0.01, "Caffe's LeNet solver")),
        build: |s, rng| Ok(image(lenet5_caffe(s.image[0], s.outputs, rng)?)),
    },
    ModelInfo {
        name: "vgg16",
        kind: Kind::Image,
        about: "VGG-16 with batch norm for CIFAR (gTop-k's); 3×32×32 images",
        input: Input::Image {
            paper: [3, 32, 32],
            fit: Fit::Exactly([3, 32, 32]),
        },
        outputs: 10,
        knobs: &[],
        usual_lr: None,
        build: |s, rng| Ok(image(vgg16_cifar(s.outputs, rng)?)),
    },
    ModelInfo {
        name: "alexnet",
        kind: Kind::Image,
        about: "Caffe's BVLC AlexNet (DGC's 232.56 MiB gradient); 3×227×227 images",
        input: Input::Image {
            paper: [3, 227, 227],
            fit: Fit::Exactly([3, 227, 227]),
        },
        outputs: 1000,
        knobs: &[],
        usual_lr: Some((0.01, "Krizhevsky et al. for 128 images a step")),
        build: |s, rng| Ok(image(alexnet_caffe(s.outputs, rng)?)),
    },
    ModelInfo {
        name: "resnet50",
        kind: Kind::Image,
        about: "torchvision's ResNet-50 v1.5 (DGC's 97.49 MiB gradient); 3×224×224 images",
        input: Input::Image {
            paper: [3, 224, 224],
            fit: Fit::Exactly([3, 224, 224]),
        },
        outputs: 1000,
        knobs: &[],
        usual_lr: None,
        build: |s, rng| Ok(image(resnet50(s.outputs, rng)?)),
    },
    ModelInfo {
        name: "lstm_lm",
        kind: Kind::Language,
        about: "2-layer LSTM word model of 1500 units, tied, dropout 0.65 (DGC's PTB model)",
        input: Input::Tokens { characters: false },
        outputs: 10_000,
        knobs: &[Knob::Hidden, Knob::Dropout],
        usual_lr: None,
        build: |s, rng| word_lm(s, 1500, rng),
    },
    ModelInfo {
        name: "lstm_lm_medium",
        kind: Kind::Language,
        about: "2-layer LSTM word model of 650 units, tied, dropout 0.5 (Zaremba et al.'s medium)",
        input: Input::Tokens { characters: false },
        outputs: 10_000,
        knobs: &[Knob::Hidden, Knob::Dropout],
        usual_lr: None,
        build: |s, rng| word_lm(s, 650, rng),
    },
    ModelInfo {
        name: "char_lstm",
        kind: Kind::Language,
        about: "2 × 200 LSTM character model, untied, no dropout (SBC's)",
        input: Input::Tokens { characters: true },
        outputs: 98,
        knobs: &[],
        usual_lr: None,
        build: |s, rng| Ok(Model::Language(char_lstm(s.outputs, rng)?)),
    },
    ModelInfo {
        name: "deepspeech",
        kind: Kind::Speech,
        about: "DeepSpeech: 7 bidirectional GRU layers of 1200 over spectrograms (deepspeech.pytorch, as DGC)",
        input: Input::Spectrogram,
        outputs: 29,
        knobs: &[Knob::Hidden, Knob::Layers, Knob::Channels],
        usual_lr: Some((3e-4, "deepspeech.pytorch")),
        build: |s, rng| speech(s, RnnKind::Gru, 7, 1200, rng),
    },
    ModelInfo {
        name: "an4_lstm",
        kind: Kind::Speech,
        about: "5 bidirectional LSTM layers of 800 over spectrograms (DGC's AN4 model)",
        input: Input::Spectrogram,
        outputs: 29,
        knobs: &[Knob::Hidden, Knob::Layers, Knob::Channels],
        usual_lr: Some((3e-4, "deepspeech.pytorch")),
        build: |s, rng| speech(s, RnnKind::Lstm, 5, 800, rng),
    },
];

/// A tied 2-layer word LSTM of `s.hidden` units (default `paper`), at the papers'
/// dropout for their sizes and none for others unless asked.
fn word_lm(s: &Spec, paper: usize, rng: &mut Rng) -> Result<Model> {
    let hidden = s.hidden.unwrap_or(paper);
    let dropout = s.dropout.unwrap_or(lstm_lm_dropout(hidden));
    Ok(Model::Language(lstm_lm(s.outputs, hidden, dropout, rng)?))
}

fn speech(s: &Spec, rnn: RnnKind, layers: usize, hidden: usize, rng: &mut Rng) -> Result<Model> {
    Ok(Model::Speech(DeepSpeech::with_channels(
        rnn,
        s.layers.unwrap_or(layers),
        s.hidden.unwrap_or(hidden),
        s.channels.unwrap_or(PAPER_CHANNELS),
        s.outputs,
        rng,
    )?))
}

/// The entry of `name`, or an error that lists the models.
pub fn find(name: &str) -> Result<&'static ModelInfo> {
    MODELS.iter().find(|m| m.name == name).ok_or_else(|| {
        Error::msg(format!(
            "unknown model {name:?}; known models: {}",
            names().join(", ")
        ))
    })
}

/// Every model's name, in [`MODELS`]' order.
pub fn names() -> Vec<&'static str> {
    MODELS.iter().map(|m| m.name).collect()
}

/// The names of the models of one kind.
pub fn names_of(kind: Kind) -> Vec<&'static str> {
    MODELS
        .iter()
        .filter(|m| m.kind == kind)
        .map(|m| m.name)
        .collect()
}

/// `name` in its paper configuration (see each entry's `about`).
pub fn by_name(name: &str, rng: &mut Rng) -> Result<Box<dyn Module>> {
    let info = find(name)?;
    Ok((info.build)(&info.paper_spec(), rng)?.into_module())
}

/// Per-sample input shape of an image model in its paper (`[C, H, W]`); None for the
/// sequence models and unknown names.
pub fn input_shape(name: &str) -> Option<Vec<usize>> {
    find(name).ok()?.paper_image().map(|s| s.to_vec())
}

/// The models, one line each, grouped by kind: `--help`'s text.
pub fn help_text() -> String {
    let mut out = String::new();
    for kind in [Kind::Image, Kind::Language, Kind::Speech] {
        out.push_str(&format!("{} models:\n", kind.name()));
        for m in MODELS.iter().filter(|m| m.kind == kind) {
            out.push_str(&format!("  {:<15} {}\n", m.name, m.about));
        }
    }
    out
}
