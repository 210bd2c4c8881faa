//! SBC's position coding (Sattler et al., §II and Alg. 3): the gaps between consecutive
//! nonzero positions (the first gap counted from −1, so every gap is ≥ 1) are Golomb–Rice
//! coded with parameter M = 2^b*, b* = 1 + ⌊log₂(log(φ−1) / log(1−p))⌋ for density p and
//! the golden ratio φ: gap − 1 = qM + r is written as q ones, a zero, and r in b* bits.
//! For geometric gaps the expected cost is b* + 1/(1 − (1−p)^M) bits (the paper's (5)).

use super::{BitReader, BitWriter, CodecError, Result};

/// The paper's optimal b* for density `p` in (0, 1).
pub fn optimal_b(p: f64) -> u32 {
    let phi = (1.0 + 5f64.sqrt()) / 2.0;
    let x = ((phi - 1.0).ln() / (1.0 - p.clamp(1e-12, 1.0 - 1e-12)).ln()).log2();
    (1.0 + x.floor()).clamp(0.0, 62.0) as u32
}

/// Expected bits per position for density `p` with parameter `b` (formula (5)).
pub fn expected_bits(p: f64, b: u32) -> f64 {
    b as f64 + 1.0 / (1.0 - (1.0 - p).powf(2f64.powi(b as i32)))
}

/// Encodes ascending positions (strictly increasing) with parameter `b`.
pub fn encode(positions: &[u32], b: u32) -> Result<Vec<u8>> {
    let mut w = BitWriter::new();
    let mut prev: i64 = -1;
    for &p in positions {
        let gap = p as i64 - prev;
        if gap < 1 {
            return Err(CodecError::Invalid(format!(
                "positions must be strictly increasing ({p} after {prev})"
            )));
        }
        let v = (gap - 1) as u64;
        for _ in 0..(v >> b) {
            w.bit(true);
        }
        w.bit(false);
        w.bits(v & ((1u64 << b) - 1), b);
        prev = p as i64;
    }
    Ok(w.finish())
}

/// Decodes `count` positions, each below `n`.
pub fn decode(bytes: &[u8], count: usize, b: u32, n: usize) -> Result<Vec<u32>> {
    if b > 62 {
        return Err(CodecError::Invalid(format!("Golomb parameter b = {b}")));
    }
    let mut r = BitReader::new(bytes);
    let mut out = Vec::with_capacity(count.min(n));
    let mut prev: i64 = -1;
    for _ in 0..count {
        let mut q: u64 = 0;
        while r.bit()? {
            q += 1;
            if q.saturating_mul(1u64 << b) > n as u64 {
                return Err(CodecError::Invalid("a gap longer than the tensor".into()));
            }
        }
        let gap = ((q << b) | r.bits(b)?) as i64 + 1;
        prev += gap;
        if prev >= n as i64 {
            return Err(CodecError::Invalid(format!(
                "position {prev} beyond the tensor's {n} elements"
            )));
        }
        out.push(prev as u32);
    }
    // Only the last byte's padding may follow: a full byte more means the message was
    // longer than its `count` positions (as QSGD's decoder rules for its buckets).
    if r.remaining() >= 8 {
        return Err(CodecError::Invalid(format!(
            "{} bits after the last of {count} positions",
            r.remaining()
        )));
    }
    Ok(out)
}
