//! Parameter initialisation as the papers' reference frameworks do it, always from a
//! seeded `Rng` so a seed reproduces a model exactly.

use tensor::{DType, Device, Result, Rng, Tensor};

/// He/Kaiming normal for ReLU networks: N(0, 2 / fan), with fan = fan_out as torchvision's
/// ResNets use (`mode='fan_out'`), or fan_in.
pub fn kaiming_normal(shape: &[usize], fan: usize, rng: &mut Rng) -> Result<Tensor> {
    let std = (2.0 / fan.max(1) as f64).sqrt();
    Tensor::randn(shape.to_vec(), 0.0, std, DType::F32, Device::Cpu, rng).map(|t| t.to_var())
}

/// U(−bound, bound): PyTorch's default for Linear/Conv weights and biases uses
/// bound = 1/√fan_in, and for LSTM/GRU bound = 1/√hidden.
pub fn uniform(shape: &[usize], bound: f64, rng: &mut Rng) -> Result<Tensor> {
    Tensor::rand_uniform(shape.to_vec(), -bound, bound, DType::F32, Device::Cpu, rng)
        .map(|t| t.to_var())
}

pub fn constant(shape: &[usize], value: f64) -> Result<Tensor> {
    Tensor::full(value, shape.to_vec(), DType::F32, Device::Cpu).map(|t| t.to_var())
}

/// N(0, std²).
pub fn normal(shape: &[usize], std: f64, rng: &mut Rng) -> Result<Tensor> {
    Tensor::randn(shape.to_vec(), 0.0, std, DType::F32, Device::Cpu, rng).map(|t| t.to_var())
}

/// fan_in and fan_out of a weight of shape `[out, in, k...]`.
pub fn fans(shape: &[usize]) -> (usize, usize) {
    let receptive: usize = shape.iter().skip(2).product();
    (
        shape.get(1).copied().unwrap_or(1) * receptive,
        shape[0] * receptive,
    )
}
