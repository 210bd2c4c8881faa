//! The hierarchical exchange (`--local-world-size L`), as BytePS and Bagua run it on
//! clusters of multi-GPU nodes: ranks come in nodes of L consecutive ranks; each node
//! averages its gradients densely (a fast local link: NCCL on GPUs, TCP on CPUs), the
//! node's first rank (its leader) runs the compression method across the leaders only,
//! and broadcasts the result — and whether it is a gradient or a step direction — back
//! to its node. With equal nodes the leaders' average of node averages is the job's
//! average, so the learning rate means what it means flat.
//!
//! The node and the leaders are [`comm::Subgroup`]s of the job's group, made of its
//! point-to-point calls, so the method runs unchanged on the leaders' group. Only leaders
//! call the method: the others' method state stays as it started. Methods that
//! synchronise the weights after the step do it among the leaders too, who pass the
//! weights and the momentum mask on to their nodes ([`Hierarchy::after_step`]). The bytes this rank
//! sends inside its node and across nodes are counted apart ([`Hierarchy::bytes`]).

use comm::{ProcessGroup, ReduceOp, Subgroup};
use compress::{
    CompressError, Exchange, Method, TensorAfterStep, TensorExchange, TensorUpdate, UpdateKind,
    WireStats,
};
use std::time::Instant;
use tensor::{no_grad, DType, Tensor};

pub struct Hierarchy {
    local: usize,
    intra_sent: u64,
    inter_sent: u64,
}

fn sent(g: &dyn ProcessGroup) -> u64 {
    g.counters().total().payload_sent
}

/// What a synchronisation after the step returns: what went on the wire and the
/// positions whose optimizer momentum to zero.
pub type Synced = (Option<WireStats>, Vec<u32>);

impl Hierarchy {
    /// Nodes of `local` ranks (at least 1).
    pub fn new(local: usize) -> Hierarchy {
        Hierarchy {
            local: local.max(1),
            intra_sent: 0,
            inter_sent: 0,
        }
    }

    /// Payload bytes this rank has sent inside its node and across nodes.
    pub fn bytes(&self) -> (u64, u64) {
        (self.intra_sent, self.inter_sent)
    }

    /// One parameter's exchange through the hierarchy (see the module comment).
    pub fn exchange(
        &mut self,
        method: &mut dyn Method,
        x: TensorExchange<'_>,
    ) -> compress::Result<TensorUpdate> {
        let (group, index, grad, weights) = (x.comm, x.index, x.grad, x.weights);
        let (rank, world, l) = (group.rank(), group.world_size(), self.local);
        if !world.is_multiple_of(l) {
            return Err(CompressError::Usage(format!(
                "--local-world-size {l}: a job of {world} ranks does not make whole nodes"
            )));
        }
        let leader = rank / l * l;
        let node: Vec<usize> = (leader..leader + l).collect();
        let leaders: Vec<usize> = (0..world).step_by(l).collect();
        let device = grad.device();
        let n = grad.elem_count();
        // A copy: autograd's gradient is not ours to overwrite.
        let g = no_grad(|| grad.scale(1.0))?;
        let t = Instant::now();
        let before = sent(group);
        Subgroup::new(group, node.clone())?.allreduce(&g, ReduceOp::Average)?;
        self.intra_sent += sent(group) - before;
        let mut intra_seconds = t.elapsed().as_secs_f64();
        let (values, kind, mut stats) = if rank == leader {
            let before = sent(group);
            let u = {
                let mut across = Subgroup::new(group, leaders)?;
                method.exchange_tensor(Exchange {
                    weights,
                    ..TensorExchange::new(&mut across, index, &g)
                })?
            };
            self.inter_sent += sent(group) - before;
            (no_grad(|| u.values.contiguous())?, u.kind, u.stats)
        } else {
            let stats = WireStats {
                elements: n,
                dense_bytes: 4 * n,
                ..WireStats::default()
            };
            (
                Tensor::zeros(grad.dims(), DType::F32, device)?,
                UpdateKind::Gradient,
                stats,
            )
        };
        let code = Tensor::from_vec(vec![(kind == UpdateKind::Direction) as u32], 1, device)?;
        let t = Instant::now();
        let before = sent(group);
        {
            let mut intra = Subgroup::new(group, node)?;
            intra.broadcast(&values, 0)?;
            intra.broadcast(&code, 0)?;
        }
        self.intra_sent += sent(group) - before;
        intra_seconds += t.elapsed().as_secs_f64();
        stats.comm_seconds += intra_seconds;
        let kind = if code.to_vec::<u32>()?[0] == 1 {
            UpdateKind::Direction
        } else {
            UpdateKind::Gradient
        };
        Ok(TensorUpdate {
            values,
            kind,
            stats,
        })
    }

    /// One parameter's synchronisation after the step (SBC, `local`, FedAvg): the
    /// ranks of a node hold the same weights (they applied the same updates), so the
    /// leaders synchronise theirs across nodes and each broadcasts the result, and the
    /// momentum positions it masked, to its node.
    pub fn after_step(
        &mut self,
        method: &mut dyn Method,
        x: TensorAfterStep<'_>,
    ) -> compress::Result<Synced> {
        let (group, index, weights) = (x.comm, x.index, x.weights);
        let (rank, l) = (group.rank(), self.local);
        let leader = rank / l * l;
        let node: Vec<usize> = (leader..leader + l).collect();
        let leaders: Vec<usize> = (0..group.world_size()).step_by(l).collect();
        let device = weights.device();
        let (stats, mask) = if rank == leader {
            let before = sent(group);
            let stats = {
                let mut across = Subgroup::new(group, leaders)?;
                method.after_step_tensor(TensorAfterStep::new(&mut across, index, weights))?
            };
            self.inter_sent += sent(group) - before;
            (stats, method.take_momentum_mask(index))
        } else {
            (None, Vec::new())
        };
        let before = sent(group);
        let mask = {
            let mut intra = Subgroup::new(group, node)?;
            intra.broadcast(weights, 0)?;
            let len = Tensor::from_vec(vec![mask.len() as u32], 1, device)?;
            intra.broadcast(&len, 0)?;
            let len = len.to_vec::<u32>()?[0] as usize;
            if len == 0 {
                Vec::new()
            } else {
                let positions = if rank == leader {
                    Tensor::from_vec(mask, len, device)?
                } else {
                    Tensor::zeros(len, DType::U32, device)?
                };
                intra.broadcast(&positions, 0)?;
                positions.to_vec::<u32>()?
            }
        };
        self.intra_sent += sent(group) - before;
        Ok((stats, mask))
    }
}
