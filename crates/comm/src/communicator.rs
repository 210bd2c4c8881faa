//! The communicator: one authenticated TCP connection per peer, and the collectives.
//! Every collective must be called in the same order on every rank; each call gets a
//! sequence tag that receivers check, so a rank that diverges fails loudly instead of
//! mixing up messages.

use crate::arrival_sum::{ArrivalSum, ARRIVAL_MAX_PARTS};
use crate::auth::read_before;
use crate::blocks::GatherScratch;
use crate::counters::{ByteCounters, Collective};
use crate::error::{CommError, Result};
use crate::frame::{
    decode_header, encode_header, FrameHeader, ABORT_MAX, HEADER_LEN, KIND_ABORT, KIND_DATA,
    KIND_REFUSED, REFUSED_LEN,
};
use crate::rendezvous::connect_mesh;
use crate::sparse::{sum_encoded_with, top_into, SparseVec, SumScratch, FOLD_MAX_PARTS};
use crate::stream_merge::StreamMerge;
use crate::trace::{Trace, TraceEvent};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct CommConfig {
    pub rank: usize,
    pub world: usize,
    pub master_addr: String,
    pub master_port: u16,
    /// Address this rank listens on for its peers (all interfaces by default).
    pub bind_addr: String,
    /// Ports a non-zero rank may listen on for its peers, tried in order until one is
    /// free (`GRADEX_PORT_RANGE=lo-hi`, for a firewall that opens only those); `None`:
    /// one the OS picks. Rank 0 listens on `master_port` whatever this says.
    pub listen_ports: Option<std::ops::RangeInclusive<u16>>,
    /// This rank's index among the job's ranks on its machine (`LOCAL_RANK`), which a
    /// trainer uses to pick its GPU; `None` where the launcher did not say.
    pub local_rank: Option<usize>,
    /// Shared secret every rank must prove it knows.
    pub token: Vec<u8>,
    /// Limit on every blocking operation: the rendezvous's deadline, and after it the
    /// longest a send or receive waits without a byte moving (a peer that trickles bytes
    /// is slow, not gone: no deadline is put on a whole collective, whose time grows with
    /// its size and the link).
    pub timeout: Duration,
    /// Largest frame payload a peer may announce.
    pub max_frame: u64,
    /// Rank 0's listener, already bound to `master_port` (see `master.rs`): set by
    /// whoever chose the port, so that no other process can take it before rank 0
    /// listens. Without one, rank 0 binds `master_addr:master_port` itself.
    pub master_listener: Option<Arc<TcpListener>>,
}

impl CommConfig {
    /// One rank of a job on this machine's loopback interface (tests, benchmarks, a
    /// one-process run): master and listener on 127.0.0.1, a 60 s timeout, frames up to
    /// 4 GiB. Port 0 with world size 1 needs no free port. Fields can be set afterwards.
    pub fn loopback(rank: usize, world: usize, port: u16, token: &[u8]) -> CommConfig {
        CommConfig {
            rank,
            world,
            master_addr: "127.0.0.1".into(),
            master_port: port,
            bind_addr: "127.0.0.1".into(),
            listen_ports: None,
            local_rank: None,
            token: token.to_vec(),
            timeout: Duration::from_secs(60),
            max_frame: 1 << 32,
            master_listener: None,
        }
    }

    /// [`CommConfig::loopback`] for every rank of a job of threads in this process, on a
    /// freshly bound master listener that rank 0's configuration holds, so no other
    /// process can take the port before rank 0 listens (see `master.rs`).
    pub fn loopback_job(world: usize, token: &[u8]) -> std::io::Result<Vec<CommConfig>> {
        let listener = Arc::new(crate::master::bind_loopback_master()?);
        let port = listener.local_addr()?.port();
        Ok((0..world)
            .map(|rank| CommConfig {
                master_listener: (rank == 0).then(|| listener.clone()),
                ..CommConfig::loopback(rank, world, port, token)
            })
            .collect())
    }

    /// From `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, `GRADEX_TOKEN` (or
    /// `GRADEX_TOKEN_FILE`), optional `LOCAL_RANK`, `GRADEX_BIND_ADDR`,
    /// `GRADEX_PORT_RANGE` (`lo-hi`), `GRADEX_TIMEOUT_SECS` and `GRADEX_MAX_FRAME`
    /// (bytes), and on rank 0 an optional `GRADEX_MASTER_FD` (the master listener a
    /// launcher bound and passed down: see `master.rs`). A value that does not parse or is
    /// out of range is an error naming the variable and the value, never a default.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`CommConfig::from_env`] with the variables read through `get`.
    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let var = |k: &str| {
            get(k).ok_or_else(|| {
                CommError::Config(format!(
                    "{k} is not set (see the README on launching workers)"
                ))
            })
        };
        let num = |k: &str| -> Result<usize> {
            let v = var(k)?;
            v.trim()
                .parse()
                .map_err(|_| CommError::Config(format!("{k}={v:?} is not a non-negative integer")))
        };
        let token = match (get("GRADEX_TOKEN"), get("GRADEX_TOKEN_FILE")) {
            (Some(t), _) => {
                if t.is_empty() {
                    return Err(CommError::Config(
                        "GRADEX_TOKEN is set but empty: set it to the job's shared token".into(),
                    ));
                }
                t.into_bytes()
            }
            (_, Some(f)) => {
                let mut t = std::fs::read(&f)
                    .map_err(|e| CommError::Config(format!("GRADEX_TOKEN_FILE {f}: {e}")))?;
                // One line ending, as `echo token > file` leaves it: the token is the
                // same whether it came from a file or from GRADEX_TOKEN.
                if t.ends_with(b"\n") {
                    t.pop();
                    if t.ends_with(b"\r") {
                        t.pop();
                    }
                }
                if t.is_empty() {
                    return Err(CommError::Config(format!(
                        "GRADEX_TOKEN_FILE {f} holds an empty token"
                    )));
                }
                t
            }
            _ => {
                return Err(CommError::Config(
                    "set GRADEX_TOKEN or GRADEX_TOKEN_FILE to the job's shared token".into(),
                ))
            }
        };
        let timeout = match get("GRADEX_TIMEOUT_SECS") {
            None => Duration::from_secs(60),
            Some(t) => t
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    CommError::Config(format!(
                        "GRADEX_TIMEOUT_SECS={t:?} is not a finite number of seconds above 0"
                    ))
                })?,
        };
        let port = var("MASTER_PORT")?;
        let master_port = port.trim().parse::<u16>().map_err(|_| {
            CommError::Config(format!(
                "MASTER_PORT={port:?} is not a port number (0-65535)"
            ))
        })?;
        let listen_ports = get("GRADEX_PORT_RANGE")
            .map(|r| parse_port_range(&r))
            .transpose()?;
        let max_frame = match get("GRADEX_MAX_FRAME") {
            None => 1 << 32,
            Some(m) => m
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|&m| m > 0)
                .ok_or_else(|| {
                    CommError::Config(format!(
                        "GRADEX_MAX_FRAME={m:?} is not a number of bytes above 0"
                    ))
                })?,
        };
        let mut cfg = CommConfig {
            rank: num("RANK")?,
            world: num("WORLD_SIZE")?,
            master_addr: var("MASTER_ADDR")?,
            master_port,
            bind_addr: get("GRADEX_BIND_ADDR").unwrap_or_else(|| "0.0.0.0".into()),
            listen_ports,
            local_rank: get("LOCAL_RANK").map(|_| num("LOCAL_RANK")).transpose()?,
            token,
            timeout,
            max_frame,
            master_listener: None,
        };
        if cfg.world > MAX_WORLD {
            return Err(CommError::Config(format!(
                "WORLD_SIZE {} is over the {MAX_WORLD} ranks this communicator supports",
                cfg.world
            )));
        }
        if cfg.world == 0 || cfg.rank >= cfg.world {
            return Err(CommError::Config(format!(
                "RANK {} is not in 0..WORLD_SIZE ({})",
                cfg.rank, cfg.world
            )));
        }
        // A machine holds at most the whole job.
        if let Some(l) = cfg.local_rank.filter(|&l| l >= cfg.world) {
            return Err(CommError::Config(format!(
                "LOCAL_RANK {l} is not in 0..WORLD_SIZE ({})",
                cfg.world
            )));
        }
        if let Some(fd) = get(crate::master::MASTER_FD_ENV) {
            if cfg.rank != 0 {
                return Err(CommError::Config(format!(
                    "{}={fd:?} is set on rank {}: only rank 0 listens as the master",
                    crate::master::MASTER_FD_ENV,
                    cfg.rank
                )));
            }
            cfg.master_listener = Some(crate::master::adopt_master_listener(&fd, cfg.master_port)?);
        }
        Ok(cfg)
    }
}

/// `GRADEX_PORT_RANGE`'s `lo-hi` (both included; one port alone is `p-p`).
fn parse_port_range(r: &str) -> Result<std::ops::RangeInclusive<u16>> {
    let bad = |why: &str| {
        CommError::Config(format!(
            "GRADEX_PORT_RANGE={r:?} {why} (expected lo-hi, e.g. 29600-29699)"
        ))
    };
    let (lo, hi) = r.trim().split_once('-').ok_or_else(|| bad("has no '-'"))?;
    let port = |p: &str| p.trim().parse::<u16>().ok().filter(|&p| p > 0);
    match (port(lo), port(hi)) {
        (Some(lo), Some(hi)) if lo <= hi => Ok(lo..=hi),
        (Some(_), Some(_)) => Err(bad("is empty: its first port is above its last")),
        _ => Err(bad("names a port outside 1-65535")),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Average,
}

pub struct Communicator {
    rank: usize,
    world: usize,
    max_frame: u64,
    /// The bound on every blocking call (from the configuration).
    timeout: Duration,
    writers: Vec<Option<TcpStream>>,
    readers: Vec<Option<TcpStream>>,
    counters: ByteCounters,
    /// Sequence number of the collectives called so far (the same on every rank).
    seq: u32,
    /// Point-to-point messages are matched per pair, not globally: counts per peer.
    p2p_sent: Vec<u32>,
    p2p_received: Vec<u32>,
    /// Writers a send failed on, possibly mid-frame: no abort notice goes there (its
    /// bytes could complete the interrupted frame's payload).
    dirty: Vec<bool>,
    /// Set once a collective failed because of a peer: (the failed rank, the cause).
    /// The sockets are shut, and every later call returns this.
    aborted: Option<(usize, String)>,
    /// Buffers the allgather and TopKAllReduce reuse from call to call (see `blocks.rs`
    /// for why): they hold the capacity of the largest call so far, about 2P times its
    /// block (the gathered blocks and the last message each way). `allgather_v` then
    /// copies the blocks out once more, into the vectors it returns.
    scratch: Scratch,
    /// gTopKAllReduce's buffers, kept between calls.
    gtopk: GtopkScratch,
    /// When TopKAllReduce sums what it gathered.
    topk_sum: TopkSum,
    /// TopKAllReduce calls that stopped summing as the blocks arrived (`TopkSum::Auto`
    /// found the merges behind the bytes) and summed after the gather.
    topk_arrival_stops: u64,
    /// The sparse collectives' steps, when asked for (`trace.rs`).
    trace: Trace,
}

/// When [`Communicator::topk_allreduce`] sums the blocks it gathers. Every choice gives
/// the same bits; they differ in time only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TopkSum {
    /// The default. Up to 4 ranks, as the blocks arrive (as much work as the fold after
    /// the gather: 0.69-0.71 against 0.70 ms for 4 × 16,777 entries, `sparse_merge_bench`,
    /// now done while waiting); up to [`ARRIVAL_MAX_PARTS`], as they arrive until a block
    /// finds another complete behind it (the merges do not keep up with the bytes, and
    /// their O(P² k) work is more than the radix sort's O(P k)), then after the gather;
    /// beyond, after the gather.
    #[default]
    Auto,
    /// Always as the blocks arrive, at any world size and however fast they come.
    OnArrival,
    /// Always after the gather (the radix sort, or the fold of up to 4 parts).
    AfterGather,
}

impl TopkSum {
    /// At `world` ranks: whether a call starts summing as the blocks arrive, and whether
    /// it may then stop and sum after the gather (only such calls can count in
    /// [`Communicator::topk_arrival_stops`]).
    pub fn plan(self, world: usize) -> (bool, bool) {
        match self {
            // Up to 4 ranks the merges are the fold the sum after the gather does anyway.
            TopkSum::Auto if world <= FOLD_MAX_PARTS => (true, false),
            TopkSum::Auto => (world <= ARRIVAL_MAX_PARTS, world <= ARRIVAL_MAX_PARTS),
            TopkSum::OnArrival => (true, false),
            TopkSum::AfterGather => (false, false),
        }
    }
}

impl std::str::FromStr for TopkSum {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(TopkSum::Auto),
            "arrival" => Ok(TopkSum::OnArrival),
            "after" => Ok(TopkSum::AfterGather),
            _ => Err(format!(
                "{s:?} is not a time for TopKAllReduce's sum: auto, arrival or after"
            )),
        }
    }
}

/// What [`Communicator::allgather_v`] and [`Communicator::topk_allreduce`] keep between
/// calls: this rank's encoded vector, the gather's buffers, the sum's sort arrays and the
/// runs of the sum done as blocks arrive.
#[derive(Debug, Default)]
struct Scratch {
    local: Vec<u8>,
    gather: GatherScratch,
    sum: SumScratch,
    arrival: ArrivalSum,
}

/// What gTopKAllReduce keeps between calls: this rank's running ⊤ merge, the sum with
/// a child's entries as they arrive, the magnitudes the cut selects
/// among, and the wire form of what this rank receives and sends up (at rank 0, down).
/// At k = 16,777 each is 67-268 kB; made afresh at every tree level, they are new
/// memory on each call, at rank 0 too, whose ⌈log₂P⌉ merges in a row lie on the
/// collective's critical path.
#[derive(Debug, Default)]
struct GtopkScratch {
    cur: SparseVec,
    merge: StreamMerge,
    mags: Vec<u32>,
    wire: Vec<u8>,
}

/// How long a rank whose receive timed out listens for the other ranks' notices before
/// naming the rank it traced the stall to ([`Communicator::trace_stall`]). Ranks blocked
/// behind a hung rank time out within microseconds of each other; this is far longer.
const STALL_GRACE: Duration = Duration::from_millis(300);

/// The largest data frame a rank tracing a stall reads past to reach a notice behind it.
const STALL_SKIP_MAX: u64 = 1 << 20;

/// Frames up to this size are first offered to the kernel without waiting
/// ([`send_now`]), and received after, without a sender thread: latency-bound collectives
/// (the sparse ones) gain the most. The kernel's buffers (the peer's receive window, about
/// 64 KiB at Linux's default `tcp_rmem`, and this socket's send buffer) usually take the
/// whole frame; where they do not, the rest goes from a thread as for a large frame, so
/// that a ring of ranks all sending first cannot wait on one another.
const SMALL_FRAME: usize = 64 * 1024;

/// The most ranks a job may have. A full mesh of TCP connections needs a descriptor
/// pair per peer on every rank, so far fewer are practical; the bound is here so that a
/// mistyped WORLD_SIZE is a configuration error, not an attempt to allocate per-peer
/// tables for billions of ranks.
pub const MAX_WORLD: usize = 65_536;

/// The smallest broadcast message whose sender waits for each child's receipt before
/// sending to the next (`broadcast_tagged`). Sharing the link delays the first child by
/// the message's wire time; the receipt delays the next by a round trip's latency, about
/// α. They are even where the wire time is α: 2 kB at 1 Gbit/s and 10-15 µs, 16 kB at
/// 10 Gbit/s. This is the second, so that the wait is only paid where the link clearly
/// gains; MPI libraries draw the same line (eager sends below it, rendezvous above) at
/// 16-128 kB. Measured with 4 workers on 2 cores (RESULTS.md): receipts took the
/// broadcast of gTopK's 2 kB messages (1 MiB) to 0.089 ms, against 0.039-0.068 without.
pub(crate) const RECEIPT_MIN_BYTES: usize = 16 << 10;

/// Tags of point-to-point messages live in their own space (high bit set).
const P2P: u32 = 1 << 31;

/// Writes as much of the frame `header` + `payload`, from its byte `done` on, as the
/// kernel takes at once, without waiting (one `sendmsg`, `MSG_DONTWAIT`, then more while
/// it keeps taking): the bytes of the frame written by then, all of it or a prefix.
fn send_now(
    w: &TcpStream,
    peer: usize,
    header: &[u8],
    payload: &[u8],
    mut done: usize,
) -> Result<usize> {
    use std::os::fd::AsRawFd;
    let total = header.len() + payload.len();
    while done < total {
        let (h, p) = if done < header.len() {
            (&header[done..], payload)
        } else {
            (&header[..0], &payload[done - header.len()..])
        };
        let mut iov = [
            libc::iovec {
                iov_base: h.as_ptr() as *mut libc::c_void,
                iov_len: h.len(),
            },
            libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            },
        ];
        // SAFETY: a zeroed msghdr is valid (no address, no control data); its two iovecs
        // point into `header` and `payload`, which outlive the call and are only read.
        let n = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = iov.as_mut_ptr();
            msg.msg_iovlen = iov.len() as _;
            libc::sendmsg(w.as_raw_fd(), &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::WouldBlock => break,
                std::io::ErrorKind::Interrupted => continue,
                _ => return Err(write_failed(peer)(e)),
            }
        }
        done += n as usize;
    }
    Ok(done)
}

/// What [`send_now`] left of the frame `header` + `payload` after its first `done`
/// bytes, written with blocking writes (the socket's timeout applies).
fn send_rest(
    w: &mut TcpStream,
    peer: usize,
    header: &[u8],
    payload: &[u8],
    done: usize,
) -> Result<()> {
    let from_payload = done.saturating_sub(header.len());
    w.write_all(&header[done.min(header.len())..])
        .and_then(|_| w.write_all(&payload[from_payload..]))
        .map_err(write_failed(peer))
}

fn write_failed(peer: usize) -> impl Fn(std::io::Error) -> CommError {
    move |source| CommError::Peer {
        peer,
        op: "send",
        source,
    }
}

/// Writes one frame of `kind`: header and payload in one call where the kernel takes
/// them (one packet for a small frame, where two writes made two: TopKAllReduce at 1 MiB
/// 0.01-0.08 ms faster by run with 4 workers in the emulated network, RESULTS.md, "A
/// frame in one call"), the rest blocking.
fn write_frame(w: &mut TcpStream, peer: usize, kind: u8, tag: u32, payload: &[u8]) -> Result<()> {
    let h = encode_header(&FrameHeader {
        kind,
        tag,
        len: payload.len() as u64,
    });
    let done = send_now(w, peer, &h, payload, 0)?;
    send_rest(w, peer, &h, payload, done)
}

/// Sends one frame. `limit` is what the receiver will accept of a frame whose length it
/// does not know in advance (`max_frame`): a larger payload is refused here, with an error
/// that says which setting to raise, rather than sent for the receiver to refuse.
fn send_frame(w: &mut TcpStream, peer: usize, tag: u32, payload: &[u8], limit: u64) -> Result<()> {
    check_size(peer, payload, limit)?;
    write_frame(w, peer, KIND_DATA, tag, payload)
}

/// A payload over `limit` is refused before anything is written or read.
fn check_size(peer: usize, payload: &[u8], limit: u64) -> Result<()> {
    let len = payload.len() as u64;
    if len > limit {
        return Err(CommError::TooLarge { peer, len, limit });
    }
    Ok(())
}

fn read_failed(peer: usize) -> impl Fn(std::io::Error) -> CommError {
    move |source| CommError::Peer {
        peer,
        op: "receive",
        source,
    }
}

/// Reads and checks the next header from `peer`: version, length bound, and the tag of
/// the collective in progress. With `exact`, the payload must be exactly that long.
fn read_header(
    r: &mut TcpStream,
    peer: usize,
    tag: u32,
    max: u64,
    exact: Option<u64>,
) -> Result<FrameHeader> {
    let mut h = [0u8; HEADER_LEN];
    r.read_exact(&mut h).map_err(read_failed(peer))?;
    let h =
        decode_header(&h, max.max(ABORT_MAX)).map_err(|msg| CommError::Protocol { peer, msg })?;
    if h.kind == KIND_ABORT {
        return Err(read_notice(r, peer, h.len));
    }
    // The tag first: a frame of another call says more about what went wrong than its
    // length does (`decode_header` has already bounded that by `max` or ABORT_MAX).
    if h.tag != tag {
        let msg = match (h.tag & P2P != 0, tag & P2P != 0) {
            (true, false) => format!(
                "point-to-point message #{} arrived during collective #{tag}: every `send` \
                 must be received before either rank of the pair calls its next collective",
                h.tag & !P2P
            ),
            (false, true) => format!(
                "frame of collective #{} arrived while this rank waited for point-to-point \
                 message #{}: the peer called a collective instead of sending it",
                h.tag,
                tag & !P2P
            ),
            (true, true) => format!(
                "point-to-point message #{} arrived where #{} was due",
                h.tag & !P2P,
                tag & !P2P
            ),
            (false, false) => format!(
                "frame of collective #{} arrived during #{tag}: ranks called collectives \
                 in different orders",
                h.tag
            ),
        };
        return Err(CommError::Protocol { peer, msg });
    }
    if h.kind == KIND_REFUSED {
        // The refusal of the point-to-point message due here: its length and the limit,
        // 16 bytes, then the stream goes on. A collective's frames are never refused
        // this way (its sender gives up and tells every rank), so one there is malformed.
        if tag & P2P == 0 {
            return Err(CommError::Protocol {
                peer,
                msg: format!("a point-to-point refusal under collective #{tag}"),
            });
        }
        if h.len != REFUSED_LEN {
            return Err(CommError::Protocol {
                peer,
                msg: format!("a refusal of {} bytes ({REFUSED_LEN} due)", h.len),
            });
        }
        let mut b = [0u8; REFUSED_LEN as usize];
        r.read_exact(&mut b).map_err(read_failed(peer))?;
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        return Err(CommError::Refused {
            peer,
            len: word(0),
            limit: word(8),
        });
    }
    if h.len > max {
        return Err(CommError::Protocol {
            peer,
            msg: format!("payload of {} bytes exceeds the maximum of {max}", h.len),
        });
    }
    if let Some(len) = exact.filter(|&len| len != h.len) {
        return Err(CommError::Protocol {
            peer,
            msg: format!("{} bytes where {len} were due", h.len),
        });
    }
    Ok(h)
}

/// Passes a send's result through, marking `to`'s writer dirty (no abort notice goes
/// there) if the send broke off on the socket, possibly mid-frame.
fn mark_failed_send(dirty: &mut [bool], to: usize, sent: Result<()>) -> Result<()> {
    if let Err(e) = &sent {
        dirty[to] |= matches!(e, CommError::Peer { .. });
    }
    sent
}

/// While tracing a stall, reads the frame whose header is waiting on `r`, by `deadline`:
/// a notice is returned as its error; a data frame of at most [`STALL_SKIP_MAX`] bytes
/// is read and dropped (returned as a protocol error, which the caller ignores); `None`
/// when the peer has nothing more to say (a larger frame, garbage, the deadline, EOF).
fn next_notice(
    r: &mut TcpStream,
    peer: usize,
    deadline: Instant,
    scratch: &mut Vec<u8>,
) -> Option<CommError> {
    let mut h = [0u8; HEADER_LEN];
    read_before(r, &mut h, deadline).ok()?;
    let h = decode_header(&h, STALL_SKIP_MAX.max(ABORT_MAX)).ok()?;
    if h.kind == KIND_ABORT {
        if h.len > ABORT_MAX {
            return None;
        }
        let mut b = vec![0u8; h.len as usize];
        read_before(r, &mut b, deadline).ok()?;
        return Some(parse_notice(peer, &b));
    }
    let mut left = h.len as usize;
    scratch.resize(64 * 1024, 0);
    while left > 0 {
        let n = left.min(scratch.len());
        read_before(r, &mut scratch[..n], deadline).ok()?;
        left -= n;
    }
    Some(CommError::Protocol {
        peer,
        msg: "a data frame, skipped".into(),
    })
}

/// Whether a socket error is a read or write timeout (Linux reports EAGAIN).
fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
    )
}

/// One abort notice's payload (at most [`ABORT_MAX`] bytes) as the error it reports. A
/// longer announced notice is a protocol error before anything is allocated: the data
/// limit `max_frame` does not apply to notices. A corrected notice may follow on the same
/// connection ([`Communicator::trace_stall`] listens for it).
fn read_notice(r: &mut TcpStream, peer: usize, len: u64) -> CommError {
    if len > ABORT_MAX {
        return CommError::Protocol {
            peer,
            msg: format!("an abort notice of {len} bytes (at most {ABORT_MAX})"),
        };
    }
    let mut b = vec![0u8; len as usize];
    if let Err(e) = r.read_exact(&mut b) {
        return read_failed(peer)(e);
    }
    parse_notice(peer, &b)
}

/// An abort notice's payload (the failed rank, then the cause) as the error it reports.
fn parse_notice(peer: usize, b: &[u8]) -> CommError {
    if b.len() < 4 {
        return CommError::Protocol {
            peer,
            msg: format!("an abort notice of {} bytes", b.len()),
        };
    }
    CommError::PeerFailed {
        failed: u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize,
        reporter: peer,
        cause: String::from_utf8_lossy(&b[4..]).into_owned(),
    }
}

/// The abort notice for `failed` with `cause` (truncated to fit [`ABORT_MAX`]).
fn abort_frame(failed: usize, cause: &str) -> Vec<u8> {
    let mut end = cause.len().min(ABORT_MAX as usize - 4);
    while !cause.is_char_boundary(end) {
        end -= 1;
    }
    let mut payload = (failed as u32).to_le_bytes().to_vec();
    payload.extend_from_slice(&cause.as_bytes()[..end]);
    let mut f = encode_header(&FrameHeader {
        kind: KIND_ABORT,
        tag: 0,
        len: payload.len() as u64,
    })
    .to_vec();
    f.extend(payload);
    f
}

/// What a receiver knows of the frame it waits for.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// Its exact length (a barrier's 0, a half-precision segment): any other length is an
    /// error, and the buffer is allocated at this size, which the caller chose.
    Exactly(u64),
    /// A bound (gTopK's 4 + 8k; `max_frame` where nothing tighter is known). The buffer
    /// grows only as bytes arrive (see [`recv_frame_into`]).
    AtMost(u64),
}

impl Expect {
    /// What a sender may put in such a frame: an exact length is the receiver's own, so
    /// only the bounded kind is held to `max_frame`.
    fn send_limit(self, max_frame: u64) -> u64 {
        match self {
            Expect::Exactly(_) => u64::MAX,
            Expect::AtMost(_) => max_frame,
        }
    }
}

/// Payload bytes allocated before any have arrived. Beyond this the buffer doubles as
/// the bytes come in, so a peer's announced length alone (up to `max_frame`, 4 GiB by
/// default) cannot make this rank allocate: memory stays within about twice what the peer
/// actually sent.
const RECV_FIRST_ALLOC: usize = 1 << 20;

/// [`recv_frame_into`] a fresh buffer. Only the tests use it: the collectives receive
/// into buffers they keep or hand back.
#[cfg(test)]
fn recv_frame(
    r: &mut TcpStream,
    peer: usize,
    tag: u32,
    max_frame: u64,
    expect: Expect,
) -> Result<Vec<u8>> {
    let mut payload = Vec::new();
    recv_frame_into(r, peer, tag, max_frame, expect, &mut payload, None)?;
    Ok(payload)
}

/// Called by a receive with the frame's payload received so far, after each read.
type Progress<'a> = Option<&'a mut dyn FnMut(&[u8])>;

/// Called by the allgather after each read of a message: with each block received as
/// soon as it is complete, or to say that bytes came and completed none.
type OnBlock<'a> = Option<&'a mut dyn FnMut(Received<'_>)>;

/// What a receive in the allgather saw after a read (see [`Communicator::allgather_into`]).
enum Received<'b> {
    /// Block `j` is complete; `more`: a later one, not empty, is too.
    Block {
        j: usize,
        bytes: &'b [u8],
        more: bool,
    },
    /// Bytes arrived and completed no block.
    Bytes,
    /// Bytes arrived and block `j` is not complete yet: `bytes` is what it has so far, of
    /// `len` (delivered instead of `Bytes`, and after the blocks a read completed).
    Part {
        j: usize,
        bytes: &'b [u8],
        len: usize,
    },
}

/// Receives `peer`'s frame `tag`: its header checked against `expect` and `max_frame`
/// (a wrong tag, version or length is an error naming `peer`), its payload read into
/// `payload` (emptied first), whose capacity is reused: a buffer kept between calls
/// grows to the largest frame and then allocates nothing. With
/// `progress`, the payload is read as it comes, each read followed by a call with the
/// bytes so far (TopKAllReduce sums the blocks that are complete while the rest arrive).
fn recv_frame_into(
    r: &mut TcpStream,
    peer: usize,
    tag: u32,
    max_frame: u64,
    expect: Expect,
    payload: &mut Vec<u8>,
    mut progress: Progress,
) -> Result<()> {
    let (max, exact) = match expect {
        Expect::Exactly(n) => (n, Some(n)),
        Expect::AtMost(n) => (n.min(max_frame), None),
    };
    let h = read_header(r, peer, tag, max, exact)?;
    let len = usize::try_from(h.len).map_err(|_| CommError::Protocol {
        peer,
        msg: format!("a payload of {} bytes does not fit in memory here", h.len),
    })?;
    payload.clear();
    while payload.len() < len {
        let have = payload.len();
        // Within the capacity already held, the whole frame at once; beyond it, growth
        // only as fast as bytes arrive.
        let next = if exact.is_some() {
            len
        } else {
            len.min(
                have.saturating_mul(2)
                    .max(RECV_FIRST_ALLOC)
                    .max(payload.capacity()),
            )
        };
        payload.resize(next, 0);
        let Some(f) = progress.as_mut() else {
            r.read_exact(&mut payload[have..])
                .map_err(read_failed(peer))?;
            continue;
        };
        // What read_exact does, with a call after each read.
        let mut filled = have;
        while filled < next {
            match r.read(&mut payload[filled..next]) {
                Ok(0) => return Err(read_failed(peer)(std::io::ErrorKind::UnexpectedEof.into())),
                Ok(n) => {
                    filled += n;
                    f(&payload[..filled]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(read_failed(peer)(e)),
            }
        }
    }
    Ok(())
}

// The wire format is little-endian; f32 slices go on the wire as their own bytes.
#[cfg(not(target_endian = "little"))]
compile_error!("comm's wire format is little-endian; big-endian targets need a byte-swapping path");

/// Receives a frame whose payload is exactly `into.len()` floats, straight into `into`.
fn recv_f32_into(r: &mut TcpStream, peer: usize, tag: u32, into: &mut [f32]) -> Result<()> {
    let bytes = (into.len() * 4) as u64;
    read_header(r, peer, tag, bytes, Some(bytes))?;
    r.read_exact(bytemuck::cast_slice_mut(into))
        .map_err(read_failed(peer))
}

/// Floats read per chunk when a received segment is added into place: small enough to
/// stay in cache while it is added, while the kernel keeps receiving the next chunk.
const ADD_CHUNK: usize = 1 << 18;

/// Receives a frame of exactly `into.len()` floats and adds it into `into`, chunk by chunk.
fn recv_f32_add(
    r: &mut TcpStream,
    peer: usize,
    tag: u32,
    into: &mut [f32],
    scratch: &mut [f32],
) -> Result<()> {
    let bytes = (into.len() * 4) as u64;
    read_header(r, peer, tag, bytes, Some(bytes))?;
    for chunk in into.chunks_mut(ADD_CHUNK) {
        let buf = &mut scratch[..chunk.len()];
        r.read_exact(bytemuck::cast_slice_mut(buf))
            .map_err(read_failed(peer))?;
        for (d, g) in chunk.iter_mut().zip(buf.iter()) {
            *d += *g;
        }
    }
    Ok(())
}

/// A shared view of `a` and a mutable view of `b`, two disjoint ranges of `data`.
fn split_ranges(
    data: &mut [f32],
    a: std::ops::Range<usize>,
    b: std::ops::Range<usize>,
) -> (&[f32], &mut [f32]) {
    if a.start >= b.end {
        let (lo, hi) = data.split_at_mut(a.start);
        (&hi[..a.len()], &mut lo[b])
    } else {
        let (lo, hi) = data.split_at_mut(b.start);
        (&lo[a], &mut hi[..b.len()])
    }
}

/// The range of `0..n` in segment `i` of `parts` (sizes differ by at most one).
fn segment(n: usize, parts: usize, i: usize) -> std::ops::Range<usize> {
    let (base, extra) = (n / parts, n % parts);
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}

impl Communicator {
    /// Joins the job described by `cfg` (blocks until every rank has connected).
    pub fn connect(cfg: &CommConfig) -> Result<Self> {
        if cfg.world > MAX_WORLD {
            return Err(CommError::Config(format!(
                "a world of {} ranks: this communicator supports at most {MAX_WORLD}",
                cfg.world
            )));
        }
        if cfg.world == 0 || cfg.rank >= cfg.world {
            return Err(CommError::Config(format!(
                "rank {} of world {}",
                cfg.rank, cfg.world
            )));
        }
        if cfg.timeout.is_zero() {
            return Err(CommError::Config(
                "a timeout of 0: every blocking call needs time to finish".into(),
            ));
        }
        // A one-rank job opens no connection, so it needs no token.
        if cfg.world > 1 && cfg.token.is_empty() {
            return Err(CommError::Config(
                "the job token is empty: every rank needs the same non-empty shared token".into(),
            ));
        }
        let streams = connect_mesh(cfg)?;
        let mut readers = Vec::with_capacity(cfg.world);
        for (p, s) in streams.iter().enumerate() {
            readers.push(match s {
                Some(s) => Some(s.try_clone().map_err(|e| CommError::Peer {
                    peer: p,
                    op: "setup",
                    source: e,
                })?),
                None => None,
            });
        }
        let mut c = Communicator::assemble(cfg, streams, readers);
        if cfg.world > 1 {
            c.agree_on_max_frame()?;
        }
        Ok(c)
    }

    /// Every rank's frame limit, compared once at connect. The ranks size what they send
    /// by their own limit and check what they receive against theirs, so a rank whose
    /// limit differs (`GRADEX_MAX_FRAME` set on some nodes only) would fail its first large
    /// message with a malformed-frame error blaming its peer; here every rank fails at
    /// once with the same error naming the limits. Not counted in the byte counters.
    fn agree_on_max_frame(&mut self) -> Result<()> {
        let all = self.allgather_v(&self.max_frame.to_le_bytes())?;
        let limits: Vec<Option<u64>> = all
            .iter()
            .map(|b| {
                <[u8; 8]>::try_from(b.as_slice())
                    .ok()
                    .map(u64::from_le_bytes)
            })
            .collect();
        self.counters = ByteCounters::default();
        if let Some(q) = limits.iter().position(|&l| l.is_none()) {
            return Err(CommError::Protocol {
                peer: q,
                msg: format!("a frame limit of {} bytes (8 due)", all[q].len()),
            });
        }
        if limits.iter().any(|&l| l != limits[0]) {
            let listed: Vec<String> = limits
                .iter()
                .enumerate()
                .map(|(q, l)| format!("rank {q}: {}", l.unwrap_or_default()))
                .collect();
            return Err(CommError::Config(format!(
                "the ranks' frame limits differ ({}): set GRADEX_MAX_FRAME (CommConfig::max_frame) alike on every rank",
                listed.join(", ")
            )));
        }
        Ok(())
    }

    /// A communicator over connected, authenticated sockets: `writers[p]` and
    /// `readers[p]` to and from rank p (two handles of one connection, but for tests).
    fn assemble(
        cfg: &CommConfig,
        writers: Vec<Option<TcpStream>>,
        readers: Vec<Option<TcpStream>>,
    ) -> Communicator {
        Communicator {
            rank: cfg.rank,
            world: cfg.world,
            max_frame: cfg.max_frame,
            timeout: cfg.timeout,
            writers,
            readers,
            counters: ByteCounters::default(),
            seq: 0,
            p2p_sent: vec![0; cfg.world],
            p2p_received: vec![0; cfg.world],
            dirty: vec![false; cfg.world],
            aborted: None,
            scratch: Scratch::default(),
            gtopk: GtopkScratch::default(),
            topk_sum: TopkSum::Auto,
            topk_arrival_stops: 0,
            trace: Trace::default(),
        }
    }
    /// Joins the job described by the environment (see [`CommConfig::from_env`]).
    pub fn from_env() -> Result<Self> {
        Communicator::connect(&CommConfig::from_env()?)
    }
    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn world_size(&self) -> usize {
        self.world
    }
    pub fn counters(&self) -> &ByteCounters {
        &self.counters
    }
    /// Chooses when TopKAllReduce sums (benchmarks and tests compare the choices).
    pub fn set_topk_sum(&mut self, when: TopkSum) {
        self.topk_sum = when;
    }
    /// How many TopKAllReduce calls of this rank so far began summing as the blocks
    /// arrived and then, the merges behind the bytes, summed after the gather
    /// ([`TopkSum::Auto`]); benchmarks report it beside the times.
    pub fn topk_arrival_stops(&self) -> u64 {
        self.topk_arrival_stops
    }
    /// Turns the timeline of the sparse collectives' steps on or off (`trace.rs`: TopK
    /// and gTopK, their allgather and broadcast, also when called alone); off, nothing
    /// is recorded. The steps pile up until [`Communicator::take_trace`] takes them.
    pub fn set_trace(&mut self, on: bool) {
        self.trace.set(on);
    }
    /// The steps recorded since the last call, oldest first.
    pub fn take_trace(&mut self) -> Vec<TraceEvent> {
        self.trace.take()
    }
    /// How long any one blocking call waits for a peer before it fails.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn next_tag(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1) & !P2P;
        self.seq
    }
    fn check_peer(&self, peer: usize) -> Result<()> {
        if peer >= self.world || peer == self.rank {
            return Err(CommError::Config(format!(
                "rank {} cannot exchange messages with rank {peer} in a world of {}",
                self.rank, self.world
            )));
        }
        Ok(())
    }
    fn send_to(&mut self, peer: usize, tag: u32, kind: Collective, payload: &[u8]) -> Result<()> {
        let w = self.writers[peer]
            .as_mut()
            .ok_or_else(|| CommError::Config(format!("no connection to rank {peer}")))?;
        let sent = send_frame(w, peer, tag, payload, self.max_frame);
        mark_failed_send(&mut self.dirty, peer, sent)?;
        self.counters.sent(kind, payload.len(), HEADER_LEN);
        Ok(())
    }
    /// Sends a small frame of another kind than data (a refusal), counted as overhead of
    /// point-to-point traffic.
    fn send_kind(&mut self, peer: usize, kind: u8, tag: u32, payload: &[u8]) -> Result<()> {
        let w = self.writers[peer]
            .as_mut()
            .ok_or_else(|| CommError::Config(format!("no connection to rank {peer}")))?;
        let sent = write_frame(w, peer, kind, tag, payload);
        mark_failed_send(&mut self.dirty, peer, sent)?;
        self.counters
            .sent(Collective::SendRecv, 0, HEADER_LEN + payload.len());
        Ok(())
    }
    fn recv_from(
        &mut self,
        peer: usize,
        tag: u32,
        kind: Collective,
        expect: Expect,
    ) -> Result<Vec<u8>> {
        let mut p = Vec::new();
        self.recv_from_into(peer, tag, kind, expect, &mut p, None)?;
        Ok(p)
    }
    /// [`Communicator::recv_from`] into `payload`, whose buffer is reused; with
    /// `progress`, called with the bytes so far after each read.
    fn recv_from_into(
        &mut self,
        peer: usize,
        tag: u32,
        kind: Collective,
        expect: Expect,
        payload: &mut Vec<u8>,
        progress: Progress,
    ) -> Result<()> {
        let r = self.readers[peer]
            .as_mut()
            .ok_or_else(|| CommError::Config(format!("no connection to rank {peer}")))?;
        recv_frame_into(r, peer, tag, self.max_frame, expect, payload, progress)?;
        self.counters.received(kind, payload.len(), HEADER_LEN);
        Ok(())
    }
    /// The outcome of a concurrent send to `to` and receive: a failed send marks `to`'s
    /// writer dirty; where both failed, the receive's error is the one returned (a send
    /// usually fails second, because the peer it writes to stopped reading after a
    /// failure of its own, which the receive reports or the notice carries).
    fn settle<T>(&mut self, to: usize, sent: Result<()>, got: Result<T>) -> Result<T> {
        let sent = mark_failed_send(&mut self.dirty, to, sent);
        match (sent, got) {
            (_, Err(g)) => Err(g),
            (Err(s), Ok(_)) => Err(s),
            (Ok(()), Ok(g)) => Ok(g),
        }
    }

    /// Called with every public call's result. On an error that blames a peer, this rank
    /// tells every other peer which rank failed (an abort notice, best effort, on writers
    /// with no interrupted frame) and shuts its sockets, so that ranks blocked on it fail
    /// at once and name the failed rank, not the neighbour through which the failure
    /// reached them. A failed send whose peer had already sent a notice reports the
    /// notice. This rank's own message over the frame limit or invalid argument to a
    /// collective ([`CommError::TooLarge`], [`CommError::Argument`]) is news for the
    /// peers too, naming this rank. Other errors that blame no peer (a peer index out of
    /// range, say) change nothing.
    fn guard<T>(&mut self, r: Result<T>) -> Result<T> {
        let e = match r {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if self.aborted.is_some() {
            return Err(e);
        }
        if let CommError::TooLarge { .. } | CommError::Argument(_) = e {
            // Nothing was sent, but the peers wait for this rank's part of the collective:
            // tell them why it will not come, and give up, as after a peer's failure.
            // (Where every rank made the same mistake, each gives up on its own; where
            // one did, the others would otherwise wait out their timeouts and blame it
            // for a hang, and its collective count would fall one behind theirs.)
            let cause = e.to_string();
            self.notify(self.rank, &cause);
            self.shut_down(self.rank, cause);
            return Err(e);
        }
        let e = match e {
            // A send that broke: the peer stopped reading after a failure of its own, and
            // its notice, sent before it closed, is already here. (A send that timed out
            // is traced below instead, after this rank's own notice has gone out.)
            CommError::Peer {
                peer,
                op: "send",
                ref source,
            } if !is_timeout(source) => self.news_from(peer).unwrap_or(e),
            e => e,
        };
        let e = match e {
            // A notice naming a rank outside the world (read here or by `news_from`)
            // blames its sender.
            CommError::PeerFailed {
                failed, reporter, ..
            } if failed >= self.world => CommError::Protocol {
                peer: reporter,
                msg: format!(
                    "an abort notice names rank {failed} of a world of {}",
                    self.world
                ),
            },
            e => e,
        };
        let Some(failed) = e.failed_rank() else {
            return Err(e);
        };
        let cause = match &e {
            CommError::PeerFailed { cause, .. } => cause.clone(),
            e => e.to_string(),
        };
        self.notify(failed, &cause);
        // A receive or send that timed out, or a notice: the rank named may itself have
        // been waiting on another (a hang, not a death). Trace it.
        let traced = match &e {
            CommError::Peer {
                op: "receive" | "send",
                source,
                ..
            } if is_timeout(source) => self.trace_stall(failed, None),
            CommError::PeerFailed {
                reporter, cause, ..
            } => self.trace_stall(*reporter, Some((failed, cause.clone()))),
            _ => None,
        };
        let (failed, cause, e) = match traced.filter(|t| t.0 != failed) {
            // The rank named was itself waiting: name the rank the wait leads to, and tell
            // the others that too (a second notice; the tracing ranks keep the last).
            Some((culprit, reporter, why)) => {
                self.notify(culprit, &why);
                let e = CommError::PeerFailed {
                    failed: culprit,
                    reporter,
                    cause: why.clone(),
                };
                (culprit, why, e)
            }
            None => (failed, cause, e),
        };
        self.shut_down(failed, cause);
        Err(e)
    }

    /// Closes every connection and makes every later call fail, naming `failed`.
    fn shut_down(&mut self, failed: usize, cause: String) {
        for s in self.writers.iter().chain(&self.readers).flatten() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        self.aborted = Some((failed, cause));
    }

    /// Sends every peer but `failed` (and writers with an interrupted frame) an abort
    /// notice naming `failed`, best effort, with a short write timeout.
    fn notify(&mut self, failed: usize, cause: &str) {
        let notice = abort_frame(failed, cause);
        let quick = Some(self.timeout.min(Duration::from_secs(1)));
        for q in 0..self.world {
            if q == self.rank || q == failed || self.dirty[q] {
                continue;
            }
            if let Some(w) = self.writers[q].as_mut() {
                let sent = w
                    .set_write_timeout(quick)
                    .and_then(|_| w.write_all(&notice));
                // A notice cut off part-way must not be followed by a second one there.
                self.dirty[q] |= sent.is_err();
            }
        }
    }

    /// After a failure blamed on `start` (a receive from it or a send to it timed out,
    /// or it sent a notice, which is `known`: whom it named, and why) and this rank's own
    /// notice: collects the notices other ranks send for [`STALL_GRACE`] and follows "R
    /// waited for S" from `start` to a rank that reported nothing: the one that hangs or
    /// died. Returns (that rank, the rank whose notice named it, its cause), or `None`
    /// when `start` reported nothing. A rank that hangs rather than dies times out every
    /// rank waiting on it, and the ranks waiting on those, within microseconds of each
    /// other; without this each named whichever neighbour's notice had not reached it.
    ///
    /// A notice's sender traces too, and sends a corrected notice at the end of its own
    /// grace, then closes: after a notice from `start`, this listens to `start` until it
    /// closes, two graces at most. Data frames of up to [`STALL_SKIP_MAX`] bytes that the
    /// stall left unread are skipped to reach a notice queued behind them; every read has
    /// the listening deadline, so a trickling peer cannot hold this past it.
    fn trace_stall(
        &mut self,
        start: usize,
        known: Option<(usize, String)>,
    ) -> Option<(usize, usize, String)> {
        let now = Instant::now();
        let until = now + STALL_GRACE;
        let until_start = if known.is_some() {
            now + 2 * STALL_GRACE
        } else {
            until
        };
        let deadline_of = |q: usize| if q == start { until_start } else { until };
        let mut waited_for: HashMap<usize, (usize, String)> = HashMap::new();
        if let Some(k) = known {
            waited_for.insert(start, k);
        }
        let mut open: Vec<bool> = (0..self.world)
            .map(|q| q != self.rank && self.readers[q].is_some())
            .collect();
        let mut scratch = Vec::new();
        loop {
            let now = Instant::now();
            let listening = |q: usize, open: &[bool]| open[q] && now < deadline_of(q);
            if !(0..self.world).any(|q| listening(q, &open)) {
                break;
            }
            for (q, reader) in self.readers.iter_mut().enumerate() {
                if !listening(q, &open) {
                    continue;
                }
                let Some(r) = reader.as_mut() else {
                    continue;
                };
                let mut h = [0u8; HEADER_LEN];
                let peeked = r.set_nonblocking(true).and_then(|_| r.peek(&mut h));
                let _ = r.set_nonblocking(false);
                match peeked {
                    Ok(0) => open[q] = false, // closed
                    Ok(n) if n < HEADER_LEN => {}
                    Ok(_) => {
                        let deadline = deadline_of(q);
                        match next_notice(r, q, deadline, &mut scratch) {
                            Some(CommError::PeerFailed { failed, cause, .. }) => {
                                // The sender's corrected notice may follow: keep listening.
                                waited_for.insert(q, (failed, cause));
                            }
                            Some(_) => {} // a data frame skipped
                            None => open[q] = false,
                        }
                    }
                    Err(e) if is_timeout(&e) || e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => open[q] = false,
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut at = start;
        let mut found = None;
        let mut seen = vec![false; self.world];
        seen[self.rank] = true;
        while let Some((next, cause)) = waited_for.get(&at) {
            if seen[at] || *next >= self.world || seen[*next] {
                break;
            }
            seen[at] = true;
            found = Some((*next, at, cause.clone()));
            at = *next;
        }
        found
    }

    /// The abort notice `peer` sent before this rank's send to it broke (it stopped
    /// reading when it failed), if one arrives within 200 ms; anything else is ignored
    /// (the connection is given up anyway).
    fn news_from(&mut self, peer: usize) -> Option<CommError> {
        let r = self.readers.get_mut(peer)?.as_mut()?;
        let deadline = Instant::now() + Duration::from_millis(200);
        next_notice(r, peer, deadline, &mut Vec::new())
            .filter(|e| matches!(e, CommError::PeerFailed { .. }))
    }

    /// Runs a public call: refused at once on a communicator that gave up, and its error
    /// passed through [`Communicator::guard`].
    fn guarded<T>(&mut self, call: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.check_alive()?;
        let r = call(self);
        self.guard(r)
    }

    /// The error of a call on a communicator that gave up after a peer failed.
    fn check_alive(&self) -> Result<()> {
        match &self.aborted {
            Some((failed, cause)) => Err(CommError::PeerFailed {
                failed: *failed,
                reporter: self.rank,
                cause: format!("this communicator gave up after: {cause}"),
            }),
            None => Ok(()),
        }
    }

    /// Sends `payload` to `to` while receiving from `from` into `got` (emptied first, its
    /// capacity reused), concurrently (a ring step; both directions busy, and no deadlock
    /// when both sides' socket buffers are full). `progress` sees the received bytes as
    /// they come (see [`recv_frame_into`]).
    #[allow(clippy::too_many_arguments)]
    fn exchange(
        &mut self,
        to: usize,
        tag: u32,
        kind: Collective,
        payload: &[u8],
        from: usize,
        expect: Expect,
        got: &mut Vec<u8>,
        progress: Progress,
    ) -> Result<()> {
        let max = self.max_frame;
        // Every rank runs the same step, so what this rank expects is what `to` expects.
        let limit = expect.send_limit(max);
        let w = self.writers[to]
            .as_mut()
            .ok_or_else(|| CommError::Config(format!("no connection to rank {to}")))?;
        let r = self.readers[from]
            .as_mut()
            .ok_or_else(|| CommError::Config(format!("no connection to rank {from}")))?;
        // Refused before the receive starts: waiting for `from` while `to` waits in vain
        // for this message would end in a timeout that hides the cause.
        check_size(to, payload, limit)?;
        let header = encode_header(&FrameHeader {
            kind: KIND_DATA,
            tag,
            len: payload.len() as u64,
        });
        // A small frame is offered to the kernel first (see SMALL_FRAME); what it does
        // not take, and a large frame, go from a thread while this one receives.
        let mut done = 0;
        if payload.len() <= SMALL_FRAME {
            done = match send_now(w, to, &header, payload, 0) {
                Ok(n) => n,
                Err(e) => return mark_failed_send(&mut self.dirty, to, Err(e)),
            };
            if done == HEADER_LEN + payload.len() {
                recv_frame_into(r, from, tag, max, expect, got, progress)?;
                self.counters.sent(kind, payload.len(), HEADER_LEN);
                self.counters.received(kind, got.len(), HEADER_LEN);
                return Ok(());
            }
        }
        let (sent, received) = std::thread::scope(|s| {
            // What is left, offered whole first (a large frame's header goes with its
            // payload's start), then written blocking.
            let sender = s.spawn(move || {
                send_now(w, to, &header, payload, done)
                    .and_then(|done| send_rest(w, to, &header, payload, done))
            });
            let received = recv_frame_into(r, from, tag, max, expect, got, progress);
            let sent = sender
                .join()
                .unwrap_or_else(|_| Err(CommError::Config("sender thread panicked".into())));
            (sent, received)
        });
        self.settle(to, sent, received)?;
        self.counters.sent(kind, payload.len(), HEADER_LEN);
        self.counters.received(kind, got.len(), HEADER_LEN);
        Ok(())
    }

    /// Point-to-point send, matched by the next `recv` from this rank on `peer` (messages
    /// between a pair arrive in order; other ranks need not take part). A pair's
    /// point-to-point messages and collective frames share its connection, in order, so
    /// `peer` must receive the message before either of the two calls its next
    /// collective; a collective that finds it instead fails and says so. A message over
    /// the frame limit is refused with [`CommError::TooLarge`], and the communicator
    /// stays usable.
    pub fn send(&mut self, peer: usize, payload: &[u8]) -> Result<()> {
        self.check_alive()?;
        match self.send_unguarded(peer, payload) {
            // The peer was told (its recv returns the refusal): the communicator stays
            // usable, so this goes past the guard, which gives up on a collective's
            // message over the limit.
            Err(e @ CommError::TooLarge { .. }) => Err(e),
            r => self.guard(r),
        }
    }
    fn send_unguarded(&mut self, peer: usize, payload: &[u8]) -> Result<()> {
        self.check_peer(peer)?;
        let n = self.p2p_sent[peer].wrapping_add(1);
        let tag = P2P | (n & !P2P);
        let sent = self.send_to(peer, tag, Collective::SendRecv, payload);
        if let Err(CommError::TooLarge { len, limit, .. }) = sent {
            // Sent in the message's place, under its tag, so the receiver's recv
            // returns at once and the pair's numbering stays in step.
            let mut refusal = len.to_le_bytes().to_vec();
            refusal.extend(limit.to_le_bytes());
            self.send_kind(peer, KIND_REFUSED, tag, &refusal)?;
            self.p2p_sent[peer] = n;
            return sent;
        }
        sent?;
        self.p2p_sent[peer] = n;
        Ok(())
    }
    pub fn recv(&mut self, peer: usize) -> Result<Vec<u8>> {
        self.guarded(|c| c.recv_unguarded(peer))
    }
    fn recv_unguarded(&mut self, peer: usize) -> Result<Vec<u8>> {
        self.check_peer(peer)?;
        self.p2p_received[peer] = self.p2p_received[peer].wrapping_add(1);
        let tag = P2P | (self.p2p_received[peer] & !P2P);
        let got = self.recv_from(
            peer,
            tag,
            Collective::SendRecv,
            Expect::AtMost(self.max_frame),
        );
        if let Err(CommError::Refused { .. }) = got {
            // The refusal's bytes, as its sender counted them.
            self.counters
                .received(Collective::SendRecv, 0, HEADER_LEN + REFUSED_LEN as usize);
        }
        got
    }

    /// Returns when every rank has called it.
    pub fn barrier(&mut self) -> Result<()> {
        self.guarded(|c| c.barrier_unguarded())
    }
    fn barrier_unguarded(&mut self) -> Result<()> {
        let tag = self.next_tag();
        if self.rank == 0 {
            for p in 1..self.world {
                self.recv_from(p, tag, Collective::Barrier, Expect::Exactly(0))?;
            }
            for p in 1..self.world {
                self.send_to(p, tag, Collective::Barrier, &[])?;
            }
        } else {
            self.send_to(0, tag, Collective::Barrier, &[])?;
            self.recv_from(0, tag, Collective::Barrier, Expect::Exactly(0))?;
        }
        Ok(())
    }

    /// `root`'s bytes on every rank, along a binomial tree (log₂ P rounds).
    /// A `root` that is not a rank is an error, before any communication.
    pub fn broadcast(&mut self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        self.guarded(|c| c.broadcast_unguarded(root, data))
    }
    fn broadcast_unguarded(&mut self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        if root >= self.world {
            return Err(CommError::Argument(format!(
                "broadcast from root {root}, which is not a rank of this world of {}",
                self.world
            )));
        }
        let tag = self.next_tag();
        let expect = Expect::AtMost(self.max_frame);
        self.broadcast_tagged(root, data, tag, Collective::Broadcast, expect)
            .map(|(got, _)| got.unwrap_or_else(|| data.to_vec()))
    }
    /// A binomial-tree broadcast from `root`; returns what this rank received (None at
    /// the root, which has it already) and the rank it came from (this rank's parent in
    /// the tree, or this rank at the root), which is the rank to blame for a message that
    /// does not decode.
    ///
    /// A rank with several children sends to them one after another, each once the one
    /// before has confirmed it has the whole message (an empty frame back), as the
    /// model's rounds assume. Written back to back, the messages shared the link: in
    /// the emulated 1 Gbit/s network (4 workers, gTopK's 134 kB at 64 MiB) both of rank
    /// 0's children had theirs 2.0-2.1 ms after it began sending instead of 1.1 ms for
    /// the first, and the broadcast took 3.1 ms against its model's 2.3 (RESULTS.md).
    /// The confirmation costs about α on the sender's later rounds, so messages under
    /// [`RECEIPT_MIN_BYTES`] go back to back as before.
    fn broadcast_tagged(
        &mut self,
        root: usize,
        data: &[u8],
        tag: u32,
        kind: Collective,
        expect: Expect,
    ) -> Result<(Option<Vec<u8>>, usize)> {
        let p = self.world;
        let vr = (self.rank + p - root) % p;
        let mut from = self.rank;
        // What this rank received; the root sends `data` itself (a rank sends only after
        // its receive, so `data` is read at the root alone).
        let mut got: Option<Vec<u8>> = None;
        let mut mask = 1;
        while mask < p {
            if vr < mask {
                if vr + mask < p {
                    let dst = (vr + mask + root) % p;
                    let msg = got.as_deref().unwrap_or(data);
                    self.trace.mark("down_send", dst, msg.len());
                    self.send_to(dst, tag, kind, msg)?;
                    self.trace.mark("down_sent", dst, msg.len());
                    // Another child follows: it gets its message once this one has all
                    // of it (its receipt, an empty frame), so that the two do not share
                    // this rank's link.
                    if vr + 2 * mask < p && msg.len() >= RECEIPT_MIN_BYTES {
                        self.recv_from(dst, tag, kind, Expect::Exactly(0))?;
                        self.trace.mark("down_receipt", dst, 0);
                    }
                }
            } else if vr < 2 * mask {
                from = (vr - mask + root) % p;
                self.trace.mark("down_recv", from, 0);
                let msg = self.recv_from(from, tag, kind, expect)?;
                self.trace.mark("down_last_byte", from, msg.len());
                // The parent waits for this before it sends to its next child, if it has
                // one (vr - mask + 2 mask < p); sent before this rank forwards anything,
                // so that it does not queue behind that on this rank's link.
                if vr + mask < p && msg.len() >= RECEIPT_MIN_BYTES {
                    self.send_to(from, tag, kind, &[])?;
                }
                got = Some(msg);
            }
            mask <<= 1;
        }
        Ok((got, from))
    }

    /// Sends `send` to `to` while receiving exactly `recv.len()` floats from `from`, either
    /// into `recv` or (with `add_scratch`) added into it; no copies beyond the kernel's.
    fn exchange_f32(
        &mut self,
        to: usize,
        tag: u32,
        send: &[f32],
        from: usize,
        recv: &mut [f32],
        add_scratch: Option<&mut [f32]>,
    ) -> Result<()> {
        let w = self.writers[to]
            .as_mut()
            .ok_or_else(|| CommError::Config(format!("no connection to rank {to}")))?;
        let r = self.readers[from]
            .as_mut()
            .ok_or_else(|| CommError::Config(format!("no connection to rank {from}")))?;
        let (sent, got) = std::thread::scope(|s| {
            // The receiver expects exactly this segment's length: no max_frame limit.
            let sender =
                s.spawn(move || send_frame(w, to, tag, bytemuck::cast_slice(send), u64::MAX));
            let got = match add_scratch {
                Some(scratch) => recv_f32_add(r, from, tag, recv, scratch),
                None => recv_f32_into(r, from, tag, recv),
            };
            (
                sender
                    .join()
                    .unwrap_or_else(|_| Err(CommError::Config("sender thread panicked".into()))),
                got,
            )
        });
        self.settle(to, sent, got)?;
        self.counters
            .sent(Collective::Allreduce, send.len() * 4, HEADER_LEN);
        self.counters
            .received(Collective::Allreduce, recv.len() * 4, HEADER_LEN);
        Ok(())
    }

    /// Ring allreduce (reduce-scatter, then allgather) of `data` in place. Every rank ends
    /// with bitwise-identical values: each segment is summed once, in ring order, and then
    /// copied. Segments travel as their own bytes; the allgather receives in place.
    pub fn allreduce(&mut self, data: &mut [f32], op: ReduceOp) -> Result<()> {
        self.guarded(|c| c.allreduce_unguarded(data, op))
    }
    fn allreduce_unguarded(&mut self, data: &mut [f32], op: ReduceOp) -> Result<()> {
        let tag = self.next_tag();
        let (p, r, n) = (self.world, self.rank, data.len());
        if p > 1 {
            let (right, left) = ((r + 1) % p, (r + p - 1) % p);
            let mut scratch = vec![0f32; ADD_CHUNK.min(segment(n, p, 0).len())];
            for s in 0..p - 1 {
                let send_seg = segment(n, p, (r + p - s) % p);
                let recv_seg = segment(n, p, (r + 2 * p - s - 1) % p);
                let (send, recv) = split_ranges(data, send_seg, recv_seg);
                self.exchange_f32(right, tag, send, left, recv, Some(&mut scratch))?;
            }
            for s in 0..p - 1 {
                let send_seg = segment(n, p, (r + 1 + p - s) % p);
                let recv_seg = segment(n, p, (r + p - s) % p);
                let (send, recv) = split_ranges(data, send_seg, recv_seg);
                self.exchange_f32(right, tag, send, left, recv, None)?;
            }
        }
        if op == ReduceOp::Average {
            let inv = 1.0 / p as f32;
            data.iter_mut().for_each(|v| *v *= inv);
        }
        Ok(())
    }

    /// Ring allreduce whose wire carries IEEE half precision (2 bytes per value): the
    /// dense 16-bit baseline. Partial sums are kept in f32 on the rank that adds them and
    /// rounded to f16 only for transmission; each segment's final sum is rounded once by
    /// the rank that completes it and copied from there, so every rank ends with identical
    /// values. The sums are f16 values; `Average` then scales them by 1/P in f32 on every
    /// rank (the same on all), so averages need not be f16 values unless P is a power of 2.
    pub fn allreduce_f16(&mut self, data: &mut [f32], op: ReduceOp) -> Result<()> {
        self.guarded(|c| c.allreduce_f16_unguarded(data, op))
    }
    fn allreduce_f16_unguarded(&mut self, data: &mut [f32], op: ReduceOp) -> Result<()> {
        let tag = self.next_tag();
        let (p, r, n) = (self.world, self.rank, data.len());
        // One send and one receive buffer for all 2(P-1) steps.
        let (mut payload, mut got) = (Vec::new(), Vec::new());
        let to_f16 = |v: &[f32], out: &mut Vec<u8>| {
            out.clear();
            out.extend(v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()));
        };
        // Two bytes per value of the segment due: any other length is refused with the
        // header, before the payload is read.
        let f16_bytes = |seg: &std::ops::Range<usize>| Expect::Exactly(2 * seg.len() as u64);
        if p > 1 {
            let (right, left) = ((r + 1) % p, (r + p - 1) % p);
            for s in 0..p - 1 {
                let send_seg = segment(n, p, (r + p - s) % p);
                let recv_seg = segment(n, p, (r + 2 * p - s - 1) % p);
                to_f16(&data[send_seg], &mut payload);
                let expect = f16_bytes(&recv_seg);
                let kind = Collective::Allreduce;
                self.exchange(right, tag, kind, &payload, left, expect, &mut got, None)?;
                for (d, c) in data[recv_seg].iter_mut().zip(got.chunks_exact(2)) {
                    *d += half::f16::from_le_bytes([c[0], c[1]]).to_f32();
                }
            }
            // This rank completed segment (r + 1) % p: round it once, then circulate it.
            let own = segment(n, p, (r + 1) % p);
            for v in &mut data[own] {
                *v = half::f16::from_f32(*v).to_f32();
            }
            for s in 0..p - 1 {
                let send_seg = segment(n, p, (r + 1 + p - s) % p);
                let recv_seg = segment(n, p, (r + p - s) % p);
                to_f16(&data[send_seg], &mut payload);
                let expect = f16_bytes(&recv_seg);
                let kind = Collective::Allreduce;
                self.exchange(right, tag, kind, &payload, left, expect, &mut got, None)?;
                for (d, c) in data[recv_seg].iter_mut().zip(got.chunks_exact(2)) {
                    *d = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
                }
            }
        } else {
            data.iter_mut()
                .for_each(|v| *v = half::f16::from_f32(*v).to_f32());
        }
        if op == ReduceOp::Average {
            let inv = 1.0 / p as f32;
            data.iter_mut().for_each(|v| *v *= inv);
        }
        Ok(())
    }

    /// Every rank's buffer (of any length) on every rank. Bruck's algorithm packs up to
    /// ⌊P/2⌋ ranks' buffers into one message (min(d, P−d) at distance d), and each
    /// message is held to `max_frame`, so the buffers of any ⌊P/2⌋ consecutive ranks must
    /// fit in it together; a message over
    /// it fails the collective on every rank at once, naming the setting.
    pub fn allgather_v(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.guarded(|c| c.allgather_v_unguarded(data))
    }
    fn allgather_v_unguarded(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let tag = self.next_tag();
        let mut g = std::mem::take(&mut self.scratch.gather);
        let gathered = self.allgather_into(data, tag, Collective::AllgatherV, &mut g, None);
        let (p, r) = (self.world, self.rank);
        let out = gathered.map(|()| {
            (0..p)
                .map(|q| g.have.block((q + p - r) % p).to_vec())
                .collect()
        });
        self.scratch.gather = g;
        out
    }

    /// Bruck's allgather: ⌈log₂P⌉ steps for any P. Before the step at distance d, this
    /// rank holds the blocks of ranks r, r+1, …, r+d−1 (mod P); it sends the first
    /// min(d, P−d) of them to rank r−d and appends those of rank r+d. Every rank sends
    /// P−1 blocks in all, as in a ring, but in ⌈log₂P⌉ messages instead of P−1: the
    /// latency term that dominates the sparse collectives' small messages (a ring's
    /// P−1 dependent steps were 2–2.6× the α-β model with 8 ranks on 2 cores).
    /// Afterwards `g.have.block(j)` is rank (r + j) mod P's block; `g`'s buffers are
    /// reused, so a call allocates only where it outgrows the earlier ones.
    /// `on_block` is called after each read with each received block that is now
    /// complete (`Received::Block`, in the order j = 1, 2, …, P−1, while the rest of its
    /// message is still arriving; `more` says that a later block has arrived too: see
    /// [`crate::blocks::BlockWatch::poll`]), then with the next block's bytes so far if
    /// some are in (`Received::Part`), or else, when the read completed no block, with
    /// `Received::Bytes`. A block handed out may belong to a message that then turns
    /// out malformed: the gather fails then.
    fn allgather_into(
        &mut self,
        data: &[u8],
        tag: u32,
        kind: Collective,
        g: &mut GatherScratch,
        mut on_block: OnBlock,
    ) -> Result<()> {
        let (p, r) = (self.world, self.rank);
        g.have.clear();
        g.have.push(data);
        let mut d = 1;
        while d < p {
            let count = d.min(p - d);
            let (to, from) = ((r + p - d) % p, (r + d) % p);
            g.have.pack_first(count, &mut g.send);
            let expect = Expect::AtMost(self.max_frame);
            let first = g.have.len();
            let watch = &mut g.watch;
            watch.reset(count);
            let mut progress = on_block.as_mut().map(|f| {
                move |prefix: &[u8]| {
                    let block = |i: usize, bytes: &[u8], more: bool| {
                        f(Received::Block {
                            j: first + i,
                            bytes,
                            more,
                        })
                    };
                    let handed = watch.poll(prefix, block);
                    if let Some((i, bytes, len)) = watch.partial(prefix) {
                        f(Received::Part {
                            j: first + i,
                            bytes,
                            len,
                        });
                    } else if handed == 0 {
                        f(Received::Bytes);
                    }
                }
            });
            let progress = progress.as_mut().map(|f| f as &mut dyn FnMut(&[u8]));
            self.trace.mark("gather_send", to, g.send.len());
            self.exchange(to, tag, kind, &g.send, from, expect, &mut g.recv, progress)?;
            self.trace.mark("gather_recv_done", from, g.recv.len());
            g.have
                .append_message(&g.recv, count)
                .map_err(|msg| CommError::Protocol { peer: from, msg })?;
            d *= 2;
        }
        debug_assert_eq!(g.have.len(), p, "Bruck's steps bring every rank's block");
        Ok(())
    }

    /// TopKAllReduce: every rank's sparse vector gathered and summed (ranks' values added
    /// in rank order, so the result is identical everywhere). O(kP) traffic per rank.
    /// The sum is made as the blocks arrive or after the gather ([`TopkSum`],
    /// [`Communicator::set_topk_sum`]). A malformed `local` (see [`SparseVec::check`]) is
    /// an error before any communication; a peer's malformed block is an error naming
    /// that peer.
    pub fn topk_allreduce(&mut self, local: &SparseVec) -> Result<SparseVec> {
        self.guarded(|c| c.topk_allreduce_unguarded(local))
    }
    fn topk_allreduce_unguarded(&mut self, local: &SparseVec) -> Result<SparseVec> {
        check_local("topk_allreduce", local)?;
        self.trace.mark("begin", self.rank, 0);
        let tag = self.next_tag();
        let mut s = std::mem::take(&mut self.scratch);
        local.encode_into(&mut s.local);
        let (p, r) = (self.world, self.rank);
        // Whether this call sums as the blocks arrive (arrival_sum.rs), and whether it
        // stops doing so once blocks come faster than it merges (see TopkSum). Either
        // way the result has the same bits.
        let (mut arriving, may_stop) = self.topk_sum.plan(p);
        let Scratch {
            local,
            gather,
            sum,
            arrival,
        } = &mut s;
        if arriving {
            arrival.begin(p);
        }
        let watching = arriving;
        // This rank's own block joins at the first read, so that decoding it is not in
        // front of the first send. A block is merged at the next read (see ArrivalSum::
        // settle), or at once where that read brought bytes of the next block of the
        // same message: the last block of a message then waits for bytes of the next
        // step's, after this rank's next send has left. The last block of all is summed
        // as it arrives (ArrivalSum::add_partial, arrival_last.rs).
        let mut own_added = false;
        let mut on_block = |event: Received| {
            // A block with another complete behind it: the bytes come faster than this
            // rank merges them (see TopkSum::Auto).
            if let Received::Block { more: true, .. } = event {
                arriving &= !may_stop;
            }
            if !arriving {
                return;
            }
            if !own_added {
                arrival.add(r, local);
                own_added = true;
            }
            match event {
                Received::Block { j, bytes, .. } => arrival.add((r + j) % p, bytes),
                Received::Bytes => arrival.settle(),
                // The last block's part of the sum is made as it arrives
                // (arrival_last.rs); an earlier block's waits until it is complete.
                Received::Part { j, bytes, len } => {
                    arrival.settle();
                    arrival.add_partial((r + j) % p, bytes, len);
                }
            }
        };
        let on_block = watching.then_some(&mut on_block as &mut dyn FnMut(Received));
        let gathered = self.allgather_into(local, tag, Collective::TopkAllreduce, gather, on_block);
        if watching && !arriving && gathered.is_ok() {
            self.topk_arrival_stops += 1;
        }
        let out = gathered.and_then(|()| {
            let summed = if arriving {
                if !own_added {
                    // No read came (a world of one): the sum is this rank's block.
                    arrival.add(r, local);
                }
                arrival.finish()
            } else {
                // Checked and summed in rank order (the same on every rank), read in place.
                let have = &gather.have;
                sum_encoded_with((0..p).map(|q| have.block((q + p - r) % p)), sum)
            };
            summed.map_err(|(peer, msg)| CommError::Protocol { peer, msg })
        });
        self.scratch = s;
        self.trace.mark("end", self.rank, 0);
        out
    }

    /// gTopKAllReduce (paper 002, Alg. 3): the ⊤ merge (sum by index, keep the k largest
    /// magnitudes, ties to the smaller index) applied up a binomial tree to rank 0, whose
    /// result is then broadcast down the same tree: O(k log P) traffic per rank, any world
    /// size. Note that truncating at every level makes this the tree's result, which can
    /// differ from the top-k of the full sum when an index small on one side is large
    /// after summation; that is the algorithm the paper defines. A malformed `local` (see
    /// [`SparseVec::check`]) is an error before any communication.
    pub fn gtopk_allreduce(&mut self, local: &SparseVec, k: usize) -> Result<SparseVec> {
        self.guarded(|c| c.gtopk_allreduce_unguarded(local, k))
    }
    fn gtopk_allreduce_unguarded(&mut self, local: &SparseVec, k: usize) -> Result<SparseVec> {
        check_local("gtopk_allreduce", local)?;
        self.trace.mark("begin", self.rank, 0);
        let tag = self.next_tag();
        // Every message is a ⊤ merge's result: at most k entries of 8 bytes and a count.
        let expect = Expect::AtMost((k as u64).saturating_mul(8).saturating_add(4));
        // The buffers of earlier calls (see GtopkScratch), put back however this ends.
        let mut g = std::mem::take(&mut self.gtopk);
        let out = self
            .gtopk_reduce(local, k, tag, expect, &mut g)
            .and_then(|()| {
                // Only rank 0's `wire` is sent (the others' holds what they sent up).
                self.broadcast_tagged(0, &g.wire, tag, Collective::GtopkAllreduce, expect)
            });
        let v = out.and_then(|(got, from)| match got {
            Some(bytes) => {
                SparseVec::decode(&bytes).map_err(|msg| CommError::Protocol { peer: from, msg })
            }
            // Rank 0 has the result as it made it: no copy of the bytes it sent to decode.
            None => Ok(g.cur.clone()),
        });
        self.gtopk = g;
        self.trace.mark("end", self.rank, 0);
        v
    }

    /// gTopKAllReduce's way up the tree: this rank's ⊤ merges of what its children send,
    /// sent on to its parent. Leaves the result encoded in `g.wire` at rank 0.
    fn gtopk_reduce(
        &mut self,
        local: &SparseVec,
        k: usize,
        tag: u32,
        expect: Expect,
        g: &mut GtopkScratch,
    ) -> Result<()> {
        let (p, r) = (self.world, self.rank);
        let GtopkScratch {
            cur,
            merge,
            mags,
            wire,
        } = g;
        top_into(local, k, mags, cur);
        self.trace.mark("local_top", r, 0);
        let mut mask = 1;
        while mask < p {
            if r & mask != 0 {
                cur.encode_into(wire);
                self.trace.mark("up_send", r - mask, wire.len());
                self.send_to(r - mask, tag, Collective::GtopkAllreduce, wire)?;
                self.trace.mark("up_sent", r - mask, wire.len());
                return Ok(());
            } else if r + mask < p {
                // The child's entries are summed into ours as they arrive
                // (stream_merge.rs); the cut to k waits for the last byte.
                let peer = r + mask;
                merge.begin();
                let mut feed = |prefix: &[u8]| merge.feed(cur, prefix);
                let kind = Collective::GtopkAllreduce;
                self.trace.mark("up_recv", peer, 0);
                self.recv_from_into(peer, tag, kind, expect, wire, Some(&mut feed))?;
                self.trace.mark("up_last_byte", peer, wire.len());
                let summed = merge.finish(cur, wire);
                let summed = summed.map_err(|msg| CommError::Protocol { peer, msg })?;
                // The sum lives in `merge`, so the cut can replace `cur`.
                top_into(summed, k, mags, cur);
                self.trace.mark("up_cut", peer, 0);
            }
            mask <<= 1;
        }
        cur.encode_into(wire);
        Ok(())
    }
}

/// A local sparse vector's shape, checked where it enters a collective: otherwise the
/// local merge panics on unequal lengths, or the receivers refuse unsorted indices with
/// a protocol error that blames this rank for what its caller did. As an
/// [`CommError::Argument`], it makes every rank fail at once with the cause.
fn check_local(op: &str, local: &SparseVec) -> Result<()> {
    local
        .check()
        .map_err(|e| CommError::Argument(format!("{op}: this rank's sparse vector: {e}")))
}

#[cfg(test)]
mod tests {
    use super::{recv_frame, recv_frame_into, CommConfig, Expect};
    use crate::frame::{
        decode_header, encode_header, FrameHeader, HEADER_LEN, KIND_ABORT, KIND_DATA,
    };
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::collections::HashMap;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    /// The system allocator, noting the largest block each thread asks for, so that a
    /// test can see what its own thread allocated while others run.
    struct Tracking;
    thread_local! {
        static LARGEST: Cell<usize> = const { Cell::new(0) };
    }
    fn note(size: usize) {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    }
    unsafe impl GlobalAlloc for Tracking {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            note(layout.size());
            unsafe { System.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            note(layout.size());
            unsafe { System.alloc_zeroed(layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            note(new_size);
            unsafe { System.realloc(ptr, layout, new_size) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { System.dealloc(ptr, layout) }
        }
    }
    #[global_allocator]
    static ALLOCATOR: Tracking = Tracking;

    /// A peer that announces `announced` payload bytes under tag 1, sends `sent` of them
    /// and hangs up; the receiving end.
    fn lying_peer(announced: u64, sent: usize) -> TcpStream {
        lying_peer_of_kind(0, announced, sent)
    }

    fn lying_peer_of_kind(kind: u8, announced: u64, sent: usize) -> TcpStream {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut w = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (r, _) = l.accept().unwrap();
        r.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        std::thread::spawn(move || {
            let h = encode_header(&FrameHeader {
                kind,
                tag: 1,
                len: announced,
            });
            let _ = w.write_all(&h);
            let body: Vec<u8> = (0..sent).map(|i| i as u8).collect();
            let _ = w.write_all(&body);
        });
        r
    }

    /// Fuzz, through a socket: random bytes, headers with random kinds, tags and
    /// lengths, valid frames with one byte changed, each cut at a random point. A receive
    /// returns the payload only where the frame was whole and valid, is an error naming
    /// the peer otherwise, never panics, and never allocates much more than arrived.
    #[test]
    fn random_and_truncated_streams_are_errors_or_exactly_the_frame() {
        let mut g = tensor::Rng::new(77);
        let (mut accepted, mut refused) = (0, 0);
        for case in 0..600 {
            let mut bytes: Vec<u8>;
            let kind = [KIND_DATA, KIND_DATA, KIND_ABORT, 2, 255][g.below(5)];
            let tag = [1u32, 1, 2][g.below(3)];
            let len = match g.below(3) {
                0 => g.below(64) as u64,
                1 => g.below(1 << 21) as u64,
                _ => (g.below(1 << 30) as u64) << g.below(34),
            };
            match case % 3 {
                0 => bytes = (0..g.below(80)).map(|_| g.below(256) as u8).collect(),
                _ => {
                    bytes = encode_header(&FrameHeader { kind, tag, len }).to_vec();
                    let body = (len as usize).min(1 << 16);
                    bytes.extend((0..body).map(|i| i as u8));
                    if case % 3 == 2 {
                        let at = g.below(bytes.len());
                        bytes[at] ^= 1 + g.below(255) as u8;
                    }
                }
            }
            // Whole, or cut anywhere.
            if g.below(2) == 0 {
                bytes.truncate(g.below(bytes.len() + 1));
            }
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let mut w = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (mut r, _) = l.accept().unwrap();
            r.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let sent = bytes.clone();
            let writer = std::thread::spawn(move || {
                let _ = w.write_all(&sent);
            });
            LARGEST.with(|l| l.set(0));
            const MAX: u64 = 1 << 40;
            let got = recv_frame(&mut r, 3, 1, MAX, Expect::AtMost(MAX));
            let largest = LARGEST.with(|l| l.get());
            // Closed first, so that a writer still blocked on a full socket returns.
            drop(r);
            writer.join().unwrap();
            let whole = bytes.len() >= HEADER_LEN
                && decode_header(&bytes, MAX).is_ok_and(|h| {
                    h.kind == KIND_DATA
                        && h.tag == 1
                        && bytes.len() as u64 >= HEADER_LEN as u64 + h.len
                });
            match got {
                Ok(payload) => {
                    assert!(whole, "case {case}: accepted {bytes:02x?}");
                    assert_eq!(payload, bytes[HEADER_LEN..HEADER_LEN + payload.len()]);
                    accepted += 1;
                }
                Err(e) => {
                    assert!(!whole, "case {case}: refused a whole frame: {e}");
                    assert!(e.to_string().contains("rank 3"), "case {case}: {e}");
                    refused += 1;
                }
            }
            // RECV_FIRST_ALLOC first, then at most twice what came.
            assert!(
                largest <= (2 * bytes.len()).max(super::RECV_FIRST_ALLOC),
                "case {case}: allocated {largest} bytes for {} sent",
                bytes.len()
            );
        }
        // Both outcomes were exercised.
        assert!(
            accepted >= 10 && refused >= 300,
            "{accepted} accepted, {refused} refused"
        );
    }

    /// Socket buffers far below a small frame: [`super::send_now`] leaves part of it,
    /// and the ring's step sends the rest from a thread. Written first and blocking, the
    /// frames of two ranks that send to each other before receiving would wait for each
    /// other until the timeout.
    #[test]
    fn small_frames_go_through_socket_buffers_smaller_than_they_are() {
        use std::os::fd::AsRawFd;
        fn shrink(s: &impl AsRawFd) {
            for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
                let v: libc::c_int = 4096;
                // SAFETY: a valid socket and a c_int option value.
                let rc = unsafe {
                    libc::setsockopt(
                        s.as_raw_fd(),
                        libc::SOL_SOCKET,
                        opt,
                        (&v as *const libc::c_int).cast(),
                        std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                    )
                };
                assert_eq!(rc, 0);
            }
        }
        const N: usize = 60_000;
        // Such buffers do not take such a frame: a pair where nobody reads.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        shrink(&l);
        let w = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_r, _) = l.accept().unwrap();
        shrink(&w);
        let took = super::send_now(&w, 1, &[0u8; HEADER_LEN], &[7u8; N], 0).unwrap();
        assert!(took < HEADER_LEN + N, "the kernel took all {took} bytes");

        // Two ranks, each sending on a connection to the other's shrunk listener and
        // receiving on the one it accepted, so both directions have small windows from
        // their first segment on (shrunk after the handshake, a window stays large).
        let listeners: Vec<TcpListener> = (0..2)
            .map(|_| {
                let l = TcpListener::bind("127.0.0.1:0").unwrap();
                shrink(&l);
                l
            })
            .collect();
        let out: Vec<TcpStream> = (0..2)
            .map(|r| TcpStream::connect(listeners[1 - r].local_addr().unwrap()).unwrap())
            .collect();
        let mut comms: Vec<super::Communicator> = out
            .into_iter()
            .enumerate()
            .map(|(r, w)| {
                let (inbound, _) = listeners[r].accept().unwrap();
                shrink(&w);
                let cfg = CommConfig {
                    timeout: Duration::from_secs(20),
                    ..CommConfig::loopback(r, 2, 0, b"t")
                };
                for s in [&w, &inbound] {
                    s.set_read_timeout(Some(cfg.timeout)).unwrap();
                    s.set_write_timeout(Some(cfg.timeout)).unwrap();
                }
                let (mut writers, mut readers) = (vec![None, None], vec![None, None]);
                writers[1 - r] = Some(w);
                readers[1 - r] = Some(inbound);
                super::Communicator::assemble(&cfg, writers, readers)
            })
            .collect();
        let start = std::time::Instant::now();
        let results: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
            let hs: Vec<_> = comms
                .iter_mut()
                .map(|c| {
                    s.spawn(move || {
                        (0..3)
                            .map(|call| {
                                let mine = vec![(c.rank() * 10 + call) as u8; N];
                                c.allgather_v(&mine).unwrap()
                            })
                            .last()
                            .unwrap()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for got in &results {
            assert_eq!(got, &[vec![2u8; N], vec![12u8; N]]);
        }
        // Well within the 20 s timeout a blocked pair would have run into.
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn an_announced_length_alone_does_not_make_the_receiver_allocate_it() {
        // 3 GiB announced (within the default 4 GiB max_frame), 3 MiB sent, then EOF.
        let mut r = lying_peer(3 << 30, 3 << 20);
        LARGEST.with(|l| l.set(0));
        let e = recv_frame(&mut r, 1, 1, 1 << 32, Expect::AtMost(1 << 32)).unwrap_err();
        let largest = LARGEST.with(|l| l.get());
        assert!(e.to_string().contains("rank 1"), "{e}");
        // The buffer grows with what arrived: at most about twice the 3 MiB.
        assert!(
            largest <= 8 << 20,
            "allocated {largest} bytes for 3 MiB received"
        );
        // A tighter bound from the caller refuses the header outright.
        let mut r = lying_peer(1000, 1000);
        let e = recv_frame(&mut r, 1, 1, 1 << 32, Expect::AtMost(4 + 8 * 10)).unwrap_err();
        assert!(e.to_string().contains("exceeds the maximum of 84"), "{e}");
        let mut r = lying_peer(8, 8);
        let e = recv_frame(&mut r, 1, 1, 1 << 32, Expect::Exactly(0)).unwrap_err();
        assert!(e.to_string().contains("exceeds the maximum of 0"), "{e}");
    }

    /// An abort notice is at most 1 KiB: announcing 3 GiB of one (within max_frame) is a
    /// protocol error, with nothing allocated for it.
    #[test]
    fn an_oversized_abort_notice_is_refused_unallocated() {
        let mut r = lying_peer_of_kind(crate::frame::KIND_ABORT, 3 << 30, 100);
        LARGEST.with(|l| l.set(0));
        let e = recv_frame(&mut r, 1, 1, 1 << 32, Expect::AtMost(1 << 32)).unwrap_err();
        let largest = LARGEST.with(|l| l.get());
        assert!(
            e.to_string()
                .contains("an abort notice of 3221225472 bytes"),
            "{e}"
        );
        assert!(largest < 1 << 20, "allocated {largest} bytes");
    }

    #[test]
    fn a_grown_buffer_holds_the_frame_exactly() {
        for n in [0, 1, (1 << 20) - 1, 1 << 20, (5 << 20) + 3] {
            let mut r = lying_peer(n as u64, n);
            let got = recv_frame(&mut r, 1, 1, 1 << 32, Expect::AtMost(1 << 32)).unwrap();
            assert_eq!(got.len(), n);
            assert!(got.iter().enumerate().all(|(i, &b)| b == i as u8));
            let mut r = lying_peer(n as u64, n);
            let got = recv_frame(&mut r, 1, 1, 1 << 32, Expect::Exactly(n as u64)).unwrap();
            assert_eq!(got.len(), n);
        }
    }

    /// Receives one frame from `r` into `buf`, read whole or (`watch`) as it comes,
    /// the lengths of the prefixes the progress calls saw put in `seen` (emptied first,
    /// so that a test that counts allocations can give it the capacity beforehand).
    fn recv_into(
        r: &mut TcpStream,
        buf: &mut Vec<u8>,
        watch: bool,
        seen: &mut Vec<usize>,
    ) -> crate::Result<()> {
        seen.clear();
        let mut f = |b: &[u8]| seen.push(b.len());
        let progress = watch.then_some(&mut f as &mut dyn FnMut(&[u8]));
        recv_frame_into(r, 1, 1, 1 << 32, Expect::AtMost(1 << 32), buf, progress)
    }

    /// A receive buffer kept between frames: a large frame, then a short one (exactly its
    /// bytes, nothing of the earlier one), then a peer announcing 3 GiB and sending 3 MiB:
    /// the capacity already held is used, and beyond it growth still follows what arrived.
    /// The same when the frame is read as it comes, each read shown to a progress call
    /// with the bytes so far (ever more of them, up to the whole frame).
    #[test]
    fn a_kept_buffer_is_reused_and_still_grows_only_with_what_arrived() {
        let mut seen = Vec::with_capacity(1 << 16);
        for watch in [false, true] {
            let mut buf = Vec::new();
            let big = (3 << 20) + 5;
            recv_into(&mut lying_peer(big as u64, big), &mut buf, watch, &mut seen).unwrap();
            assert_eq!(buf.len(), big);
            assert!(buf.iter().enumerate().all(|(i, &b)| b == i as u8));
            if watch {
                assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
                assert_eq!(seen.last(), Some(&big));
            } else {
                assert!(seen.is_empty());
            }
            let held = buf.capacity();
            // The peer first: setting it up allocates.
            let mut r = lying_peer(7, 7);
            LARGEST.with(|l| l.set(0));
            recv_into(&mut r, &mut buf, watch, &mut seen).unwrap();
            let largest = LARGEST.with(|l| l.get());
            assert_eq!(
                largest, 0,
                "a short frame in a kept buffer allocated {largest} bytes"
            );
            assert_eq!(buf, (0..7u8).collect::<Vec<_>>());
            assert_eq!(buf.capacity(), held);
            assert_eq!(seen.last(), watch.then_some(&7));
            let mut r = lying_peer(3 << 30, 6 << 20);
            LARGEST.with(|l| l.set(0));
            let e = recv_into(&mut r, &mut buf, watch, &mut seen).unwrap_err();
            assert!(e.to_string().contains("rank 1"), "{e}");
            let largest = LARGEST.with(|l| l.get());
            assert!(
                largest <= 16 << 20,
                "allocated {largest} bytes for 6 MiB received into a {held}-byte buffer"
            );
            assert!(
                seen.iter().all(|&n| n <= 6 << 20),
                "shown bytes that never came"
            );
        }
    }

    fn parse(vars: &[(&str, &str)]) -> Result<CommConfig, String> {
        let mut env: HashMap<String, String> = [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("GRADEX_TOKEN", "s3cret"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, v) in vars {
            if v.is_empty() && k.starts_with('-') {
                env.remove(&k[1..]);
            } else {
                env.insert(k.to_string(), v.to_string());
            }
        }
        CommConfig::from_lookup(|k| env.get(k).cloned()).map_err(|e| e.to_string())
    }

    #[test]
    fn launch_variables_out_of_range_are_errors_naming_variable_and_value() {
        let ok = parse(&[]).unwrap();
        assert_eq!((ok.rank, ok.world, ok.master_port), (1, 2, 29500));
        assert_eq!(ok.token, b"s3cret");
        assert_eq!(ok.timeout, Duration::from_secs(60));
        assert_eq!(
            parse(&[("GRADEX_TIMEOUT_SECS", "2.5")]).unwrap().timeout,
            Duration::from_millis(2500)
        );
        for bad in [
            "-1", "inf", "-inf", "nan", "0", "0.0", "1e-12", "1e300", "abc", "",
        ] {
            let e = parse(&[("GRADEX_TIMEOUT_SECS", bad)]).unwrap_err();
            assert!(
                e.contains("GRADEX_TIMEOUT_SECS") && e.contains(&format!("{bad:?}")),
                "{bad}: {e}"
            );
        }
        for bad in ["65536", "-1", "99999999999", "http", ""] {
            let e = parse(&[("MASTER_PORT", bad)]).unwrap_err();
            assert!(
                e.contains("MASTER_PORT") && e.contains(&format!("{bad:?}")),
                "{bad}: {e}"
            );
        }
        assert_eq!(
            parse(&[("MASTER_PORT", "65535")]).unwrap().master_port,
            65535
        );
        let e = parse(&[("RANK", "one")]).unwrap_err();
        assert!(e.contains("RANK=\"one\""), "{e}");
        let e = parse(&[("RANK", "2")]).unwrap_err();
        assert!(e.contains("WORLD_SIZE"), "{e}");
        // A mistyped world size is refused, not a try at per-peer tables for 10¹¹ ranks.
        let e = parse(&[("WORLD_SIZE", "100000000000")]).unwrap_err();
        assert!(e.contains("WORLD_SIZE 100000000000 is over"), "{e}");
        assert_eq!(
            parse(&[("WORLD_SIZE", "65536")]).unwrap().world,
            super::MAX_WORLD
        );
        let huge = CommConfig {
            world: usize::MAX,
            ..parse(&[]).unwrap()
        };
        let e = super::Communicator::connect(&huge)
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("at most 65536"), "{e}");
        let e = parse(&[("-MASTER_ADDR", "")]).unwrap_err();
        assert!(e.contains("MASTER_ADDR is not set"), "{e}");
        // The inherited master listener is rank 0's alone, and must be a real one.
        let e = parse(&[("GRADEX_MASTER_FD", "3")]).unwrap_err();
        assert!(e.contains("GRADEX_MASTER_FD=\"3\" is set on rank 1"), "{e}");
        let e = parse(&[("RANK", "0"), ("GRADEX_MASTER_FD", "x")]).unwrap_err();
        assert!(e.contains("GRADEX_MASTER_FD=\"x\""), "{e}");
    }

    #[test]
    fn port_range_local_rank_and_frame_limit_come_from_the_environment() {
        let ok = parse(&[]).unwrap();
        assert_eq!(
            (ok.listen_ports, ok.local_rank, ok.max_frame),
            (None, None, 1 << 32)
        );
        let c = parse(&[
            ("GRADEX_PORT_RANGE", "29600-29699"),
            ("LOCAL_RANK", "1"),
            ("GRADEX_MAX_FRAME", "1048576"),
        ])
        .unwrap();
        assert_eq!(c.listen_ports, Some(29600..=29699));
        assert_eq!((c.local_rank, c.max_frame), (Some(1), 1 << 20));
        assert_eq!(
            parse(&[("GRADEX_PORT_RANGE", " 7000 - 7000 ")])
                .unwrap()
                .listen_ports,
            Some(7000..=7000)
        );
        for (bad, why) in [
            ("29600", "has no '-'"),
            ("29699-29600", "is empty"),
            ("0-10", "outside 1-65535"),
            ("1-65536", "outside 1-65535"),
            ("a-b", "outside 1-65535"),
        ] {
            let e = parse(&[("GRADEX_PORT_RANGE", bad)]).unwrap_err();
            assert!(
                e.contains(&format!("GRADEX_PORT_RANGE={bad:?}")) && e.contains(why),
                "{bad}: {e}"
            );
        }
        let e = parse(&[("LOCAL_RANK", "2")]).unwrap_err();
        assert!(
            e.contains("LOCAL_RANK 2 is not in 0..WORLD_SIZE (2)"),
            "{e}"
        );
        let e = parse(&[("LOCAL_RANK", "gpu0")]).unwrap_err();
        assert!(e.contains("LOCAL_RANK=\"gpu0\""), "{e}");
        for bad in ["0", "-1", "1e6", "big"] {
            let e = parse(&[("GRADEX_MAX_FRAME", bad)]).unwrap_err();
            assert!(
                e.contains(&format!("GRADEX_MAX_FRAME={bad:?}")),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn empty_tokens_are_refused_and_a_token_files_line_ending_is_not_part_of_it() {
        let e = parse(&[("GRADEX_TOKEN", "")]).unwrap_err();
        assert!(e.contains("GRADEX_TOKEN is set but empty"), "{e}");
        let dir = std::env::temp_dir().join(format!("comm-token-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (contents, want) in [
            (&b"s3cret\n"[..], Some(&b"s3cret"[..])),
            (b"s3cret\r\n", Some(b"s3cret")),
            (b"s3cret", Some(b"s3cret")),
            // Only one line ending is the file's; anything else is the token's.
            (b"s3cret\n\n", Some(b"s3cret\n")),
            (b" s3cret ", Some(b" s3cret ")),
            (b"", None),
            (b"\n", None),
        ] {
            let f = dir.join("token");
            std::fs::write(&f, contents).unwrap();
            let f = f.to_str().unwrap().to_string();
            let got = parse(&[("-GRADEX_TOKEN", ""), ("GRADEX_TOKEN_FILE", &f)]);
            match want {
                Some(t) => assert_eq!(got.unwrap().token, t, "{contents:?}"),
                None => {
                    let e = got.unwrap_err();
                    assert!(e.contains("empty token"), "{contents:?}: {e}");
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
        let e = parse(&[("-GRADEX_TOKEN", "")]).unwrap_err();
        assert!(e.contains("set GRADEX_TOKEN or GRADEX_TOKEN_FILE"), "{e}");
    }

    /// A broadcast message that does not decode is blamed on the rank it came from (the
    /// tree parent), not on the root: in gTopKAllReduce's broadcast with 4 ranks, rank 3
    /// receives from rank 1, here a scripted rank that forwards garbage.
    #[test]
    fn a_malformed_gtopk_broadcast_names_the_rank_that_sent_it() {
        use super::{Collective, Communicator};
        use crate::SparseVec;
        let world = 4;
        let configs = CommConfig::loopback_job(world, b"t").unwrap();
        let errors: Vec<Option<String>> = std::thread::scope(|s| {
            let hs: Vec<_> = configs
                .into_iter()
                .enumerate()
                .map(|(rank, cfg)| {
                    s.spawn(move || {
                        let cfg = CommConfig {
                            timeout: Duration::from_secs(20),
                            ..cfg
                        };
                        let mut c = Communicator::connect(&cfg).unwrap();
                        let mine = SparseVec {
                            indices: vec![rank as u32],
                            values: vec![1.0 + rank as f32],
                        };
                        if rank != 1 {
                            return c.gtopk_allreduce(&mine, 2).err().map(|e| e.to_string());
                        }
                        // Rank 1's part, by hand: its reduction message to rank 0, the
                        // broadcast from rank 0, then five bytes of garbage to rank 3.
                        let tag = c.next_tag();
                        let k = Collective::GtopkAllreduce;
                        c.send_to(0, tag, k, &mine.encode()).unwrap();
                        c.recv_from(0, tag, k, Expect::AtMost(1 << 20)).unwrap();
                        c.send_to(3, tag, k, &[1, 2, 3, 4, 5]).unwrap();
                        None
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(errors[0].is_none() && errors[2].is_none(), "{errors:?}");
        let e = errors[3]
            .as_deref()
            .expect("rank 3 must refuse the message");
        assert!(e.starts_with("rank 1: malformed frame"), "{e}");
    }
}
