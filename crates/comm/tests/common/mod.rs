//! Helpers shared by the comm crate's integration tests: a free loopback port and the
//! configuration of one rank of a loopback job.

use comm::CommConfig;
use std::time::Duration;

pub fn free_port() -> u16 {
    comm::free_loopback_port().unwrap()
}

pub fn config(rank: usize, world: usize, port: u16, token: &str, timeout: Duration) -> CommConfig {
    CommConfig {
        timeout,
        max_frame: 1 << 30,
        ..CommConfig::loopback(rank, world, port, token.as_bytes())
    }
}
