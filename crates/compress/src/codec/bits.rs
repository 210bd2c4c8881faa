//! Bit-level writing and reading, most significant bit first, with bounds checks.
//! Fields are moved through a 64-bit accumulator rather than bit by bit: the QSGD,
//! TernGrad and 1-bit streams write one or two fields per value. The writer takes up to
//! 56 bits in one step (QSGD's gap, sign and level together); the reader loads 8 bytes
//! at a time.

use super::{CodecError, Result};

#[derive(Default, Debug, Clone)]
pub struct BitWriter {
    bytes: Vec<u8>,
    /// Pending bits, right-aligned; fewer than 8 between calls.
    acc: u64,
    pending: u32,
}

impl BitWriter {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn bit(&mut self, b: bool) {
        self.push(b as u64, 1);
    }
    /// The low `n` bits of `v`, most significant first (n ≤ 64).
    #[inline]
    pub fn bits(&mut self, v: u64, n: u32) {
        if n > 56 {
            self.push(v >> 32, n - 32);
            self.push(v & 0xFFFF_FFFF, 32);
        } else {
            self.push(v, n);
        }
    }
    /// n ≤ 56, so with fewer than 8 pending bits the accumulator never overflows.
    #[inline]
    fn push(&mut self, v: u64, n: u32) {
        if n == 0 {
            return;
        }
        let mask = (1u64 << n) - 1;
        self.acc = (self.acc << n) | (v & mask);
        self.pending += n;
        while self.pending >= 8 {
            self.pending -= 8;
            self.bytes.push((self.acc >> self.pending) as u8);
        }
        self.acc &= (1u64 << self.pending) - 1;
    }
    pub fn len_bits(&self) -> usize {
        self.bytes.len() * 8 + self.pending as usize
    }
    /// The bytes, the last one padded with zero bits.
    pub fn finish(mut self) -> Vec<u8> {
        if self.pending > 0 {
            self.bytes.push((self.acc << (8 - self.pending)) as u8);
        }
        self.bytes
    }
}

pub struct BitReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> BitReader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        BitReader { bytes, pos: 0 }
    }
    #[inline]
    pub fn bit(&mut self) -> Result<bool> {
        let byte = *self
            .bytes
            .get(self.pos / 8)
            .ok_or(CodecError::Truncated("bit stream ended early"))?;
        let b = byte & (0x80 >> (self.pos % 8)) != 0;
        self.pos += 1;
        Ok(b)
    }
    #[inline]
    pub fn bits(&mut self, n: u32) -> Result<u64> {
        if n > 64 {
            return Err(CodecError::Invalid(format!("a field of {n} bits")));
        }
        if n > 32 {
            let hi = self.bits(n - 32)?;
            return Ok((hi << 32) | self.bits(32)?);
        }
        if n == 0 {
            return Ok(0);
        }
        if self.remaining() < n as usize {
            return Err(CodecError::Truncated("bit stream ended early"));
        }
        // Up to 32 bits starting anywhere within a byte span at most 5 bytes: one 8-byte
        // big-endian load where the stream has 8 bytes left, else byte by byte.
        let first = self.pos / 8;
        let window = match self.bytes.get(first..first + 8) {
            Some(eight) => u64::from_be_bytes(eight.try_into().unwrap_or([0; 8])),
            None => self.tail_window(first),
        };
        let shift = 64 - (self.pos % 8) as u32 - n;
        self.pos += n as usize;
        Ok((window >> shift) & ((1u64 << n) - 1))
    }
    /// The 8 bytes from `first` where fewer are left, zero-padded: the last few fields
    /// of a stream only, kept out of line so that `bits` stays small enough to inline.
    #[cold]
    #[inline(never)]
    fn tail_window(&self, first: usize) -> u64 {
        (0..8).fold(0u64, |w, k| {
            (w << 8) | *self.bytes.get(first + k).unwrap_or(&0) as u64
        })
    }
    /// The next 56 bits, left-aligned in the low 56 bits of the result (bit 55 is the
    /// next one), without consuming them; None within 8 bytes of the end.
    #[inline]
    pub fn peek56(&self) -> Option<u64> {
        let first = self.pos / 8;
        let eight = self.bytes.get(first..first + 8)?;
        let window = u64::from_be_bytes(eight.try_into().ok()?);
        Some((window >> (8 - (self.pos % 8))) & ((1u64 << 56) - 1))
    }
    /// Consumes `n` bits already looked at through [`BitReader::peek56`].
    #[inline]
    pub fn skip(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.bytes.len() * 8);
    }
    pub fn position(&self) -> usize {
        self.pos
    }
    pub fn remaining(&self) -> usize {
        self.bytes.len() * 8 - self.pos
    }
}
