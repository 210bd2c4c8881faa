//! The dense ring allreduce (reduce-scatter, then allgather) of f32, on the wire as f32
//! or as IEEE half precision, with every rank ending with the same bits.

use super::wire::{read_failed, read_header, send_frame, Expect};
use super::{stream, Communicator};
use crate::counters::Collective;
use crate::error::{CommError, Result};
use crate::frame::HEADER_LEN;
use std::io::Read;
use std::net::TcpStream;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Average,
}

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
        let w = stream(&mut self.writers, to)?;
        let r = stream(&mut self.readers, from)?;
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
        self.guarded(|c| c.allreduce_16_unguarded(data, op, Wire16::F16))
    }
    /// [`Self::allreduce_f16`] with bfloat16 on the wire (8 exponent bits, as f32's, and 8
    /// of mantissa: PyTorch's `bf16_compress_hook`): no overflow where f32 has none, at
    /// 2⁻⁸ relative rounding instead of f16's 2⁻¹¹.
    pub fn allreduce_bf16(&mut self, data: &mut [f32], op: ReduceOp) -> Result<()> {
        self.guarded(|c| c.allreduce_16_unguarded(data, op, Wire16::Bf16))
    }
    /// [`Self::allreduce_f16`] or [`Self::allreduce_bf16`], by `wire`.
    pub fn allreduce_16(&mut self, data: &mut [f32], op: ReduceOp, wire: Wire16) -> Result<()> {
        self.guarded(|c| c.allreduce_16_unguarded(data, op, wire))
    }
    fn allreduce_16_unguarded(
        &mut self,
        data: &mut [f32],
        op: ReduceOp,
        wire: Wire16,
    ) -> Result<()> {
        let tag = self.next_tag();
        let (p, r, n) = (self.world, self.rank, data.len());
        // One send and one receive buffer for all 2(P-1) steps.
        let (mut payload, mut got) = (Vec::new(), Vec::new());
        let to_f16 = |v: &[f32], out: &mut Vec<u8>| {
            out.clear();
            out.extend(v.iter().flat_map(|&x| wire.encode(x)));
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
                    *d += wire.decode([c[0], c[1]]);
                }
            }
            // This rank completed segment (r + 1) % p: round it once, then circulate it.
            let own = segment(n, p, (r + 1) % p);
            for v in &mut data[own] {
                *v = wire.round(*v);
            }
            for s in 0..p - 1 {
                let send_seg = segment(n, p, (r + 1 + p - s) % p);
                let recv_seg = segment(n, p, (r + p - s) % p);
                to_f16(&data[send_seg], &mut payload);
                let expect = f16_bytes(&recv_seg);
                let kind = Collective::Allreduce;
                self.exchange(right, tag, kind, &payload, left, expect, &mut got, None)?;
                for (d, c) in data[recv_seg].iter_mut().zip(got.chunks_exact(2)) {
                    *d = wire.decode([c[0], c[1]]);
                }
            }
        } else {
            data.iter_mut().for_each(|v| *v = wire.round(*v));
        }
        if op == ReduceOp::Average {
            let inv = 1.0 / p as f32;
            data.iter_mut().for_each(|v| *v *= inv);
        }
        Ok(())
    }
}

/// A 16-bit float format on the wire of the dense 16-bit ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire16 {
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
}

impl Wire16 {
    fn encode(self, x: f32) -> [u8; 2] {
        match self {
            Wire16::F16 => half::f16::from_f32(x).to_le_bytes(),
            Wire16::Bf16 => half::bf16::from_f32(x).to_le_bytes(),
        }
    }
    fn decode(self, b: [u8; 2]) -> f32 {
        match self {
            Wire16::F16 => half::f16::from_le_bytes(b).to_f32(),
            Wire16::Bf16 => half::bf16::from_le_bytes(b).to_f32(),
        }
    }
    fn round(self, x: f32) -> f32 {
        self.decode(self.encode(x))
    }
}
