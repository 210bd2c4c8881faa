//! A process group of some of a parent group's ranks — a node's workers, or the nodes'
//! leaders, for the hierarchical exchange — whose primitives are made of the parent's
//! point-to-point `send_recv`, so it runs over TCP and NCCL alike and the composed
//! collectives (allgather-v, TopK, gTopK) work on it unchanged.
//!
//! The primitives go through the group's first member: an allreduce gathers to it, adds
//! the members' tensors in member order (the same bits everywhere) and broadcasts the
//! result; an allgather gathers and broadcasts the stack. That is (P − 1)·n values in and
//! out of the first member, where a ring would spread them: fine for the few workers of a
//! node or the few nodes of a job, and the order of the sum is fixed. Bytes count on the
//! parent's counters.

use super::{check_tensor, tensor_err, ProcessGroup};
use crate::counters::ByteCounters;
use crate::{CommError, ReduceOp, Result};
use tensor::{DType, Device, Tensor};

pub struct Subgroup<'a> {
    parent: &'a mut dyn ProcessGroup,
    /// The parent's ranks that form this group, ascending; this group's rank i is
    /// `members[i]`.
    members: Vec<usize>,
    rank: usize,
}

impl<'a> Subgroup<'a> {
    /// The group of `members` (the parent's ranks, ascending, distinct, this rank among
    /// them).
    pub fn new(parent: &'a mut dyn ProcessGroup, members: Vec<usize>) -> Result<Subgroup<'a>> {
        let world = parent.world_size();
        if members.windows(2).any(|w| w[0] >= w[1]) || members.iter().any(|&m| m >= world) {
            return Err(CommError::Argument(format!(
                "a subgroup's members must be distinct ranks below {world}, ascending: {members:?}"
            )));
        }
        let me = parent.rank();
        let rank = members.iter().position(|&m| m == me).ok_or_else(|| {
            CommError::Argument(format!(
                "rank {me} is not among the subgroup's members {members:?}"
            ))
        })?;
        Ok(Subgroup {
            parent,
            members,
            rank,
        })
    }

    /// Every member's `t` at the first member (in member order, its own first); None
    /// elsewhere.
    fn gather(&mut self, op: &'static str, t: &Tensor) -> Result<Option<Vec<Tensor>>> {
        if self.rank != 0 {
            self.parent.send_recv(Some((t, self.members[0])), None)?;
            return Ok(None);
        }
        let mut all = vec![t.clone()];
        for &m in &self.members[1..] {
            let buf = Tensor::zeros(t.dims(), t.dtype(), t.device()).map_err(tensor_err(op))?;
            self.parent.send_recv(None, Some((&buf, m)))?;
            all.push(buf);
        }
        Ok(Some(all))
    }
}

impl ProcessGroup for Subgroup<'_> {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.members.len()
    }
    fn device(&self) -> Device {
        self.parent.device()
    }
    fn counters(&self) -> &ByteCounters {
        self.parent.counters()
    }
    fn counters_mut(&mut self) -> &mut ByteCounters {
        self.parent.counters_mut()
    }
    fn barrier(&mut self) -> Result<()> {
        let t = Tensor::zeros(1, DType::F32, self.device()).map_err(tensor_err("barrier"))?;
        self.allreduce(&t, ReduceOp::Sum)
    }
    fn broadcast(&mut self, t: &Tensor, root: usize) -> Result<()> {
        const OP: &str = "subgroup broadcast";
        check_tensor(OP, self.device(), t, false)?;
        let from = *self.members.get(root).ok_or_else(|| {
            CommError::Argument(format!(
                "{OP}: root {root} in a group of {}",
                self.members.len()
            ))
        })?;
        if self.rank == root {
            for i in 0..self.members.len() {
                if i != root {
                    self.parent.send_recv(Some((t, self.members[i])), None)?;
                }
            }
            Ok(())
        } else {
            self.parent.send_recv(None, Some((t, from)))
        }
    }
    fn allreduce(&mut self, t: &Tensor, op: ReduceOp) -> Result<()> {
        const OP: &str = "subgroup allreduce";
        check_tensor(OP, self.device(), t, true)?;
        if let Some(all) = self.gather(OP, t)? {
            let p = all.len();
            let sum = tensor::no_grad(|| -> tensor::Result<Tensor> {
                let mut acc = all[0].clone();
                for x in &all[1..] {
                    acc = acc.add(x)?;
                }
                match op {
                    // As the TCP ring's average: the sum times the f32 1/P.
                    ReduceOp::Average if p > 1 => acc.scale((1.0 / p as f32) as f64),
                    _ => Ok(acc),
                }
            })
            .map_err(tensor_err(OP))?;
            if p > 1 {
                t.assign(&sum).map_err(tensor_err(OP))?;
            }
        }
        self.broadcast(t, 0)
    }
    fn allgather(&mut self, t: &Tensor) -> Result<Tensor> {
        const OP: &str = "subgroup allgather";
        check_tensor(OP, self.device(), t, false)?;
        let mut dims = vec![self.members.len()];
        dims.extend_from_slice(t.dims());
        let out = match self.gather(OP, t)? {
            Some(all) => Tensor::stack(&all, 0)
                .and_then(|s| s.contiguous())
                .map_err(tensor_err(OP))?,
            None => Tensor::zeros(dims, t.dtype(), t.device()).map_err(tensor_err(OP))?,
        };
        self.broadcast(&out, 0)?;
        Ok(out)
    }
    fn send_recv(
        &mut self,
        send: Option<(&Tensor, usize)>,
        recv: Option<(&Tensor, usize)>,
    ) -> Result<()> {
        let map = |i: usize| -> Result<usize> {
            self.members.get(i).copied().ok_or_else(|| {
                CommError::Argument(format!(
                    "subgroup send_recv: peer {i} in a group of {}",
                    self.members.len()
                ))
            })
        };
        let send = match send {
            Some((t, p)) => Some((t, map(p)?)),
            None => None,
        };
        let recv = match recv {
            Some((t, p)) => Some((t, map(p)?)),
            None => None,
        };
        self.parent.send_recv(send, recv)
    }
}
