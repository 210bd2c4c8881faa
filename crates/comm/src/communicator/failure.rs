//! When a peer fails: every public call's error passes through [`Communicator::guard`],
//! which tells the other ranks which rank failed (an abort notice), follows a stall to the
//! rank that hangs rather than blaming the neighbour it reached this rank through, and
//! shuts the communicator, so that every rank fails within the timeout, naming the rank.

use super::wire::read_failed;
use super::Communicator;
use crate::auth::read_before;
use crate::error::{CommError, Result};
use crate::frame::{decode_header, encode_header, FrameHeader, ABORT_MAX, HEADER_LEN, KIND_ABORT};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How long a rank whose receive timed out listens for the other ranks' notices before
/// naming the rank it traced the stall to ([`Communicator::trace_stall`]). Ranks blocked
/// behind a hung rank time out within microseconds of each other; this is far longer.
const STALL_GRACE: Duration = Duration::from_millis(300);

/// The largest data frame a rank tracing a stall reads past to reach a notice behind it.
const STALL_SKIP_MAX: u64 = 1 << 20;

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
pub(super) fn read_notice(r: &mut TcpStream, peer: usize, len: u64) -> CommError {
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

impl Communicator {
    /// Called with every public call's result. On an error that blames a peer, this rank
    /// tells every other peer which rank failed (an abort notice, best effort, on writers
    /// with no interrupted frame) and shuts its sockets, so that ranks blocked on it fail
    /// at once and name the failed rank, not the neighbour through which the failure
    /// reached them. A failed send whose peer had already sent a notice reports the
    /// notice. This rank's own message over the frame limit or invalid argument to a
    /// collective ([`CommError::TooLarge`], [`CommError::Argument`]) is news for the
    /// peers too, naming this rank. Other errors that blame no peer (a peer index out of
    /// range, say) change nothing.
    pub(super) fn guard<T>(&mut self, r: Result<T>) -> Result<T> {
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
    pub(super) fn guarded<T>(&mut self, call: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.check_alive()?;
        let r = call(self);
        self.guard(r)
    }
    /// The error of a call on a communicator that gave up after a peer failed.
    pub(super) fn check_alive(&self) -> Result<()> {
        match &self.aborted {
            Some((failed, cause)) => Err(CommError::PeerFailed {
                failed: *failed,
                reporter: self.rank,
                cause: format!("this communicator gave up after: {cause}"),
            }),
            None => Ok(()),
        }
    }
}
