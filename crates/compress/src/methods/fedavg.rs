//! Federated Averaging (McMahan et al.; the communication-delay baseline of paper 003):
//! every rank applies its own gradients for `delay` steps, then the parameters are
//! averaged densely.

use crate::exchange::{average_in_place, check_len, due, Meter};
use crate::method::{Method, ParamSpec, StepInfo, Update, UpdateKind, WireStats};
use crate::{CompressError, Result};
use comm::Communicator;

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
    fn exchange(
        &mut self,
        _comm: &mut Communicator,
        index: usize,
        _weights: &[f32],
        grad: &[f32],
    ) -> Result<Update> {
        let n = check_len("fedavg", index, self.sizes.get(index).copied(), &[grad])?;
        Ok(Meter::new(n).update(grad.to_vec(), UpdateKind::Gradient))
    }
    fn after_step_every(&self) -> Option<u64> {
        Some(self.delay as u64)
    }
    fn after_step(
        &mut self,
        comm: &mut Communicator,
        index: usize,
        weights: &mut [f32],
    ) -> Result<Option<WireStats>> {
        if !due(self.after_step_every(), self.step) {
            return Ok(None);
        }
        check_len("fedavg", index, self.sizes.get(index).copied(), &[weights])?;
        average_in_place(comm, weights).map(Some)
    }
}
