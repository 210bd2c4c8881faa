//! Collectives between worker processes: rendezvous, TCP and NCCL backends, dense and
//! sparse allreduce, byte accounting and the alpha-beta cost model.
//!
//! Skeleton: the contents arrive with issue 5 (see the README's roadmap).
