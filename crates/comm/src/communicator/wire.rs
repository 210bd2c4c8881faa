//! Frames on a socket: a versioned header (`frame.rs`) and a payload. Sending writes a
//! frame in one call where the kernel takes it; receiving checks the header (version,
//! kind, the tag of the call in progress, the length against what the receiver expects)
//! before reading the payload into a buffer that grows only as bytes arrive, so a peer's
//! announced length alone cannot make this rank allocate.

use super::failure::read_notice;
use super::P2P;
use crate::error::{CommError, Result};
use crate::frame::{
    decode_header, encode_header, FrameHeader, ABORT_MAX, HEADER_LEN, KIND_ABORT, KIND_DATA,
    KIND_REFUSED, REFUSED_LEN,
};
use std::io::{Read, Write};
use std::net::TcpStream;

/// Writes as much of the frame `header` + `payload`, from its byte `done` on, as the
/// kernel takes at once, without waiting (one `sendmsg`, `MSG_DONTWAIT`, then more while
/// it keeps taking): the bytes of the frame written by then, all of it or a prefix.
pub(super) fn send_now(
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
pub(super) fn send_rest(
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
pub(super) fn write_frame(
    w: &mut TcpStream,
    peer: usize,
    kind: u8,
    tag: u32,
    payload: &[u8],
) -> Result<()> {
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
pub(super) fn send_frame(
    w: &mut TcpStream,
    peer: usize,
    tag: u32,
    payload: &[u8],
    limit: u64,
) -> Result<()> {
    check_size(peer, payload, limit)?;
    write_frame(w, peer, KIND_DATA, tag, payload)
}

/// A payload over `limit` is refused before anything is written or read.
pub(super) fn check_size(peer: usize, payload: &[u8], limit: u64) -> Result<()> {
    let len = payload.len() as u64;
    if len > limit {
        return Err(CommError::TooLarge { peer, len, limit });
    }
    Ok(())
}

pub(super) fn read_failed(peer: usize) -> impl Fn(std::io::Error) -> CommError {
    move |source| CommError::Peer {
        peer,
        op: "receive",
        source,
    }
}

/// Reads and checks the next header from `peer`: version, length bound, and the tag of
/// the collective in progress. With `exact`, the payload must be exactly that long.
pub(super) fn read_header(
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
pub(super) fn mark_failed_send(dirty: &mut [bool], to: usize, sent: Result<()>) -> Result<()> {
    if let Err(e) = &sent {
        dirty[to] |= matches!(e, CommError::Peer { .. });
    }
    sent
}

/// What a receiver knows of the frame it waits for.
#[derive(Clone, Copy, Debug)]
pub(super) enum Expect {
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
    pub(super) fn send_limit(self, max_frame: u64) -> u64 {
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
pub(super) type Progress<'a> = Option<&'a mut dyn FnMut(&[u8])>;

/// Receives `peer`'s frame `tag`: its header checked against `expect` and `max_frame`
/// (a wrong tag, version or length is an error naming `peer`), its payload read into
/// `payload` (emptied first), whose capacity is reused: a buffer kept between calls
/// grows to the largest frame and then allocates nothing. With
/// `progress`, the payload is read as it comes, each read followed by a call with the
/// bytes so far (TopKAllReduce sums the blocks that are complete while the rest arrive).
pub(super) fn recv_frame_into(
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

#[cfg(test)]
mod tests {
    use super::{recv_frame, recv_frame_into, Expect};
    use crate::frame::{
        decode_header, encode_header, FrameHeader, HEADER_LEN, KIND_ABORT, KIND_DATA,
    };
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
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
}
