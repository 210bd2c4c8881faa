//! Helpers shared by the comm crate's integration tests: the configurations of a loopback
//! job of threads.

use comm::CommConfig;
use std::time::Duration;

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
