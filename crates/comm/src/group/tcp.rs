//! [`ProcessGroup`] over the TCP [`Communicator`]: each tensor crosses to the host as bytes
//! for the wire and the result is made on the group's device. TopKAllReduce and
//! gTopKAllReduce take the communicator's streamed paths (which sum blocks as they arrive,
//! `arrival_sum.rs`, `stream_merge.rs`) instead of the compositions; the tests hold both
//! to the same result.

use super::{check_tensor, tensor_err, ProcessGroup};
use crate::counters::ByteCounters;
use crate::{CommError, Communicator, ReduceOp, Result, SparseVec, Wire16};
use tensor::sparsify::Selected;
use tensor::{DType, Device, Tensor};

/// A 4-byte tensor's elements as little-endian bytes (the wire's order).
fn to_bytes(op: &'static str, t: &Tensor) -> Result<Vec<u8>> {
    Ok(match t.dtype() {
        DType::U32 => t
            .to_vec::<u32>()
            .map_err(tensor_err(op))?
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        _ => t
            .to_vec::<f32>()
            .map_err(tensor_err(op))?
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
    })
}

/// Writes `bytes` (from `peer`) into `t` in place: they must be exactly its length.
fn assign_bytes(op: &'static str, t: &Tensor, bytes: &[u8], peer: usize) -> Result<()> {
    let want = t.elem_count() * 4;
    if bytes.len() != want {
        return Err(CommError::Protocol {
            peer,
            msg: format!(
                "{op}: {} bytes for a tensor of {} elements ({want} bytes)",
                bytes.len(),
                t.elem_count()
            ),
        });
    }
    let src = from_bytes(op, bytes, t.dtype(), t.dims(), t.device())?;
    t.assign(&src).map_err(tensor_err(op))
}

fn from_bytes(
    op: &'static str,
    bytes: &[u8],
    dtype: DType,
    dims: &[usize],
    device: Device,
) -> Result<Tensor> {
    // Callers check the length is whole elements.
    let words = bytes.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]);
    let t = match dtype {
        DType::U32 => Tensor::from_vec(words.map(u32::from_le_bytes).collect(), dims, device),
        _ => Tensor::from_vec(words.map(f32::from_le_bytes).collect(), dims, device),
    };
    t.map_err(tensor_err(op))
}

fn to_sparse(op: &'static str, s: &Selected) -> Result<SparseVec> {
    let (indices, values) = s.to_vecs().map_err(tensor_err(op))?;
    Ok(SparseVec { indices, values })
}

fn from_sparse(
    op: &'static str,
    v: SparseVec,
    source_len: usize,
    device: Device,
) -> Result<Selected> {
    let n = v.len();
    Ok(Selected {
        indices: Tensor::from_vec(v.indices, n, device).map_err(tensor_err(op))?,
        values: Tensor::from_vec(v.values, n, device).map_err(tensor_err(op))?,
        source_len,
    })
}

impl ProcessGroup for Communicator {
    fn rank(&self) -> usize {
        Communicator::rank(self)
    }
    fn world_size(&self) -> usize {
        Communicator::world_size(self)
    }
    fn device(&self) -> Device {
        Communicator::device(self)
    }
    fn counters(&self) -> &ByteCounters {
        Communicator::counters(self)
    }
    fn counters_mut(&mut self) -> &mut ByteCounters {
        Communicator::counters_mut(self)
    }
    fn barrier(&mut self) -> Result<()> {
        Communicator::barrier(self)
    }
    fn broadcast(&mut self, t: &Tensor, root: usize) -> Result<()> {
        const OP: &str = "broadcast";
        check_tensor(OP, self.device(), t, false)?;
        // Only the root's bytes are read; the others pass nothing.
        let mine = if self.rank() == root {
            to_bytes(OP, t)?
        } else {
            Vec::new()
        };
        let got = Communicator::broadcast(self, root, &mine)?;
        if self.rank() != root {
            assign_bytes(OP, t, &got, root)?;
        }
        Ok(())
    }
    fn allreduce(&mut self, t: &Tensor, op: ReduceOp) -> Result<()> {
        on_host_values(self, "allreduce", t, |c, v| {
            Communicator::allreduce(c, v, op)
        })
    }
    fn allreduce_16(&mut self, t: &Tensor, op: ReduceOp, wire: Wire16) -> Result<()> {
        on_host_values(self, "16-bit allreduce", t, |c, v| {
            Communicator::allreduce_16(c, v, op, wire)
        })
    }
    fn allgather(&mut self, t: &Tensor) -> Result<Tensor> {
        const OP: &str = "allgather";
        check_tensor(OP, self.device(), t, false)?;
        let parts = Communicator::allgather_v(self, &to_bytes(OP, t)?)?;
        let want = t.elem_count() * 4;
        let mut all = Vec::with_capacity(want * parts.len());
        for (peer, p) in parts.iter().enumerate() {
            if p.len() != want {
                return Err(CommError::Argument(format!(
                    "{OP}: rank {peer} gave {} bytes, this rank {want}: an allgather \
                     takes the same shape on every rank (allgather_v takes any)",
                    p.len()
                )));
            }
            all.extend_from_slice(p);
        }
        let mut dims = vec![parts.len()];
        dims.extend_from_slice(t.dims());
        from_bytes(OP, &all, t.dtype(), &dims, t.device())
    }
    fn send_recv(
        &mut self,
        send: Option<(&Tensor, usize)>,
        recv: Option<(&Tensor, usize)>,
    ) -> Result<()> {
        const OP: &str = "send_recv";
        let me = self.rank();
        for (t, _) in send.iter().chain(recv.iter()) {
            check_tensor(OP, self.device(), t, false)?;
        }
        match (send, recv) {
            // A message to this rank itself is a copy (the TCP mesh has no self-loop).
            (Some((s, to)), Some((r, from))) if to == me && from == me => {
                return r.assign(s).map_err(tensor_err(OP));
            }
            (Some((_, to)), _) | (_, Some((_, to))) if to == me => {
                return Err(CommError::Argument(format!(
                    "{OP}: rank {me} sends to itself or receives from itself on one side \
                     only; pair both sides with itself, or neither"
                )));
            }
            _ => {}
        }
        if let Some((t, to)) = send {
            Communicator::send(self, to, &to_bytes(OP, t)?)?;
        }
        if let Some((t, from)) = recv {
            let got = Communicator::recv(self, from)?;
            assign_bytes(OP, t, &got, from)?;
        }
        Ok(())
    }
    fn allgather_v(&mut self, t: &Tensor) -> Result<Vec<Tensor>> {
        const OP: &str = "allgather_v";
        check_tensor(OP, self.device(), t, false)?;
        // TCP carries any length per rank: no size exchange, no padding.
        let parts = Communicator::allgather_v(self, &to_bytes(OP, t)?)?;
        parts
            .iter()
            .enumerate()
            .map(|(peer, p)| {
                if p.len() % 4 != 0 {
                    return Err(CommError::Protocol {
                        peer,
                        msg: format!("{OP}: {} bytes, not whole 4-byte elements", p.len()),
                    });
                }
                from_bytes(OP, p, t.dtype(), &[p.len() / 4], t.device())
            })
            .collect()
    }
    fn topk_allreduce(&mut self, local: &Selected) -> Result<Selected> {
        const OP: &str = "topk_allreduce";
        let v = Communicator::topk_allreduce(self, &to_sparse(OP, local)?)?;
        from_sparse(OP, v, local.source_len, self.device())
    }
    fn gtopk_allreduce(&mut self, local: &Selected, k: usize) -> Result<Selected> {
        const OP: &str = "gtopk_allreduce";
        let v = Communicator::gtopk_allreduce(self, &to_sparse(OP, local)?, k)?;
        from_sparse(OP, v, local.source_len, self.device())
    }
}

/// Runs `f` on a host copy of the F32 tensor `t`'s values and writes them back into `t`:
/// the TCP communicator's in-place collectives on tensors.
fn on_host_values(
    comm: &mut Communicator,
    op: &'static str,
    t: &Tensor,
    f: impl FnOnce(&mut Communicator, &mut [f32]) -> Result<()>,
) -> Result<()> {
    check_tensor(op, comm.device(), t, true)?;
    let mut v = t.to_vec::<f32>().map_err(tensor_err(op))?;
    f(comm, &mut v)?;
    let src = Tensor::from_vec(v, t.dims(), t.device()).map_err(tensor_err(op))?;
    t.assign(&src).map_err(tensor_err(op))
}
