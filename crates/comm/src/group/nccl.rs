//! [`ProcessGroup`] over NCCL: the primitives are NCCL's own, on the GPU; allgather-v,
//! TopKAllReduce and gTopKAllReduce are the compositions of `composed.rs`.

use super::{counted_as, tensor_err, ProcessGroup};
use crate::counters::{ByteCounters, Collective};
use crate::{NcclCommunicator, ReduceOp, Result};
use tensor::{DType, Device, Tensor};

impl ProcessGroup for NcclCommunicator {
    fn rank(&self) -> usize {
        NcclCommunicator::rank(self)
    }
    fn world_size(&self) -> usize {
        NcclCommunicator::world_size(self)
    }
    fn device(&self) -> Device {
        NcclCommunicator::device(self)
    }
    fn counters(&self) -> &ByteCounters {
        NcclCommunicator::counters(self)
    }
    fn counters_mut(&mut self) -> &mut ByteCounters {
        NcclCommunicator::counters_mut(self)
    }
    /// NCCL has no barrier: a one-element allreduce, waited for.
    fn barrier(&mut self) -> Result<()> {
        let one = Tensor::zeros(1, DType::F32, self.device()).map_err(tensor_err("barrier"))?;
        counted_as(self, Collective::Barrier, |g| {
            NcclCommunicator::allreduce(g, &one, ReduceOp::Sum)
        })?;
        self.synchronize()
    }
    fn broadcast(&mut self, t: &Tensor, root: usize) -> Result<()> {
        NcclCommunicator::broadcast(self, t, root)
    }
    fn allreduce(&mut self, t: &Tensor, op: ReduceOp) -> Result<()> {
        NcclCommunicator::allreduce(self, t, op)
    }
    fn allgather(&mut self, t: &Tensor) -> Result<Tensor> {
        NcclCommunicator::allgather(self, t)
    }
    fn send_recv(
        &mut self,
        send: Option<(&Tensor, usize)>,
        recv: Option<(&Tensor, usize)>,
    ) -> Result<()> {
        NcclCommunicator::send_recv(self, send, recv)
    }
}
