//! Helpers shared by the comm crate's integration tests: a job's master port and the
//! configuration of one rank of a loopback job.

#![allow(dead_code)]

use comm::CommConfig;
use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Master listeners bound by [`free_port`], by port, until a configuration or a worker
/// process takes them: tests run in parallel, and a port that is only "free a moment
/// ago" can be taken by another test's rank before rank 0 listens on it.
static MASTERS: Mutex<Option<HashMap<u16, Arc<TcpListener>>>> = Mutex::new(None);

/// A loopback port for a job's master, held by a listener that rank 0's [`config`] (or
/// [`master_listener`]) picks up.
pub fn free_port() -> u16 {
    let l = comm::bind_loopback_master().unwrap();
    let port = l.local_addr().unwrap().port();
    MASTERS
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .insert(port, Arc::new(l));
    port
}

/// The listener [`free_port`] bound for `port` (none for a port it did not hand out).
pub fn master_listener(port: u16) -> Option<Arc<TcpListener>> {
    MASTERS.lock().unwrap().as_ref()?.get(&port).cloned()
}

pub fn config(rank: usize, world: usize, port: u16, token: &str, timeout: Duration) -> CommConfig {
    CommConfig {
        timeout,
        max_frame: 1 << 30,
        master_listener: if rank == 0 {
            master_listener(port)
        } else {
            None
        },
        ..CommConfig::loopback(rank, world, port, token.as_bytes())
    }
}
