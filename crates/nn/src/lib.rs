//! Layers, losses, optimizers and the papers' models, built on `tensor`'s autograd.
//!
//! A [`Module`] computes `forward` and lists its parameters by dotted name
//! (`layer3.2.conv1.weight`), in a fixed order that is the same on every rank: that order
//! is what the gradient exchange iterates over. Running statistics (batch norm) are
//! buffers, listed separately, never exchanged as gradients.

pub mod init;
pub mod layers;
pub mod loss;
pub mod models;
mod module;
pub mod optim;

pub use module::{Ctx, Module, NamedTensor, Sequential};
pub use tensor::{Error, Result, Tensor};
