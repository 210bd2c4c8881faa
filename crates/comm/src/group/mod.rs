//! One interface to both backends' collectives, on tensors: [`ProcessGroup`], which the
//! TCP [`Communicator`](crate::Communicator) and the [`NcclCommunicator`](crate::NcclCommunicator)
//! implement, so that a compression method is written once for every device and backend.
//!
//! A backend provides the primitives (barrier, broadcast, allreduce, an allgather of
//! equal-size buffers, a paired send/receive); the collectives of sparse gradient exchange
//! — allgather-v, TopKAllReduce and gTopKAllReduce (paper 002) — are composed of those
//! primitives once, in [`composed`], and the multi-process TCP tests run that same code,
//! which NCCL runs on the GPU. A backend may replace a composition with a faster path of
//! its own (the TCP communicator keeps its streamed sparse collectives, which sum blocks as
//! they arrive); [`composed`] stays callable directly, so both are tested against each
//! other.
//!
//! Tensors are contiguous, on the group's [`ProcessGroup::device`], of a 4-byte dtype (F32
//! or U32: indices travel as U32) except in allreduce, which sums F32. The TCP backend
//! copies a tensor to the host for the wire and back; NCCL moves it on the GPU, queued on
//! the device's compute stream (ordered with the tensor ops around it).
//!
//! Byte counters: a composed collective counts the bytes of its primitives under its own
//! kind ([`Collective::TopkAllreduce`], …), so WireStats reads the same on both backends.

pub mod composed;
mod nccl;
mod sub;
mod tcp;

pub use sub::Subgroup;

use crate::counters::{ByteCounters, Collective};
use crate::{CommError, ReduceOp, Result, Wire16};
use tensor::sparsify::Selected;
use tensor::{DType, Device, Tensor};

/// The collectives of a job's ranks on tensors (see the module comment). Every rank calls
/// each collective in the same order with tensors of the same dtype; the lengths that
/// must agree are said per call.
pub trait ProcessGroup {
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;
    /// Where the tensors this group takes and returns live.
    fn device(&self) -> Device;
    /// Bytes sent and received so far, per collective kind.
    fn counters(&self) -> &ByteCounters;
    /// For compositions, which count their primitives under their own kind.
    fn counters_mut(&mut self) -> &mut ByteCounters;

    /// Returns once every rank has called it.
    fn barrier(&mut self) -> Result<()>;
    /// Copies `root`'s `t` into every rank's `t` (same length everywhere), in place.
    fn broadcast(&mut self, t: &Tensor, root: usize) -> Result<()>;
    /// Sums (or averages) the F32 `t` over the ranks, in place (same length everywhere).
    fn allreduce(&mut self, t: &Tensor, op: ReduceOp) -> Result<()>;
    /// [`ProcessGroup::allreduce`] with 16-bit floats on the wire (the dense f16 and bf16
    /// baselines; the partial sums stay f32 where they are added). Only the TCP
    /// communicator carries it: NCCL would need 16-bit buffers on the GPU, which the
    /// tensor crate does not have, and a subgroup's leaders would need it over both.
    fn allreduce_16(&mut self, t: &Tensor, op: ReduceOp, wire: Wire16) -> Result<()> {
        let _ = (t, op);
        Err(CommError::Argument(format!(
            "a dense ring with {wire:?} on the wire runs only over the TCP communicator \
             (not NCCL, not a hierarchical exchange)"
        )))
    }
    /// Every rank's `t` (same shape everywhere), stacked: shape `[world, ..t's shape]`.
    fn allgather(&mut self, t: &Tensor) -> Result<Tensor>;
    /// Sends `send` to its rank and receives that rank's message into `recv` (whose length
    /// must equal what the peer sends), either side optional. A rank paired with itself
    /// copies. On TCP the send goes first, so two ranks that exchange with each other must
    /// keep their messages within the sockets' buffers; the compositions never do that.
    fn send_recv(
        &mut self,
        send: Option<(&Tensor, usize)>,
        recv: Option<(&Tensor, usize)>,
    ) -> Result<()>;

    /// Every rank's `t`, of any length (shape `[len]`), in rank order.
    fn allgather_v(&mut self, t: &Tensor) -> Result<Vec<Tensor>> {
        composed::allgather_v(self, t)
    }
    /// TopKAllReduce: every rank's entries summed by index, ranks' values added in rank
    /// order (the same bits on every rank and on both backends). Every rank's `local`
    /// has the same `source_len`.
    fn topk_allreduce(&mut self, local: &Selected) -> Result<Selected> {
        composed::topk_allreduce(self, local)
    }
    /// gTopKAllReduce (paper 002, Alg. 3): the ⊤ merge (sum by index, keep the `k`
    /// largest magnitudes, ties to the lower index) up a binomial tree to rank 0, whose
    /// result every rank receives.
    fn gtopk_allreduce(&mut self, local: &Selected, k: usize) -> Result<Selected> {
        composed::gtopk_allreduce(self, local, k)
    }
}

/// The error of a tensor operation inside collective `op`.
pub(crate) fn tensor_err(op: &'static str) -> impl Fn(tensor::Error) -> CommError {
    move |source| CommError::Tensor { op, source }
}

/// Checks what every primitive needs of a tensor: on `device`, contiguous, 4-byte dtype
/// (`f32_only`: F32).
pub(crate) fn check_tensor(
    op: &'static str,
    device: Device,
    t: &Tensor,
    f32_only: bool,
) -> Result<()> {
    if t.device() != device {
        return Err(CommError::Argument(format!(
            "{op}: the tensor is on {:?}, the group on {device:?}",
            t.device()
        )));
    }
    let dtype_ok = match t.dtype() {
        DType::F32 => true,
        DType::U32 => !f32_only,
        _ => false,
    };
    if !dtype_ok || !t.is_contiguous() {
        let want = if f32_only { "f32" } else { "f32 or u32" };
        return Err(CommError::Argument(format!(
            "{op}: needs a contiguous {want} tensor (got {:?}, contiguous: {})",
            t.dtype(),
            t.is_contiguous()
        )));
    }
    Ok(())
}

/// Runs `f` with every primitive's bytes counted under `kind` (see [`ByteCounters`]).
pub(crate) fn counted_as<G: ProcessGroup + ?Sized, T>(
    g: &mut G,
    kind: Collective,
    f: impl FnOnce(&mut G) -> Result<T>,
) -> Result<T> {
    g.counters_mut().attribute(Some(kind));
    let out = f(g);
    g.counters_mut().attribute(None);
    out
}
