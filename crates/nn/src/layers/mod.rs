//! Layers, one file per family. Each owns its parameters as autograd variables and names
//! them as PyTorch does (`weight`, `bias`, `running_mean`, …) so counts and checkpoints
//! line up with the reference implementations.

mod activation;
mod conv;
mod dropout;
mod embedding;
mod linear;
mod norm;
mod pool;
mod rnn;

pub use activation::{Activation, Flatten};
pub use conv::Conv2d;
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use linear::Linear;
pub use norm::{BatchNorm, LayerNorm, LocalResponseNorm};
pub use pool::{AdaptiveAvgPool2d, AvgPool2d, MaxPool2d};
pub use rnn::{Rnn, RnnKind, RnnState};
