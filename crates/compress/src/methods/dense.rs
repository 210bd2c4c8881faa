//! `dense`: the baseline. The full gradient goes through a ring allreduce, as f32, IEEE
//! half precision or bfloat16 on the wire (the reduction itself stays in f32).

use crate::exchange::{check_len, check_numel, dense_average, dense_average_tensor_on, Meter};
use crate::method::{
    HostExchange, Method, ParamSpec, TensorExchange, TensorUpdate, Update, UpdateKind,
};
use crate::Result;
use comm::{ReduceOp, Wire16};
use tensor::Device;

pub struct Dense {
    /// The ring's 16-bit format on the wire, or f32 (`None`).
    wire: Option<Wire16>,
    sizes: Vec<usize>,
}

impl Dense {
    pub fn new(wire: Option<Wire16>) -> Self {
        Dense {
            wire,
            sizes: Vec::new(),
        }
    }
    fn wire_name(&self) -> &'static str {
        match self.wire {
            None => "f32",
            Some(Wire16::F16) => "f16",
            Some(Wire16::Bf16) => "bf16",
        }
    }
}

impl Method for Dense {
    fn name(&self) -> &'static str {
        "dense"
    }
    fn describe(&self) -> String {
        format!("dense(wire={})", self.wire_name())
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.sizes = params.iter().map(|p| p.numel()).collect();
        Ok(())
    }
    fn exchange(&mut self, x: HostExchange<'_>) -> Result<Update> {
        let (comm, index, grad) = (x.comm, x.index, x.grad);
        check_len("dense", index, self.sizes.get(index).copied(), &[grad])?;
        let Some(wire) = self.wire else {
            return dense_average(comm, grad);
        };
        let mut m = Meter::new(grad.len());
        let mut out = grad.to_vec();
        m.comm(|| comm.allreduce_16(&mut out, ReduceOp::Average, wire))?;
        m.stats.sent_values = grad.len();
        m.stats.message_bytes = 2 * grad.len();
        Ok(m.update(out, UpdateKind::Gradient))
    }
    fn tcp_only(&self) -> Option<&'static str> {
        self.wire.map(|_| {
            "its 16-bit ring runs on the TCP communicator (NCCL would need 16-bit buffers on \
             the GPU, which the tensor crate does not have yet)"
        })
    }
    fn place(&mut self, _device: Device) -> Result<()> {
        Ok(())
    }
    fn exchange_tensor(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        let (group, index, grad) = (x.comm, x.index, x.grad);
        check_numel("dense", index, self.sizes.get(index).copied(), grad)?;
        dense_average_tensor_on(group, grad, self.wire)
    }
}
