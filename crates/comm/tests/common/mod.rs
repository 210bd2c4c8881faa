//! Helpers shared by the comm crate's integration tests: the configurations of a loopback
//! job of threads, every rank's test data, and the serial definitions results are
//! checked against. (Each test file uses some of them.)
#![allow(dead_code)]

use comm::{top_merge, CommConfig, SparseVec};
use std::time::Duration;
use tensor::Rng;

/// Every rank's configuration of a loopback job of threads ([`CommConfig::loopback_job`]:
/// rank 0's holds the master listener, so the port cannot be taken by another test's job
/// before rank 0 listens), each with `timeout` and a 1 GiB frame limit.
pub fn job_configs(world: usize, token: &str, timeout: Duration) -> Vec<CommConfig> {
    CommConfig::loopback_job(world, token.as_bytes())
        .expect("a loopback master listener")
        .into_iter()
        .map(|c| CommConfig {
            timeout,
            max_frame: 1 << 30,
            ..c
        })
        .collect()
}

/// Rank `rank`'s dense vector of `n` normal values (the same on every rank that asks).
pub fn data(rank: usize, n: usize) -> Vec<f32> {
    let mut r = Rng::new(rank as u64 + 1);
    (0..n).map(|_| r.normal() as f32).collect()
}

/// Rank `rank`'s sparse vector: `nnz` draws of an index below `n` (repeats summed) with
/// a normal value.
pub fn sparse(rank: usize, n: u32, nnz: usize) -> SparseVec {
    let mut r = Rng::new(100 + rank as u64);
    SparseVec::new(
        (0..nnz)
            .map(|_| (r.below(n as usize) as u32, r.normal() as f32))
            .collect(),
    )
}

/// The serial definition of gTopKAllReduce (paper 002, Alg. 3) for rank r's vector
/// `local(r)`: each rank's ⊤ of its own, then ⊤ merges up the binomial tree to rank 0.
pub fn gtopk_serial_of(world: usize, k: usize, local: impl Fn(usize) -> SparseVec) -> SparseVec {
    let mut cur: Vec<SparseVec> = (0..world)
        .map(|r| top_merge(&local(r), &SparseVec::default(), k))
        .collect();
    let mut mask = 1;
    while mask < world {
        for r in (0..world).step_by(2 * mask) {
            if r + mask < world {
                cur[r] = top_merge(&cur[r], &cur[r + mask], k);
            }
        }
        mask <<= 1;
    }
    cur.swap_remove(0)
}
