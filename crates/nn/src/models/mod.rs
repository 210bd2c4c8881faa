//! The models of the five papers, each a function of its configuration that builds a
//! [`Module`] with PyTorch-compatible parameter names from a seeded `Rng`. Every file's
//! comment gives the source architecture and the parameter count; `tests/models.rs`
//! asserts the counts the papers imply.

mod alexnet;
mod deepspeech;
mod lenet;
mod lstm_lm;
mod resnet_cifar;
mod resnet_imagenet;
mod vgg;

pub use alexnet::{alexnet_caffe, AlexNet};
pub use deepspeech::{conv_rows, deepspeech, DeepSpeech, SPECTROGRAM_BINS};
pub use lenet::{lenet5_caffe, LeNet5};
pub use lstm_lm::{char_lstm, lstm_lm, lstm_lm_dropout, LstmLm};
pub use resnet_cifar::{resnet_cifar, BasicBlock, ResNetCifar};
pub use resnet_imagenet::{resnet50, ResNet50};
pub use vgg::{vgg16_cifar, Vgg};

use crate::layers::RnnKind;
use crate::Module;
use tensor::{Error, Result, Rng};

/// Names accepted by [`by_name`].
pub const NAMES: [&str; 14] = [
    "resnet20",
    "resnet32",
    "resnet44",
    "resnet56",
    "resnet110",
    "resnet50",
    "alexnet",
    "vgg16",
    "lenet5",
    "lstm_lm",
    "lstm_lm_medium",
    "char_lstm",
    "deepspeech",
    "an4_lstm",
];

/// A model in its paper configuration: CIFAR ResNets and VGG-16 with 3 input channels and
/// 10 classes, ResNet-50 and AlexNet with 1000, LeNet-5 with 1 channel and 10 classes, the
/// language models with a 10,000-word vocabulary (CharLSTM: 98 characters), DeepSpeech
/// with 29 output characters.
pub fn by_name(name: &str, rng: &mut Rng) -> Result<Box<dyn Module>> {
    Ok(match name {
        "resnet20" | "resnet32" | "resnet44" | "resnet56" | "resnet110" => {
            let depth = name["resnet".len()..]
                .parse()
                .map_err(|_| Error::msg(format!("bad model name {name}")))?;
            Box::new(resnet_cifar(depth, 3, 10, rng)?)
        }
        "resnet50" => Box::new(resnet50(1000, rng)?),
        "alexnet" => Box::new(alexnet_caffe(1000, rng)?),
        "vgg16" => Box::new(vgg16_cifar(10, rng)?),
        "lenet5" => Box::new(lenet5_caffe(1, 10, rng)?),
        "lstm_lm" => Box::new(lstm_lm(10_000, 1500, lstm_lm_dropout(1500), rng)?),
        "lstm_lm_medium" => Box::new(lstm_lm(10_000, 650, lstm_lm_dropout(650), rng)?),
        "char_lstm" => Box::new(char_lstm(98, rng)?),
        "deepspeech" => Box::new(deepspeech(RnnKind::Gru, 7, 1200, 29, rng)?),
        "an4_lstm" => Box::new(deepspeech(RnnKind::Lstm, 5, 800, 29, rng)?),
        other => {
            return Err(Error::msg(format!(
                "unknown model {other:?}; known models: {}",
                NAMES.join(", ")
            )))
        }
    })
}

/// Per-sample input shape of the image models (`[C, H, W]`); None for sequence models.
pub fn input_shape(name: &str) -> Option<Vec<usize>> {
    match name {
        "resnet20" | "resnet32" | "resnet44" | "resnet56" | "resnet110" | "vgg16" => {
            Some(vec![3, 32, 32])
        }
        "resnet50" => Some(vec![3, 224, 224]),
        "alexnet" => Some(vec![3, 227, 227]),
        "lenet5" => Some(vec![1, 28, 28]),
        _ => None,
    }
}
