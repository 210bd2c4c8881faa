//! `dense`: the baseline. The full gradient goes through a ring allreduce, as f32 or as
//! IEEE half precision on the wire (the reduction itself stays in f32).

use crate::exchange::{check_len, check_numel, dense_average, dense_average_tensor, Meter};
use crate::method::{not_on_tensors, Method, ParamSpec, TensorUpdate, Update, UpdateKind};
use crate::Result;
use comm::{Communicator, ProcessGroup, ReduceOp};
use tensor::{Device, Tensor};

pub struct Dense {
    half: bool,
    sizes: Vec<usize>,
}

impl Dense {
    pub fn new(half: bool) -> Self {
        Dense {
            half,
            sizes: Vec::new(),
        }
    }
}

impl Method for Dense {
    fn name(&self) -> &'static str {
        "dense"
    }
    fn describe(&self) -> String {
        format!("dense(wire={})", if self.half { "f16" } else { "f32" })
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.sizes = params.iter().map(|p| p.numel()).collect();
        Ok(())
    }
    fn exchange(
        &mut self,
        comm: &mut Communicator,
        index: usize,
        _weights: &[f32],
        grad: &[f32],
    ) -> Result<Update> {
        check_len("dense", index, self.sizes.get(index).copied(), &[grad])?;
        if !self.half {
            return dense_average(comm, grad);
        }
        let mut m = Meter::new(grad.len());
        let mut out = grad.to_vec();
        m.comm(|| comm.allreduce_f16(&mut out, ReduceOp::Average))?;
        m.stats.sent_values = grad.len();
        m.stats.message_bytes = 2 * grad.len();
        Ok(m.update(out, UpdateKind::Gradient))
    }
    /// f32 on the wire only: the half-precision ring has no tensor version yet.
    fn on_tensors(&self) -> bool {
        !self.half
    }
    fn place(&mut self, _device: Device) -> Result<()> {
        if self.half {
            return Err(not_on_tensors("dense with wire=f16"));
        }
        Ok(())
    }
    fn exchange_tensor(
        &mut self,
        group: &mut dyn ProcessGroup,
        index: usize,
        _weights: Option<&Tensor>,
        grad: &Tensor,
    ) -> Result<TensorUpdate> {
        if self.half {
            return Err(not_on_tensors("dense with wire=f16"));
        }
        check_numel("dense", index, self.sizes.get(index).copied(), grad)?;
        dense_average_tensor(group, grad)
    }
}
