//! Federated Averaging (McMahan et al.; the communication-delay baseline of paper 003):
//! every rank applies its own gradients for `delay` steps, then the parameters are
//! averaged densely.

use crate::exchange::{check_len, Meter};
use crate::method::{Method, ParamSpec, StepInfo, Update, UpdateKind, WireStats};
use crate::{CompressError, Result};
use comm::{Communicator, ReduceOp};

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
        if (self.step + 1) % self.delay as u64 != 0 {
            return Ok(None);
        }
        let n = check_len("fedavg", index, self.sizes.get(index).copied(), &[weights])?;
        let mut m = Meter::new(n);
        m.comm(|| comm.allreduce(weights, ReduceOp::Average))?;
        m.stats.sent_values = n;
        m.stats.message_bytes = 4 * n;
        Ok(Some(m.stats))
    }
}
