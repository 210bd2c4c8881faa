//! Collectives between worker processes over TCP.
//!
//! - [`Communicator::from_env`] joins a job from `RANK`, `WORLD_SIZE`, `MASTER_ADDR`,
//!   `MASTER_PORT` (PyTorch's convention) and a shared token (`GRADEX_TOKEN` or
//!   `GRADEX_TOKEN_FILE`); every pair of ranks gets one authenticated TCP connection.
//! - Collectives: `barrier`, `broadcast`, ring `allreduce` of f32 (sum or average),
//!   `allgather_v` of byte buffers, `send`/`recv`, and the sparse `topk_allreduce`
//!   (allgather of indices and values, summed) and `gtopk_allreduce` (paper 002's tree of
//!   ⊤ merges to rank 0, then a broadcast).
//! - Every rank counts the bytes it sends and receives per collective ([`ByteCounters`]):
//!   compression ratios are measured on the wire.
//! - Frames are length-prefixed with a versioned header; a frame longer than the configured
//!   maximum, of the wrong version or truncated is an error, never an allocation of a
//!   size a peer chose. Every blocking TCP call has a timeout, on inactivity: a peer that
//!   sends or takes nothing for `timeout` (dead, hung, unplugged) ends the collective
//!   with an error naming its rank on every rank; one that keeps trickling bytes is
//!   slow, not gone, and is waited for (the rendezvous alone has a deadline, so that a
//!   stranger cannot hold it). NCCL's calls have no timeout (see `nccl.rs`).
//!
//! - The α-β cost model of paper 002's Table I ([`AlphaBeta`]), fitted from a ping-pong.
//!
//! - The NCCL backend ([`NcclCommunicator`]): allreduce, broadcast, allgather and
//!   send/recv on GPU tensors, started over the TCP job (see `nccl.rs`).
//!
//! - [`ProcessGroup`]: both backends' collectives on tensors behind one trait, with
//!   allgather-v, TopKAllReduce and gTopKAllReduce composed of its primitives once
//!   ([`group::composed`]), so a method is written once for every device and backend.

mod arrival_last;
mod arrival_sum;
mod auth;
mod blocks;
mod communicator;
mod cost;
mod counters;
mod error;
mod frame;
pub mod group;
mod master;
mod nccl;
mod rendezvous;
mod sparse;
mod stream_merge;
mod trace;
pub mod watchdog;
mod window_sum;

pub use arrival_sum::{ArrivalSum, ARRIVAL_MAX_PARTS};
pub use communicator::{CommConfig, Communicator, ReduceOp, TopkSum, Wire16, MAX_WORLD};
pub use cost::{ping_pong, AlphaBeta};
pub use counters::{ByteCounters, Collective, Traffic};
pub use error::{CommError, Result};
pub use frame::{decode_header, FrameHeader, FRAME_VERSION, HEADER_LEN};
pub use group::{ProcessGroup, Subgroup};
pub use master::{
    bind_loopback_master, prepare_local_worker, release_master_listeners, MASTER_FD_ENV,
};
pub use nccl::{exit_on_stall, nccl_library_present, nccl_version, NcclCommunicator};
pub use sparse::{
    merge_sum_into, sum_all, sum_encoded, top_merge, top_merge_into, truncate_top, SparseVec,
    TopMergeScratch,
};
pub use trace::{monotonic_ns, TraceEvent};
