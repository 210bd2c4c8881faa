//! Parameter initialisation as the papers' reference frameworks do it, always from a
//! seeded `Rng` so a seed reproduces a model exactly.

use std::cell::Cell;
use tensor::{DType, Device, Result, Rng, Tensor};

thread_local! {
    static DEFAULT_DTYPE: Cell<DType> = const { Cell::new(DType::F32) };
    static DEFAULT_DEVICE: Cell<Device> = const { Cell::new(Device::Cpu) };
}

/// Runs `f` with the thread-local `key` set to `value`, restoring the previous value
/// afterwards, also when `f` panics.
fn scoped<T: Copy + 'static, R>(
    key: &'static std::thread::LocalKey<Cell<T>>,
    value: T,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore<T: Copy + 'static>(&'static std::thread::LocalKey<Cell<T>>, T);
    impl<T: Copy + 'static> Drop for Restore<T> {
        fn drop(&mut self) {
            self.0.with(|d| d.set(self.1));
        }
    }
    let _restore = Restore(key, key.with(|d| d.replace(value)));
    f()
}

/// The device new parameters and buffers are placed on by this thread (the CPU unless
/// changed with [`with_default_device`]).
pub fn default_device() -> Device {
    DEFAULT_DEVICE.with(|d| d.get())
}

/// Builds with `device` as the device of new parameters and buffers, then restores the
/// previous default. Random initial values are always drawn on the CPU from the seeded
/// `Rng` and then copied, so a seed gives the same model on every device (the GPU-vs-CPU
/// model checks rely on it).
pub fn with_default_device<R>(device: Device, f: impl FnOnce() -> R) -> R {
    scoped(&DEFAULT_DEVICE, device, f)
}

/// Moves a freshly initialised CPU tensor to the default device and makes it a variable.
fn place(t: Tensor) -> Result<Tensor> {
    Ok(t.to_device(default_device())?.to_var())
}

/// The dtype new parameters and buffers get on this thread (f32 unless changed).
pub fn default_dtype() -> DType {
    DEFAULT_DTYPE.with(|d| d.get())
}

/// Builds with `dtype` as the default parameter dtype (f64 for gradient checks), then
/// restores the previous default.
pub fn with_default_dtype<R>(dtype: DType, f: impl FnOnce() -> R) -> R {
    scoped(&DEFAULT_DTYPE, dtype, f)
}

/// He/Kaiming normal for ReLU networks: N(0, 2 / fan), with fan = fan_out as torchvision's
/// ResNets use (`mode='fan_out'`), or fan_in.
pub fn kaiming_normal(shape: &[usize], fan: usize, rng: &mut Rng) -> Result<Tensor> {
    normal(shape, (2.0 / fan.max(1) as f64).sqrt(), rng)
}

/// U(−bound, bound): PyTorch's default for Linear/Conv weights and biases uses
/// bound = 1/√fan_in, and for LSTM/GRU bound = 1/√hidden.
pub fn uniform(shape: &[usize], bound: f64, rng: &mut Rng) -> Result<Tensor> {
    place(Tensor::rand_uniform(
        shape.to_vec(),
        -bound,
        bound,
        default_dtype(),
        Device::Cpu,
        rng,
    )?)
}

pub fn constant(shape: &[usize], value: f64) -> Result<Tensor> {
    Tensor::full(value, shape.to_vec(), default_dtype(), default_device()).map(|t| t.to_var())
}

/// N(0, std²).
pub fn normal(shape: &[usize], std: f64, rng: &mut Rng) -> Result<Tensor> {
    place(Tensor::randn(
        shape.to_vec(),
        0.0,
        std,
        default_dtype(),
        Device::Cpu,
        rng,
    )?)
}

/// fan_in and fan_out of a weight of shape `[out, in, k...]` (a vector `[out]` has fan_in
/// 1; a scalar `[]` has both 1).
pub fn fans(shape: &[usize]) -> (usize, usize) {
    let receptive: usize = shape.iter().skip(2).product();
    (
        shape.get(1).copied().unwrap_or(1) * receptive,
        shape.first().copied().unwrap_or(1) * receptive,
    )
}
