//! Bit-level writing and reading, most significant bit first, with bounds checks.

use super::{CodecError, Result};

#[derive(Default, Debug, Clone)]
pub struct BitWriter {
    bytes: Vec<u8>,
    /// Bits used in the last byte (0 = the last byte is full or there is none).
    used: u8,
}

impl BitWriter {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn bit(&mut self, b: bool) {
        if self.used == 0 {
            self.bytes.push(0);
        }
        if b {
            if let Some(last) = self.bytes.last_mut() {
                *last |= 0x80 >> self.used;
            }
        }
        self.used = (self.used + 1) % 8;
    }
    /// The low `n` bits of `v`, most significant first (n ≤ 64).
    pub fn bits(&mut self, v: u64, n: u32) {
        for i in (0..n).rev() {
            self.bit((v >> i) & 1 == 1);
        }
    }
    pub fn len_bits(&self) -> usize {
        self.bytes.len() * 8
            - if self.used == 0 {
                0
            } else {
                8 - self.used as usize
            }
    }
    pub fn finish(self) -> Vec<u8> {
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
    pub fn bit(&mut self) -> Result<bool> {
        let byte = *self
            .bytes
            .get(self.pos / 8)
            .ok_or(CodecError::Truncated("bit stream ended early"))?;
        let b = byte & (0x80 >> (self.pos % 8)) != 0;
        self.pos += 1;
        Ok(b)
    }
    pub fn bits(&mut self, n: u32) -> Result<u64> {
        if n > 64 {
            return Err(CodecError::Invalid(format!("a field of {n} bits")));
        }
        let mut v = 0u64;
        for _ in 0..n {
            v = (v << 1) | self.bit()? as u64;
        }
        Ok(v)
    }
    pub fn position(&self) -> usize {
        self.pos
    }
    pub fn remaining(&self) -> usize {
        self.bytes.len() * 8 - self.pos
    }
}
