//! Mutual challenge-response authentication with a shared token (HMAC-SHA256).
//!
//! The connecting side (the client) sends a hello: magic, handshake version, its rank and
//! a fresh random nonce. The accepting side (the server) answers with a hello of its own.
//! The client then proves it knows the token with an HMAC, under the client's label, of
//! both nonces and both ranks; the server checks that proof *before* it proves anything
//! itself, then answers with a verdict byte and, if it accepted, its own proof under the
//! server's label. Binding the direction, both nonces and both ranks means no proof from
//! one connection or one direction is valid in another: a hello and proof reflected back
//! to the rank that sent them, or relayed from a second connection, are refused. A peer
//! claiming the rank of the side it talks to is refused outright. The token itself never
//! crosses the wire.
//!
//! Every read and write has to finish by the caller's deadline (see [`read_before`]), so
//! a silent or trickling peer cannot hold a rank past it.

use crate::error::{CommError, Result};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

/// Version 4: the same handshake as version 3, for frame version 3 (a point-to-point
/// refusal) and the frame limits compared at connect (`Communicator::connect`): ranks of
/// builds before and after refuse each other at the rendezvous instead of at their
/// first frame. Version 3: the same handshake as version 2, after which a rank reports its listening
/// address, not only its port, to rank 0 (`rendezvous.rs`); the version is what makes
/// ranks of builds before and after that change refuse each other at once. Version 2:
/// role-bound proofs over both nonces and ranks, and a verdict before the server's proof.
/// (Version 1, without magic or version on the wire, had one proof label for both sides
/// and MACed only the other side's nonce and the prover's rank.)
pub(crate) const HANDSHAKE_VERSION: u8 = 4;
const MAGIC: [u8; 3] = *b"GXH";
const NONCE: usize = 32;
const MAC: usize = 32;
/// Magic, version, rank (u64 LE), nonce.
const HELLO: usize = 4 + 8 + NONCE;

/// The server's verdict on the client's proof.
const ACCEPTED: u8 = 1;
const REFUSED_PROOF: u8 = 2;
const REFUSED_RANK: u8 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Opened the connection; proves first.
    Client,
    /// Accepted it; proves only once the client has.
    Server,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::Client => b"gradex-handshake-v2 client proof",
            Role::Server => b"gradex-handshake-v2 server proof",
        }
    }
}

struct Hello {
    rank: u64,
    nonce: [u8; NONCE],
}

impl Hello {
    fn encode(&self) -> [u8; HELLO] {
        let mut b = [0u8; HELLO];
        b[..3].copy_from_slice(&MAGIC);
        b[3] = HANDSHAKE_VERSION;
        b[4..12].copy_from_slice(&self.rank.to_le_bytes());
        b[12..].copy_from_slice(&self.nonce);
        b
    }
}

/// The proof `role` gives: HMAC(token, label ‖ client nonce ‖ server nonce ‖ client rank
/// ‖ server rank).
fn proof(token: &[u8], role: Role, client: &Hello, server: &Hello) -> Result<Hmac<Sha256>> {
    let mut m = Hmac::<Sha256>::new_from_slice(token)
        .map_err(|e| CommError::Config(format!("bad token: {e}")))?;
    m.update(role.label());
    m.update(&client.nonce);
    m.update(&server.nonce);
    m.update(&client.rank.to_le_bytes());
    m.update(&server.rank.to_le_bytes());
    Ok(m)
}

/// Reads exactly `buf.len()` bytes by `deadline`. The read timeout is set to the time left
/// before every read, so a peer that trickles a byte at a time cannot stretch it (a plain
/// per-read socket timeout restarts with every byte).
pub(crate) fn read_before(
    s: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> std::io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        s.set_read_timeout(Some(time_left(deadline)?))?;
        match s.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "the peer closed the connection",
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // What Linux reports when the read timeout expires.
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Err(timed_out()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` by `deadline` (handshake messages are small: one write).
pub(crate) fn write_before(
    s: &mut TcpStream,
    buf: &[u8],
    deadline: Instant,
) -> std::io::Result<()> {
    s.set_write_timeout(Some(time_left(deadline)?))?;
    s.write_all(buf).map_err(|e| {
        if e.kind() == ErrorKind::WouldBlock {
            timed_out()
        } else {
            e
        }
    })
}

fn timed_out() -> std::io::Error {
    std::io::Error::new(ErrorKind::TimedOut, "no answer before the deadline")
}

/// The time left before `deadline`, or a timeout error if none is (a zero socket timeout
/// is an error on Linux, not "expired").
fn time_left(deadline: Instant) -> std::io::Result<std::time::Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(timed_out())
    } else {
        Ok(left)
    }
}

fn auth(who: &str, msg: String) -> CommError {
    CommError::Auth {
        who: who.to_string(),
        msg,
    }
}

fn io(who: &str, e: std::io::Error) -> CommError {
    auth(who, format!("connection failed during the handshake: {e}"))
}

/// Reads and checks the other side's hello: magic and version first (4 bytes), so that
/// a stranger or another build is refused at once instead of waiting for bytes it will
/// never send.
fn read_hello(s: &mut TcpStream, who: &str, deadline: Instant) -> Result<Hello> {
    let mut b = [0u8; HELLO];
    read_before(s, &mut b[..4], deadline).map_err(|e| io(who, e))?;
    if b[..3] != MAGIC {
        return Err(auth(
            who,
            format!("not a gradex handshake (it began {:02x?})", &b[..4]),
        ));
    }
    if b[3] != HANDSHAKE_VERSION {
        return Err(auth(
            who,
            format!(
                "handshake version {} (this build speaks {HANDSHAKE_VERSION}): every rank \
                 must run the same build",
                b[3]
            ),
        ));
    }
    read_before(s, &mut b[4..], deadline).map_err(|e| io(who, e))?;
    let mut rank = [0u8; 8];
    rank.copy_from_slice(&b[4..12]);
    let mut nonce = [0u8; NONCE];
    nonce.copy_from_slice(&b[12..]);
    Ok(Hello {
        rank: u64::from_le_bytes(rank),
        nonce,
    })
}

/// Runs the handshake in `role` (both sides call it), every step by `deadline`.
/// `my_rank` is sent; the peer's rank is returned once each side has proved it knows
/// `token`. A peer claiming `my_rank` is refused.
pub(crate) fn handshake(
    stream: &mut TcpStream,
    token: &[u8],
    my_rank: usize,
    role: Role,
    who: &str,
    deadline: Instant,
) -> Result<usize> {
    // HMAC takes an empty key, which anyone can "know".
    if token.is_empty() {
        return Err(CommError::Config("the job token is empty".into()));
    }
    let mut nonce = [0u8; NONCE];
    getrandom::getrandom(&mut nonce)
        .map_err(|e| CommError::Config(format!("no randomness for nonces: {e}")))?;
    let mine = Hello {
        rank: my_rank as u64,
        nonce,
    };
    let write = |s: &mut TcpStream, b: &[u8]| write_before(s, b, deadline).map_err(|e| io(who, e));
    let same_rank = |r: u64| {
        auth(
            who,
            format!("the peer claims this side's own rank {r} (a reflected handshake?); refused"),
        )
    };
    let peer = match role {
        Role::Client => {
            write(stream, &mine.encode())?;
            let theirs = read_hello(stream, who, deadline)?;
            if theirs.rank == mine.rank {
                return Err(same_rank(theirs.rank));
            }
            write(
                stream,
                &proof(token, Role::Client, &mine, &theirs)?
                    .finalize()
                    .into_bytes(),
            )?;
            let mut verdict = [0u8; 1];
            read_before(stream, &mut verdict, deadline).map_err(|e| io(who, e))?;
            match verdict[0] {
                ACCEPTED => {}
                REFUSED_PROOF => {
                    return Err(auth(
                        who,
                        "it refused this rank's proof: the two were given different job \
                         tokens"
                            .into(),
                    ))
                }
                REFUSED_RANK => {
                    return Err(auth(
                        who,
                        format!("it refused rank {my_rank} as its own rank"),
                    ))
                }
                v => return Err(auth(who, format!("unknown handshake verdict {v}"))),
            }
            let mut got = [0u8; MAC];
            read_before(stream, &mut got, deadline).map_err(|e| io(who, e))?;
            proof(token, Role::Server, &mine, &theirs)?
                .verify_slice(&got)
                .map_err(|_| {
                    auth(
                        who,
                        format!(
                            "peer claiming rank {} does not know the job token; refused",
                            theirs.rank
                        ),
                    )
                })?;
            theirs.rank
        }
        Role::Server => {
            let theirs = read_hello(stream, who, deadline)?;
            write(stream, &mine.encode())?;
            let mut got = [0u8; MAC];
            read_before(stream, &mut got, deadline).map_err(|e| io(who, e))?;
            // The verdict is sent before the connection is dropped, so that a rank
            // misconfigured with another token learns why; it tells a stranger nothing
            // that the closed connection would not.
            if theirs.rank == mine.rank {
                let _ = write_before(stream, &[REFUSED_RANK], deadline);
                return Err(same_rank(theirs.rank));
            }
            if proof(token, Role::Client, &theirs, &mine)?
                .verify_slice(&got)
                .is_err()
            {
                let _ = write_before(stream, &[REFUSED_PROOF], deadline);
                return Err(auth(
                    who,
                    format!(
                        "peer claiming rank {} does not know the job token; refused",
                        theirs.rank
                    ),
                ));
            }
            let mut reply = vec![ACCEPTED];
            reply.extend(
                proof(token, Role::Server, &theirs, &mine)?
                    .finalize()
                    .into_bytes(),
            );
            write(stream, &reply)?;
            theirs.rank
        }
    };
    usize::try_from(peer).map_err(|_| auth(who, format!("peer claims rank {peer}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Duration;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    /// A connected pair: (the side that connected, the side that accepted).
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    #[test]
    fn ranks_with_the_same_token_learn_each_others_rank() {
        let (mut c, mut s) = pair();
        let server = std::thread::spawn(move || {
            handshake(&mut s, b"tok", 0, Role::Server, "client", soon())
        });
        let got = handshake(&mut c, b"tok", 3, Role::Client, "server", soon()).unwrap();
        assert_eq!(got, 0);
        assert_eq!(server.join().unwrap().unwrap(), 3);
    }

    #[test]
    fn a_wrong_token_is_refused_on_both_sides_and_the_server_proves_nothing() {
        let (mut c, mut s) = pair();
        let server = std::thread::spawn(move || {
            handshake(&mut s, b"right", 0, Role::Server, "client", soon())
        });
        let e = handshake(&mut c, b"wrong", 1, Role::Client, "rank 0", soon())
            .unwrap_err()
            .to_string();
        assert!(e.contains("different job tokens"), "{e}");
        let e = server.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("does not know the job token"), "{e}");
    }

    /// The attack version 1 let through: whatever a rank sends is echoed back to it —
    /// its hello as the server's hello, its proof as the server's proof.
    #[test]
    fn a_reflected_handshake_is_refused() {
        for rewrite_rank in [false, true] {
            let (mut c, mut attacker) = pair();
            let mirror = std::thread::spawn(move || {
                let mut hello = [0u8; HELLO];
                attacker.read_exact(&mut hello).unwrap();
                if rewrite_rank {
                    // Claim another rank, so that the rank check alone cannot catch it.
                    hello[4..12].copy_from_slice(&0u64.to_le_bytes());
                }
                attacker.write_all(&hello).unwrap();
                let mut p = [0u8; MAC];
                if attacker.read_exact(&mut p).is_ok() {
                    let _ = attacker.write_all(&[ACCEPTED]);
                    let _ = attacker.write_all(&p);
                }
            });
            let e = handshake(&mut c, b"tok", 1, Role::Client, "rank 0", soon())
                .unwrap_err()
                .to_string();
            let want = if rewrite_rank {
                "does not know the job token"
            } else {
                "own rank"
            };
            assert!(e.contains(want), "{e}");
            drop(c);
            mirror.join().unwrap();
        }
        // Against a server: the hello it sent on one connection replayed as a client's
        // hello on another. It proves nothing before the client has, and refuses.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            (0..2)
                .map(|_| {
                    let (mut s, _) = l.accept().unwrap();
                    handshake(&mut s, b"tok", 0, Role::Server, "a stranger", soon())
                })
                .collect::<Vec<_>>()
        });
        let mut a = TcpStream::connect(addr).unwrap();
        a.write_all(
            &Hello {
                rank: 7,
                nonce: [9; NONCE],
            }
            .encode(),
        )
        .unwrap();
        let mut server_hello = [0u8; HELLO];
        a.read_exact(&mut server_hello).unwrap();
        a.write_all(&[0u8; MAC]).unwrap();
        let mut rest = Vec::new();
        let _ = a.read_to_end(&mut rest);
        assert_eq!(
            rest,
            [REFUSED_PROOF],
            "the server must refuse without a proof"
        );
        let mut b = TcpStream::connect(addr).unwrap();
        b.write_all(&server_hello).unwrap();
        let mut skip = [0u8; HELLO];
        b.read_exact(&mut skip).unwrap();
        b.write_all(&[0u8; MAC]).unwrap();
        let mut rest = Vec::new();
        let _ = b.read_to_end(&mut rest);
        assert_eq!(
            rest,
            [REFUSED_RANK],
            "the server must refuse without a proof"
        );
        let results = server.join().unwrap();
        assert!(results.iter().all(|r| r.is_err()), "{results:?}");
    }

    #[test]
    fn a_silent_or_trickling_peer_fails_by_the_deadline() {
        let (mut c, mut s) = pair();
        let trickle = std::thread::spawn(move || {
            // Valid magic, then a byte every 100 ms: each read sees data well within
            // any per-read timeout.
            let mut hello = Hello {
                rank: 1,
                nonce: [0; NONCE],
            }
            .encode()
            .to_vec();
            hello.truncate(20);
            for b in hello {
                if c.write_all(&[b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let start = Instant::now();
        let e = handshake(
            &mut s,
            b"tok",
            0,
            Role::Server,
            "a stranger",
            Instant::now() + Duration::from_millis(500),
        )
        .unwrap_err()
        .to_string();
        drop(s);
        // The whole trickle takes 2 s; ending well before it is the point. The margin
        // over the 500 ms deadline is for a loaded test machine's scheduling.
        assert!(
            start.elapsed() < Duration::from_millis(1500),
            "{:?}",
            start.elapsed()
        );
        assert!(e.contains("deadline"), "{e}");
        trickle.join().unwrap();
    }

    #[test]
    fn strangers_and_other_versions_are_refused_at_once() {
        for (bytes, want) in [
            (b"GET / HTTP/1.1\r\n\r\n".to_vec(), "not a gradex handshake"),
            (b"GXH\x01".to_vec(), "handshake version 1"),
        ] {
            let (mut c, mut s) = pair();
            c.write_all(&bytes).unwrap();
            let e = handshake(&mut s, b"tok", 0, Role::Server, "a stranger", soon())
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
        }
    }
}
