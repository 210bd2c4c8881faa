//! Joining a job: rank 0 listens on MASTER_ADDR:MASTER_PORT; every other rank opens its own
//! listener, connects to rank 0, authenticates and reports its listening address; rank 0
//! answers with everyone's address; then each rank connects to the lower non-zero ranks
//! and accepts the higher ones. Result: one authenticated connection per pair.
//!
//! The accepting side is open to anyone who can reach the port, so a connection that
//! fails its handshake (a port scanner, garbage, a wrong token) or claims a rank that is
//! not due is logged and dropped, and accepting goes on until the rendezvous deadline;
//! each handshake has a short deadline of its own. Everything finishes by the rendezvous
//! deadline (`CommConfig::timeout` from the start), whose error names the missing ranks
//! and the last refusal.

use crate::auth::{handshake, read_before, write_before, Role};
use crate::communicator::CommConfig;
use crate::error::{CommError, Result};
use std::io::{ErrorKind, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How long one accepted connection may take to authenticate (and, at rank 0, report its
/// listening address), within what is left of the rendezvous: a rank answers in a round trip. Each
/// handshake runs on a thread of its own, so a silent stranger holds only its own thread
/// this long, not the listener.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(5);

/// Handshakes in flight at once; beyond this the listener waits for one to finish, so a
/// flood of connections costs a bounded number of threads.
const MAX_PENDING_HANDSHAKES: usize = 64;

/// After the deadline, how long to wait for handshakes that end at the deadline, so the
/// timeout error can say why they were refused.
const REFUSAL_GRACE: Duration = Duration::from_millis(300);

/// A connection whose handshake thread has finished: the stream, the peer's address, the
/// handshake's own deadline and the rank it proved (or why not).
type Handshaken = (TcpStream, SocketAddr, Instant, Result<usize>);

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

/// Accepts connections until every rank in `expected` has joined `peers`, or the deadline
/// passes. Each connection is authenticated on a thread of its own (at most
/// [`HANDSHAKE_LIMIT`], [`MAX_PENDING_HANDSHAKES`] at a time), so a silent stranger
/// delays nobody; the checks that follow and `admit` (rank 0 reads the peer's listening address there)
/// run here, in the order handshakes finish. A connection that fails its handshake, claims
/// a rank not in `expected` or already joined, or fails `admit` is logged and dropped, and
/// accepting goes on: a port scanner, a stray `nc`, garbage or a rank with the wrong token
/// must not end the job. The timeout error names the missing ranks and the last refusal.
fn accept_peers(
    listener: &TcpListener,
    cfg: &CommConfig,
    deadline: Instant,
    peers: &mut [Option<TcpStream>],
    expected: std::ops::Range<usize>,
    mut admit: impl FnMut(&mut TcpStream, usize, SocketAddr, Instant) -> Result<()>,
) -> Result<()> {
    let rank = cfg.rank;
    let mut last_refusal: Option<String> = None;
    let (done_tx, done) = std::sync::mpsc::channel::<Handshaken>();
    let mut pending = 0usize;
    listener
        .set_nonblocking(true)
        .map_err(|e| CommError::Rendezvous(format!("listener: {e}")))?;
    let mut settle = |(mut s, addr, limit, proved): Handshaken, peers: &mut [Option<TcpStream>]| {
        let who = format!("a connection from {addr}");
        let joined = proved.and_then(|p| {
            if !expected.contains(&p) {
                Err(CommError::Rendezvous(format!(
                    "{who} claimed rank {p}; rank {rank} accepts ranks {expected:?} of a \
                     world of {} (do the ranks agree on WORLD_SIZE?)",
                    cfg.world
                )))
            } else if peers[p].is_some() {
                Err(CommError::Rendezvous(format!(
                    "{who} claimed rank {p}, which has already joined (two workers \
                     started with the same RANK?)"
                )))
            } else {
                admit(&mut s, p, addr, limit).map(|_| p)
            }
        });
        match joined {
            Ok(p) => peers[p] = Some(s),
            Err(e) => {
                eprintln!("comm: rank {rank} refused {who}: {e}");
                last_refusal = Some(e.to_string());
            }
        }
    };
    let missing = |peers: &[Option<TcpStream>]| -> Vec<usize> {
        expected.clone().filter(|&p| peers[p].is_none()).collect()
    };
    loop {
        while let Ok(h) = done.try_recv() {
            pending -= 1;
            settle(h, peers);
        }
        if missing(peers).is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            // Handshakes limited by the deadline end now: their refusals explain the wait.
            let grace = Instant::now() + REFUSAL_GRACE;
            while pending > 0 {
                match done.recv_timeout(grace.saturating_duration_since(Instant::now())) {
                    Ok(h) => {
                        pending -= 1;
                        settle(h, peers);
                    }
                    Err(_) => break,
                }
            }
            let missing = missing(peers);
            if missing.is_empty() {
                return Ok(());
            }
            let why = last_refusal
                .map(|r| format!("; rank {rank} refused a peer: {r}"))
                .unwrap_or_default();
            let busy = if pending > 0 {
                format!("; {pending} connections were still authenticating")
            } else {
                String::new()
            };
            return Err(CommError::Rendezvous(format!(
                "rank {rank} timed out waiting for ranks {missing:?} to connect{why}{busy}"
            )));
        }
        if pending >= MAX_PENDING_HANDSHAKES {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        match listener.accept() {
            Ok((s, addr)) => {
                let limit = deadline.min(Instant::now() + HANDSHAKE_LIMIT);
                let (tx, token, timeout) = (done_tx.clone(), cfg.token.clone(), cfg.timeout);
                // Detached: a thread still authenticating when the ranks have all joined
                // ends by its own limit, and its send then finds nobody listening.
                let spawned = std::thread::Builder::new()
                    .name("comm-handshake".into())
                    .spawn(move || {
                        let who = format!("a connection from {addr}");
                        let mut s = s;
                        let proved = s
                            .set_nonblocking(false)
                            .map_err(|e| CommError::Rendezvous(e.to_string()))
                            .and_then(|_| tune(&s, timeout))
                            .and_then(|_| {
                                handshake(&mut s, &token, rank, Role::Server, &who, limit)
                            });
                        let _ = tx.send((s, addr, limit, proved));
                    });
                match spawned {
                    Ok(_) => pending += 1,
                    Err(e) => {
                        eprintln!("comm: rank {rank} dropped a connection from {addr}: no thread for its handshake: {e}");
                    }
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock
                        | ErrorKind::Interrupted
                        | ErrorKind::ConnectionAborted
                        | ErrorKind::ConnectionReset
                ) =>
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(CommError::Rendezvous(format!("accept: {e}"))),
        }
    }
}

/// Where a non-zero rank listens for the higher ranks: `bind_addr`, except that the
/// default "0.0.0.0" becomes "::" when the master is an IPv6 address (an IPv4 listener
/// would not take the connections of ranks that reach each other over IPv6).
fn listen_host(bind_addr: &str, master: SocketAddr) -> &str {
    match bind_addr.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) if v4.is_unspecified() && master.is_ipv6() => "::",
        _ => bind_addr,
    }
}

/// A non-zero rank's listener for its peers: on a port the OS picks, or on the first free
/// one of `ports` (`GRADEX_PORT_RANGE`); a port another process holds is passed over, any
/// other failure to bind is the error.
fn bind_peer_listener(
    bind: &str,
    ports: Option<std::ops::RangeInclusive<u16>>,
) -> Result<TcpListener> {
    let cannot = |at: String, e: std::io::Error| {
        CommError::Rendezvous(format!("cannot listen on {at}: {e}"))
    };
    let Some(ports) = ports else {
        return TcpListener::bind((bind, 0)).map_err(|e| cannot(bind.to_string(), e));
    };
    let (lo, hi) = (*ports.start(), *ports.end());
    for port in ports {
        match TcpListener::bind((bind, port)) {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == ErrorKind::AddrInUse => continue,
            Err(e) => return Err(cannot(format!("{bind} port {port}"), e)),
        }
    }
    Err(CommError::Rendezvous(format!(
        "cannot listen on {bind}: every port of GRADEX_PORT_RANGE {lo}-{hi} is in use"
    )))
}

/// A non-zero rank's report of its listener to rank 0: the port (u16 LE), then 0 when it
/// listens on every interface (rank 0 then lists the address it sees the rank's
/// connection come from), or 4 or 6 and the IPv4 or IPv6 address it is bound to. A rank
/// bound to one interface (GRADEX_BIND_ADDR) must be listed at that address, which
/// need not be the one its connection to rank 0 leaves from: a second network card, say.
fn encode_listening_addr(at: SocketAddr) -> Vec<u8> {
    let mut b = at.port().to_le_bytes().to_vec();
    match at.ip() {
        ip if ip.is_unspecified() => b.push(0),
        IpAddr::V4(v4) => {
            b.push(4);
            b.extend(v4.octets());
        }
        IpAddr::V6(v6) => {
            b.push(6);
            b.extend(v6.octets());
        }
    }
    b
}

/// Rank 0's side of [`encode_listening_addr`]: the address the other ranks reach `peer`
/// at, its connection having come from `seen`.
fn read_listening_addr(
    s: &mut TcpStream,
    peer: usize,
    seen: SocketAddr,
    limit: Instant,
) -> Result<SocketAddr> {
    let io = |e| CommError::Peer {
        peer,
        op: "rendezvous",
        source: e,
    };
    let mut head = [0u8; 3];
    read_before(s, &mut head, limit).map_err(io)?;
    let port = u16::from_le_bytes([head[0], head[1]]);
    let ip = match head[2] {
        0 => seen.ip(),
        4 => {
            let mut o = [0u8; 4];
            read_before(s, &mut o, limit).map_err(io)?;
            IpAddr::from(o)
        }
        6 => {
            let mut o = [0u8; 16];
            read_before(s, &mut o, limit).map_err(io)?;
            IpAddr::from(o)
        }
        f => {
            return Err(CommError::Protocol {
                peer,
                msg: format!("listening address of family {f} (expected 0, 4 or 6)"),
            })
        }
    };
    Ok(SocketAddr::new(ip, port))
}

/// One stream per peer (None at our own index), each tuned for the collectives (no
/// Nagle, `cfg.timeout` on reads and writes). Everything here finishes by the rendezvous
/// deadline, `cfg.timeout` from now.
pub(crate) fn connect_mesh(cfg: &CommConfig) -> Result<Vec<Option<TcpStream>>> {
    let (rank, world) = (cfg.rank, cfg.world);
    // A timeout too long to add to the clock (a user's "forever") waits a century.
    let deadline = Instant::now()
        .checked_add(cfg.timeout)
        .or_else(|| Instant::now().checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .ok_or_else(|| CommError::Config(format!("timeout {:?} is too long", cfg.timeout)))?;
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
        let bound;
        let listener = match &cfg.master_listener {
            Some(l) => {
                let at = l
                    .local_addr()
                    .map_err(|e| CommError::Rendezvous(format!("rank 0's master listener: {e}")))?;
                if at.port() != cfg.master_port {
                    return Err(CommError::Config(format!(
                        "rank 0's master listener is bound to {at}, not to MASTER_PORT {}",
                        cfg.master_port
                    )));
                }
                l.as_ref()
            }
            None => {
                bound = TcpListener::bind(master).map_err(|e| {
                    CommError::Rendezvous(format!("rank 0 cannot listen on {master}: {e}"))
                })?;
                &bound
            }
        };
        let mut table = vec![String::new(); world];
        accept_peers(
            listener,
            cfg,
            deadline,
            &mut peers,
            1..world,
            |s, peer, addr, limit| {
                table[peer] = read_listening_addr(s, peer, addr, limit)?.to_string();
                Ok(())
            },
        )?;
        let encoded = table.join("\n").into_bytes();
        let mut msg = (encoded.len() as u32).to_le_bytes().to_vec();
        msg.extend(encoded);
        for (p, s) in peers.iter_mut().enumerate().skip(1) {
            if let Some(s) = s {
                // A few bytes into an empty send buffer: the collectives' write timeout
                // serves, even if the last rank joined at the deadline.
                tune(s, cfg.timeout)?;
                s.write_all(&msg).map_err(|e| CommError::Peer {
                    peer: p,
                    op: "rendezvous",
                    source: e,
                })?;
            }
        }
    } else {
        join_as_nonzero(cfg, master, deadline, &mut peers)?;
    }
    for s in peers.iter().flatten() {
        tune(s, cfg.timeout)?;
    }
    Ok(peers)
}

/// A non-zero rank's part: authenticate to rank 0 and report our listening address, receive
/// the address table, connect to the lower non-zero ranks and accept the higher ones.
fn join_as_nonzero(
    cfg: &CommConfig,
    master: SocketAddr,
    deadline: Instant,
    peers: &mut [Option<TcpStream>],
) -> Result<()> {
    let (rank, world) = (cfg.rank, cfg.world);
    let bind = listen_host(&cfg.bind_addr, master);
    let listener = bind_peer_listener(bind, cfg.listen_ports.clone())?;
    let listening = listener
        .local_addr()
        .map_err(|e| CommError::Rendezvous(e.to_string()))?;
    let mut s = connect_before(master, deadline)?;
    tune(&s, cfg.timeout)?;
    let zero = handshake(&mut s, &cfg.token, rank, Role::Client, "rank 0", deadline)?;
    if zero != 0 {
        return Err(CommError::Rendezvous(format!(
            "the master answered as rank {zero}"
        )));
    }
    let io = |e: std::io::Error| {
        let source = if e.kind() == ErrorKind::UnexpectedEof {
            std::io::Error::new(
                e.kind(),
                "rank 0 closed the connection before sending the address table: it refused \
                 this rank (out of range or already joined; see rank 0's log) or failed",
            )
        } else {
            e
        };
        CommError::Peer {
            peer: 0,
            op: "rendezvous",
            source,
        }
    };
    write_before(&mut s, &encode_listening_addr(listening), deadline).map_err(io)?;
    // Rank 0 answers once every rank has joined: this waits up to the deadline.
    let mut len = [0u8; 4];
    read_before(&mut s, &mut len, deadline).map_err(io)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > 64 * world + 64 {
        return Err(CommError::Protocol {
            peer: 0,
            msg: format!("address table of {len} bytes for {world} ranks"),
        });
    }
    let mut table = vec![0u8; len];
    read_before(&mut s, &mut table, deadline).map_err(io)?;
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
        let got = handshake(
            &mut c,
            &cfg.token,
            rank,
            Role::Client,
            &format!("rank {p}"),
            deadline,
        )?;
        if got != p {
            return Err(CommError::Rendezvous(format!(
                "{addr} answered as rank {got}, expected {p}"
            )));
        }
        peers[p] = Some(c);
    }
    accept_peers(
        &listener,
        cfg,
        deadline,
        peers,
        rank + 1..world,
        |_, _, _, _| Ok(()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::HANDSHAKE_VERSION;

    /// Silent strangers at the master's port (connected, sending nothing) used to hold
    /// rank 0's listener for their whole handshake limit one after another: three of them
    /// delayed the rendezvous by 15 s. Authenticated on threads of their own, they delay
    /// nobody.
    #[test]
    fn silent_strangers_do_not_delay_the_ranks() {
        let timeout = Duration::from_secs(30);
        let job = CommConfig::loopback_job(2, b"tok").unwrap();
        let port = job[0].master_port;
        let cfg = |rank: usize| CommConfig {
            timeout,
            ..job[rank].clone()
        };
        let (c0, c1) = (cfg(0), cfg(1));
        let start = Instant::now();
        let (r0, r1, strangers) = std::thread::scope(|s| {
            let rank0 = s.spawn(|| connect_mesh(&c0));
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            // Connected before rank 1, so they are first in the accept queue.
            let strangers: Vec<TcpStream> = (0..3)
                .map(|_| connect_before(addr, Instant::now() + timeout).unwrap())
                .collect();
            std::thread::sleep(Duration::from_millis(100));
            let rank1 = s.spawn(|| connect_mesh(&c1));
            (rank0.join().unwrap(), rank1.join().unwrap(), strangers)
        });
        let took = start.elapsed();
        drop(strangers);
        let (p0, p1) = (r0.expect("rank 0"), r1.expect("rank 1"));
        assert!(p0[1].is_some() && p1[0].is_some());
        assert!(
            took < HANDSHAKE_LIMIT,
            "the rendezvous took {took:?} with three silent strangers waiting"
        );
    }

    /// Ranks bound to one interface (GRADEX_BIND_ADDR) are listed at that address, not at
    /// the one their connection to rank 0 came from: here 127.0.0.2, while connections to
    /// the master at 127.0.0.1 leave from 127.0.0.1, where nothing of theirs listens.
    /// Rank 2 reaches rank 1 only through the address rank 1 reported.
    #[test]
    fn a_rank_bound_to_one_interface_is_reached_there() {
        let job = CommConfig::loopback_job(3, b"tok").unwrap();
        let configs: Vec<CommConfig> = job
            .into_iter()
            .map(|c| CommConfig {
                bind_addr: if c.rank == 0 {
                    c.bind_addr
                } else {
                    "127.0.0.2".into()
                },
                timeout: Duration::from_secs(10),
                ..c
            })
            .collect();
        let meshes: Vec<Result<Vec<Option<TcpStream>>>> = std::thread::scope(|s| {
            let hs: Vec<_> = configs
                .iter()
                .map(|c| s.spawn(move || connect_mesh(c)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let meshes: Vec<_> = meshes
            .into_iter()
            .map(|m| m.expect("every rank joins"))
            .collect();
        let to_1 = meshes[2][1].as_ref().expect("rank 2 reached rank 1");
        assert_eq!(to_1.peer_addr().unwrap().ip().to_string(), "127.0.0.2");
    }

    /// GRADEX_PORT_RANGE: the non-zero ranks listen on ports of the range, passing over
    /// one another process holds; with every port held, the error names the range.
    #[test]
    fn ranks_listen_on_the_port_range_they_are_given() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let lo = held.local_addr().unwrap().port();
        let hi = lo.saturating_add(64);
        let l = bind_peer_listener("127.0.0.1", Some(lo..=hi)).unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(port > lo && port <= hi, "{port} in {lo}-{hi}, {lo} held");
        let e = bind_peer_listener("127.0.0.1", Some(lo..=lo))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!(
                "every port of GRADEX_PORT_RANGE {lo}-{lo} is in use"
            )),
            "{e}"
        );
        drop(l);

        let job = CommConfig::loopback_job(3, b"tok").unwrap();
        let configs: Vec<CommConfig> = job
            .into_iter()
            .map(|c| CommConfig {
                listen_ports: Some(lo..=hi),
                timeout: Duration::from_secs(10),
                ..c
            })
            .collect();
        let meshes: Vec<Vec<Option<TcpStream>>> = std::thread::scope(|s| {
            let hs: Vec<_> = configs
                .iter()
                .map(|c| s.spawn(move || connect_mesh(c)))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap().expect("every rank joins"))
                .collect()
        });
        // Rank 2 connected to rank 1's listener; rank 1 accepted on it.
        let at_1 = meshes[2][1].as_ref().unwrap().peer_addr().unwrap().port();
        assert_eq!(
            meshes[1][2].as_ref().unwrap().local_addr().unwrap().port(),
            at_1
        );
        assert!(
            at_1 > lo && at_1 <= hi,
            "rank 1 listened on {at_1}, not in {lo}-{hi}"
        );
    }

    #[test]
    fn the_listening_address_report_round_trips() {
        let (listener, port) = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let p = l.local_addr().unwrap().port();
            (l, p)
        };
        let seen: SocketAddr = "192.0.2.7:4000".parse().unwrap();
        for (at, want) in [
            ("0.0.0.0:1234", "192.0.2.7:1234"),
            ("[::]:1234", "192.0.2.7:1234"),
            ("10.1.0.2:1234", "10.1.0.2:1234"),
            ("[fd00::2]:80", "[fd00::2]:80"),
        ] {
            let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            c.write_all(&encode_listening_addr(at.parse().unwrap()))
                .unwrap();
            let (mut s, _) = listener.accept().unwrap();
            let got = read_listening_addr(&mut s, 1, seen, Instant::now() + HANDSHAKE_LIMIT);
            assert_eq!(got.unwrap().to_string(), want, "{at}");
        }
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.write_all(&[1, 2, 5]).unwrap();
        let (mut s, _) = listener.accept().unwrap();
        let e = read_listening_addr(&mut s, 1, seen, Instant::now() + HANDSHAKE_LIMIT)
            .unwrap_err()
            .to_string();
        assert!(e.contains("family 5"), "{e}");
        let v6: SocketAddr = "[::1]:29500".parse().unwrap();
        assert_eq!(listen_host("0.0.0.0", v6), "::");
        assert_eq!(listen_host("0.0.0.0", seen), "0.0.0.0");
        assert_eq!(listen_host("10.1.0.2", v6), "10.1.0.2");
    }

    /// A client that sends a valid start of a hello and then a byte every 200 ms: under
    /// per-read socket timeouts alone it held rank 0 for the whole hello (about 8 s here)
    /// however short the rendezvous timeout.
    #[test]
    fn a_trickling_client_cannot_hold_rank_0_past_the_deadline() {
        let timeout = Duration::from_millis(1500);
        let mut job = CommConfig::loopback_job(2, b"tok").unwrap();
        let port = job[0].master_port;
        let cfg = CommConfig {
            timeout,
            ..job.swap_remove(0)
        };
        let start = Instant::now();
        let (result, ()) = std::thread::scope(|s| {
            let rank0 = s.spawn(|| connect_mesh(&cfg));
            let trickler = s.spawn(|| {
                let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
                let mut c = connect_before(addr, Instant::now() + timeout).unwrap();
                let mut hello = b"GXH".to_vec();
                hello.push(HANDSHAKE_VERSION);
                hello.extend([1u8; 40]);
                for b in hello {
                    if c.write_all(&[b]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            });
            (rank0.join().unwrap(), trickler.join().unwrap())
        });
        let e = result.expect_err("rank 1 never joined").to_string();
        assert!(
            start.elapsed() < timeout + Duration::from_millis(1000),
            "rank 0 returned after {:?}",
            start.elapsed()
        );
        assert!(e.contains("timed out waiting for ranks [1]"), "{e}");
        assert!(e.contains("rank 0 refused a peer"), "{e}");
        assert!(e.contains("before the deadline"), "{e}");
    }
}
