//! Helpers shared by the comm crate's integration tests: a free loopback port and the
//! configuration of one rank of a loopback job.

use comm::CommConfig;
use std::time::Duration;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn config(rank: usize, world: usize, port: u16, token: &str, timeout: Duration) -> CommConfig {
    CommConfig {
        rank,
        world,
        master_addr: "127.0.0.1".into(),
        master_port: port,
        bind_addr: "127.0.0.1".into(),
        token: token.as_bytes().to_vec(),
        timeout,
        max_frame: 1 << 30,
    }
}
