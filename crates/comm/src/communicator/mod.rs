//! The communicator: one authenticated TCP connection per peer, and the collectives.
//! Every collective must be called in the same order on every rank; each call gets a
//! sequence tag that receivers check, so a rank that diverges fails loudly instead of
//! mixing up messages.
//!
//! This file holds the [`Communicator`] itself: joining a job, its counters and settings,
//! and the moves the collectives are made of (a frame to a peer, a frame from a peer, and
//! a ring step's send and receive at once). The rest, a file per concept:
//! - `config.rs`: [`CommConfig`], the job's description, from the launch environment;
//! - `wire.rs`: frames on a socket: written in one call where the kernel takes them,
//!   read with every header checked and memory bounded by what arrived;
//! - `failure.rs`: what a rank does when a peer fails: abort notices to the others, and
//!   tracing a stall to the rank that hangs;
//! - `p2p.rs`: `send` and `recv`;
//! - `rooted.rs`: `barrier` (through rank 0) and the binomial-tree `broadcast`;
//! - `dense.rs`: the ring `allreduce`, f32 and half precision on the wire;
//! - `gather.rs`: Bruck's `allgather_v`, which can hand out blocks as they arrive;
//! - `topk.rs`: TopKAllReduce; `gtopk.rs`: gTopKAllReduce (paper 002, Alg. 3).

mod config;
mod dense;
mod failure;
mod gather;
mod gtopk;
mod p2p;
mod rooted;
mod topk;
mod wire;

pub use config::CommConfig;
pub use dense::{ReduceOp, Wire16};
pub use topk::TopkSum;

use crate::arrival_sum::ArrivalSum;
use crate::blocks::GatherScratch;
use crate::counters::{ByteCounters, Collective};
use crate::error::{CommError, Result};
use crate::frame::{encode_header, FrameHeader, HEADER_LEN, KIND_DATA};
use crate::rendezvous::connect_mesh;
use crate::sparse::{SparseVec, SumScratch};
use crate::trace::{Trace, TraceEvent};
use gtopk::GtopkScratch;
use std::net::TcpStream;
use std::time::Duration;
use topk::ArrivalBackoff;
use wire::{
    check_size, mark_failed_send, recv_frame_into, send_frame, send_now, send_rest, write_frame,
    Expect, Progress,
};

/// One rank's end of a job: a connection to every peer, the collectives' sequence, the
/// byte counters and the buffers the collectives keep between calls. Made by
/// [`Communicator::connect`]; after a peer's failure every call returns that failure.
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
    /// TopKAllReduce calls that summed after the gather without trying on arrival,
    /// after stops (`topk.rs`, `ArrivalBackoff`).
    topk_arrival_skips: u64,
    /// When Auto next tries summing on arrival.
    topk_backoff: ArrivalBackoff,
    /// The sparse collectives' steps, when asked for (`trace.rs`).
    trace: Trace,
    /// Where the tensors of its [`ProcessGroup`](crate::ProcessGroup) collectives live
    /// (they go through the host on the way to the wire); the CPU unless set.
    device: tensor::Device,
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

/// Tags of point-to-point messages live in their own space (high bit set).
const P2P: u32 = 1 << 31;

/// The connection to or from `peer` in `streams` (a communicator's writers or readers).
fn stream(streams: &mut [Option<TcpStream>], peer: usize) -> Result<&mut TcpStream> {
    streams
        .get_mut(peer)
        .and_then(Option::as_mut)
        .ok_or_else(|| CommError::Config(format!("no connection to rank {peer}")))
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
            topk_arrival_skips: 0,
            topk_backoff: ArrivalBackoff::default(),
            trace: Trace::default(),
            device: tensor::Device::Cpu,
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
    pub(crate) fn counters_mut(&mut self) -> &mut ByteCounters {
        &mut self.counters
    }
    /// Where its [`ProcessGroup`](crate::ProcessGroup) collectives' tensors live.
    pub fn device(&self) -> tensor::Device {
        self.device
    }
    /// Chooses when TopKAllReduce sums (benchmarks and tests compare the choices), and
    /// forgets [`TopkSum::Auto`]'s earlier stops (a benchmark sets it before each size,
    /// so that one size's stops do not decide how the next one's calls sum).
    pub fn set_topk_sum(&mut self, when: TopkSum) {
        self.topk_sum = when;
        self.topk_backoff = ArrivalBackoff::default();
    }
    /// How many TopKAllReduce calls of this rank so far began summing as the blocks
    /// arrived and then, the merges behind the bytes, summed after the gather
    /// ([`TopkSum::Auto`]); benchmarks report it beside the times.
    pub fn topk_arrival_stops(&self) -> u64 {
        self.topk_arrival_stops
    }
    /// How many TopKAllReduce calls of this rank so far summed after the gather without
    /// trying to sum as the blocks arrived, because earlier calls had stopped
    /// ([`TopkSum::Auto`]'s backoff); benchmarks report it beside the stops.
    pub fn topk_arrival_skips(&self) -> u64 {
        self.topk_arrival_skips
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
    /// Where its [`ProcessGroup`](crate::ProcessGroup) collectives take and return
    /// tensors: on a GPU, each crosses to the host for the wire and back.
    pub fn set_device(&mut self, device: tensor::Device) {
        self.device = device;
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
        let w = stream(&mut self.writers, peer)?;
        let sent = send_frame(w, peer, tag, payload, self.max_frame);
        mark_failed_send(&mut self.dirty, peer, sent)?;
        self.counters.sent(kind, payload.len(), HEADER_LEN);
        Ok(())
    }
    /// Sends a small frame of another kind than data (a refusal), counted as overhead of
    /// point-to-point traffic.
    fn send_kind(&mut self, peer: usize, kind: u8, tag: u32, payload: &[u8]) -> Result<()> {
        let w = stream(&mut self.writers, peer)?;
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
        let r = stream(&mut self.readers, peer)?;
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
        let w = stream(&mut self.writers, to)?;
        let r = stream(&mut self.readers, from)?;
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
    use super::{CommConfig, Communicator};
    use crate::frame::HEADER_LEN;
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    /// Socket buffers far below a small frame: [`wire::send_now`] leaves part of it,
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
        let mut comms: Vec<Communicator> = out
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
                Communicator::assemble(&cfg, writers, readers)
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
}
