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

use tensor::{GradStore, Result, Tensor};

pub trait Optimizer: Send {
    /// Applies `grad` to parameter number `index` (its position in the model's parameter
    /// list, which keys the optimizer state).
    fn update(&mut self, index: usize, param: &Tensor, grad: &Tensor) -> Result<()>;
    fn lr(&self) -> f64;
    fn set_lr(&mut self, lr: f64);
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
