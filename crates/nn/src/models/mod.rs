//! The models of the five papers, each a function of its configuration that builds a
//! [`Module`] with PyTorch-compatible parameter names from a seeded `Rng`. Every file's
//! comment gives the source architecture and the parameter count; `tests/models.rs`
//! asserts the counts the papers imply. [`MODELS`] is the table of them by name that the
//! trainer, the benchmarks and `--help` read: a new model is its file plus one entry.

mod alexnet;
mod deepspeech;
mod lenet;
mod lstm_lm;
mod registry;
mod resnet_cifar;
mod resnet_imagenet;
mod vgg;

pub use alexnet::{alexnet_caffe, AlexNet};
pub use deepspeech::{conv_rows, deepspeech, DeepSpeech, PAPER_CHANNELS, SPECTROGRAM_BINS};
pub use lenet::{lenet5_caffe, LeNet5};
pub use lstm_lm::{char_lstm, lstm_lm, lstm_lm_dropout, LstmLm};
pub use resnet_cifar::{resnet_cifar, BasicBlock, ResNetCifar};
pub use resnet_imagenet::{resnet50, ResNet50};
pub use vgg::{vgg16_cifar, Vgg};

pub use registry::{
    by_name, find, help_text, input_shape, names, names_of, Fit, Input, Kind, Knob, Model,
    ModelInfo, Spec, MODELS,
};
