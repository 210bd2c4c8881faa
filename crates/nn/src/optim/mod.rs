//! Optimizers, gradient clipping and learning-rate schedules.
//!
//! Optimizers update one parameter at a time (`update`), so the trainer can apply each
//! parameter's update as soon as its gradient exchange finishes; `step` does all of them
//! from a `GradStore`. Updates follow PyTorch's rules exactly (tested against it).

mod adam;
mod clip;
mod schedule;
mod sgd;

pub use adam::Adam;
pub use clip::clip_grad_norm;
pub use schedule::{LrSchedule, ReduceOnPlateau};
pub use sgd::Sgd;

use tensor::{Error, GradStore, Result, Tensor};

/// One piece of an optimizer's per-parameter state: (parameter index, key, tensor).
pub type StateEntry = (usize, &'static str, Tensor);

pub trait Optimizer: Send {
    /// Applies `grad` to parameter number `index` (its position in the model's parameter
    /// list, which keys the optimizer state).
    fn update(&mut self, index: usize, param: &Tensor, grad: &Tensor) -> Result<()>;
    fn lr(&self) -> f64;
    fn set_lr(&mut self, lr: f64);
    /// The optimizer's name (`sgd`, `adam`), for messages and checkpoints.
    fn name(&self) -> &'static str;
    /// Everything a resumed run needs to continue bit for bit, by parameter index (in
    /// index order) and key: SGD's `momentum`; Adam's `m`, `v` and `step`.
    fn state(&self) -> Vec<StateEntry>;
    /// Restores one entry of [`Optimizer::state`] for parameter `index`, whose shape is
    /// `param_dims`; a key this optimizer does not keep (a checkpoint of another
    /// optimizer), or an entry of the wrong shape, is an error.
    fn load_state(
        &mut self,
        index: usize,
        key: &str,
        t: Tensor,
        param_dims: &[usize],
    ) -> Result<()>;
    /// Momentum factor masking: zeros parameter `index`'s momentum (Adam: its first
    /// moment) at `positions`, flat in its element order. Nothing to do before the
    /// parameter's first update.
    fn mask_momentum(&mut self, index: usize, positions: &[usize]) -> Result<()>;
    /// Updates every parameter that has a gradient in `grads`.
    fn step(&mut self, params: &[Tensor], grads: &GradStore) -> Result<()> {
        for (i, p) in params.iter().enumerate() {
            if let Some(g) = grads.get(p) {
                self.update(i, p, g)?;
            }
        }
        Ok(())
    }
}

/// `t` with zeros at `positions`, on `t`'s device and in its dtype. Goes through the host:
/// masking runs once per exchange of a method with communication delay, not per step.
pub(crate) fn zeroed_at(t: &Tensor, positions: &[usize], what: &str) -> Result<Tensor> {
    // f64 holds every float dtype exactly, so the round trip changes only the zeros.
    let mut host = t.to_vec_f64()?;
    let n = host.len();
    for &p in positions {
        *host.get_mut(p).ok_or_else(|| {
            Error::msg(format!(
                "{what}: mask position {p} in a tensor of {n} elements"
            ))
        })? = 0.0;
    }
    Tensor::from_vec(host, t.dims().to_vec(), t.device())?.to_dtype(t.dtype())
}

/// Checks that a restored per-parameter state tensor has its parameter's shape.
pub(crate) fn check_state_shape(
    what: &str,
    index: usize,
    t: &Tensor,
    param_dims: &[usize],
) -> Result<()> {
    if t.dims() == param_dims {
        Ok(())
    } else {
        Err(Error::msg(format!(
            "{what} of parameter {index} has shape {:?}, the parameter {param_dims:?}",
            t.dims()
        )))
    }
}
