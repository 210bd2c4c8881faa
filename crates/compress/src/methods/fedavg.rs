//! Federated Averaging (McMahan et al.; the communication-delay baseline of paper 003):
//! every rank applies its own gradients for `delay` steps, then the parameters are
//! averaged densely.
//!
//! On tensors the same: the local steps hand the gradient back untouched, and the
//! averaging is the group's allreduce of the weights in place on their device.

use crate::exchange::{
    average_in_place, average_tensor_in_place, check_len, check_numel, due, local_step_tensor,
    Meter,
};
use crate::method::{
    HostAfterStep, HostExchange, Method, ParamSpec, StepInfo, TensorAfterStep, TensorExchange,
    TensorUpdate, Update, UpdateKind, WireStats,
};
use crate::{CompressError, Result};
use tensor::Device;

pub struct FedAvg {
    delay: usize,
    step: u64,
    sizes: Vec<usize>,
}

impl FedAvg {
    pub fn new(delay: usize) -> Result<Self> {
        if delay == 0 {
            return Err(CompressError::Config(
                "fedavg: delay must be at least 1".into(),
            ));
        }
        Ok(FedAvg {
            delay,
            step: 0,
            sizes: Vec::new(),
        })
    }
}

impl Method for FedAvg {
    fn name(&self) -> &'static str {
        "fedavg"
    }
    fn describe(&self) -> String {
        format!("fedavg(delay={})", self.delay)
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.sizes = params.iter().map(|p| p.numel()).collect();
        Ok(())
    }
    fn begin_step(&mut self, info: StepInfo) {
        self.step = info.step;
    }
    fn exchange(&mut self, x: HostExchange<'_>) -> Result<Update> {
        let (index, grad) = (x.index, x.grad);
        let n = check_len("fedavg", index, self.sizes.get(index).copied(), &[grad])?;
        Ok(Meter::new(n).update(grad.to_vec(), UpdateKind::Gradient))
    }
    /// Nothing to move: FedAvg keeps no per-parameter state.
    fn place(&mut self, _device: Device) -> Result<()> {
        Ok(())
    }
    fn exchange_tensor(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        let (index, grad) = (x.index, x.grad);
        check_numel("fedavg", index, self.sizes.get(index).copied(), grad)?;
        Ok(local_step_tensor(grad))
    }
    fn after_step_tensor(&mut self, x: TensorAfterStep<'_>) -> Result<Option<WireStats>> {
        let (group, index, weights) = (x.comm, x.index, x.weights);
        if !due(self.after_step_every(), self.step) {
            return Ok(None);
        }
        check_numel("fedavg", index, self.sizes.get(index).copied(), weights)?;
        average_tensor_in_place(group, weights).map(Some)
    }
    fn after_step_every(&self) -> Option<u64> {
        Some(self.delay as u64)
    }
    fn after_step(&mut self, x: HostAfterStep<'_>) -> Result<Option<WireStats>> {
        let (comm, index, weights) = (x.comm, x.index, x.weights);
        if !due(self.after_step_every(), self.step) {
            return Ok(None);
        }
        check_len("fedavg", index, self.sizes.get(index).copied(), &[weights])?;
        average_in_place(comm, weights).map(Some)
    }
}
