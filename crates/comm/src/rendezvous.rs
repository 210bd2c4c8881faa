//! Joining a job: rank 0 listens on MASTER_ADDR:MASTER_PORT; every other rank opens its own
//! listener, connects to rank 0, authenticates and reports its listening port; rank 0
//! answers with everyone's address; then each rank connects to the lower non-zero ranks
//! and accepts the higher ones. Result: one authenticated connection per pair.

use crate::auth::handshake;
use crate::communicator::CommConfig;
use crate::error::{CommError, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn accept_before(listener: &TcpListener, deadline: Instant) -> Result<TcpStream> {
    listener
        .set_nonblocking(true)
        .map_err(|e| CommError::Rendezvous(format!("listener: {e}")))?;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)
                    .map_err(|e| CommError::Rendezvous(e.to_string()))?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err(CommError::Rendezvous(
                        "timed out waiting for the other ranks to connect".into(),
                    ));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(CommError::Rendezvous(format!("accept: {e}"))),
        }
    }
}

fn connect_before(addr: SocketAddr, deadline: Instant) -> Result<TcpStream> {
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(s) => return Ok(s),
            Err(e) => {
                if Instant::now() > deadline {
                    return Err(CommError::Rendezvous(format!("cannot reach {addr}: {e}")));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn tune(s: &TcpStream, timeout: Duration) -> Result<()> {
    s.set_nodelay(true)
        .and(s.set_read_timeout(Some(timeout)))
        .and(s.set_write_timeout(Some(timeout)))
        .map_err(|e| CommError::Rendezvous(format!("socket options: {e}")))
}

/// One stream per peer (None at our own index).
pub(crate) fn connect_mesh(cfg: &CommConfig) -> Result<Vec<Option<TcpStream>>> {
    let (rank, world) = (cfg.rank, cfg.world);
    let deadline = Instant::now() + cfg.timeout;
    let mut peers: Vec<Option<TcpStream>> = (0..world).map(|_| None).collect();
    if world == 1 {
        return Ok(peers);
    }
    let master: SocketAddr = format!("{}:{}", cfg.master_addr, cfg.master_port)
        .parse()
        .or_else(|_| {
            std::net::ToSocketAddrs::to_socket_addrs(&(cfg.master_addr.as_str(), cfg.master_port))
                .map_err(|e| e.to_string())
                .and_then(|mut a| a.next().ok_or_else(|| "no address".to_string()))
        })
        .map_err(|e| {
            CommError::Config(format!(
                "MASTER_ADDR {}:{}: {e}",
                cfg.master_addr, cfg.master_port
            ))
        })?;
    if rank == 0 {
        let listener = TcpListener::bind(master)
            .map_err(|e| CommError::Rendezvous(format!("rank 0 cannot listen on {master}: {e}")))?;
        let mut table = vec![String::new(); world];
        for _ in 1..world {
            let mut s = accept_before(&listener, deadline)?;
            tune(&s, cfg.timeout)?;
            let peer = match handshake(&mut s, &cfg.token, 0, "a connecting rank") {
                Ok(p) if p > 0 && p < world && peers[p].is_none() => p,
                Ok(p) => {
                    return Err(CommError::Rendezvous(format!(
                        "a peer claimed rank {p}, which is out of range or taken"
                    )))
                }
                Err(e) => {
                    eprintln!("comm: refused a connection: {e}");
                    return Err(e);
                }
            };
            let mut port = [0u8; 2];
            s.read_exact(&mut port).map_err(|e| CommError::Peer {
                peer,
                op: "rendezvous",
                source: e,
            })?;
            let ip = s
                .peer_addr()
                .map_err(|e| CommError::Peer {
                    peer,
                    op: "rendezvous",
                    source: e,
                })?
                .ip();
            table[peer] = SocketAddr::new(ip, u16::from_le_bytes(port)).to_string();
            peers[peer] = Some(s);
        }
        let encoded = table.join("\n").into_bytes();
        for (p, s) in peers.iter_mut().enumerate().skip(1) {
            if let Some(s) = s {
                s.write_all(&(encoded.len() as u32).to_le_bytes())
                    .and_then(|_| s.write_all(&encoded))
                    .map_err(|e| CommError::Peer {
                        peer: p,
                        op: "rendezvous",
                        source: e,
                    })?;
            }
        }
        return Ok(peers);
    }
    let listener = TcpListener::bind((cfg.bind_addr.as_str(), 0))
        .map_err(|e| CommError::Rendezvous(format!("cannot listen on {}: {e}", cfg.bind_addr)))?;
    let my_port = listener
        .local_addr()
        .map_err(|e| CommError::Rendezvous(e.to_string()))?
        .port();
    let mut s = connect_before(master, deadline)?;
    tune(&s, cfg.timeout)?;
    let zero = handshake(&mut s, &cfg.token, rank, "rank 0")?;
    if zero != 0 {
        return Err(CommError::Rendezvous(format!(
            "the master answered as rank {zero}"
        )));
    }
    let io = |e| CommError::Peer {
        peer: 0,
        op: "rendezvous",
        source: e,
    };
    s.write_all(&my_port.to_le_bytes()).map_err(io)?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).map_err(io)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > 64 * world + 64 {
        return Err(CommError::Protocol {
            peer: 0,
            msg: format!("address table of {len} bytes for {world} ranks"),
        });
    }
    let mut table = vec![0u8; len];
    s.read_exact(&mut table).map_err(io)?;
    let table: Vec<String> = String::from_utf8_lossy(&table)
        .split('\n')
        .map(str::to_string)
        .collect();
    if table.len() != world {
        return Err(CommError::Protocol {
            peer: 0,
            msg: format!(
                "address table lists {} ranks, the job has {world}",
                table.len()
            ),
        });
    }
    peers[0] = Some(s);
    for (p, addr) in table.iter().enumerate().take(rank).skip(1) {
        let addr: SocketAddr = addr.parse().map_err(|_| CommError::Protocol {
            peer: 0,
            msg: format!("bad address {addr:?} for rank {p}"),
        })?;
        let mut c = connect_before(addr, deadline)?;
        tune(&c, cfg.timeout)?;
        let got = handshake(&mut c, &cfg.token, rank, &format!("rank {p}"))?;
        if got != p {
            return Err(CommError::Rendezvous(format!(
                "{addr} answered as rank {got}, expected {p}"
            )));
        }
        peers[p] = Some(c);
    }
    for _ in rank + 1..world {
        let mut c = accept_before(&listener, deadline)?;
        tune(&c, cfg.timeout)?;
        let p = handshake(&mut c, &cfg.token, rank, "a higher rank")?;
        if p <= rank || p >= world || peers[p].is_some() {
            return Err(CommError::Rendezvous(format!(
                "unexpected connection from rank {p}"
            )));
        }
        peers[p] = Some(c);
    }
    Ok(peers)
}
