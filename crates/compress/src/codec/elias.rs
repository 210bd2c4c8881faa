//! The Elias ω (recursive) code for positive integers, and QSGD's stream built from it
//! (Alistarh et al. §3.2): a 32-bit norm, then for each nonzero quantised coordinate the
//! Elias code of its gap from the previous one (the first counted from −1), a sign bit,
//! and the Elias code of its level s·ξᵢ ≥ 1.

use super::{BitReader, BitWriter, CodecError, Result};

/// Elias ω: the binary representation of k, preceded recursively by codes of its length
/// minus one, ended by a 0 bit. |ω(k)| = log k + log log k + … + 1.
pub fn write(w: &mut BitWriter, k: u64) -> Result<()> {
    if k == 0 {
        return Err(CodecError::Invalid(
            "Elias codes positive integers only".into(),
        ));
    }
    let mut groups = Vec::new();
    let mut n = k;
    while n > 1 {
        let len = 64 - n.leading_zeros();
        groups.push((n, len));
        n = (len - 1) as u64;
    }
    for &(v, len) in groups.iter().rev() {
        w.bits(v, len);
    }
    w.bit(false);
    Ok(())
}

pub fn read(r: &mut BitReader) -> Result<u64> {
    let mut n: u64 = 1;
    while r.bit()? {
        if n >= 64 {
            return Err(CodecError::Invalid("Elias code longer than 64 bits".into()));
        }
        // The 1 just read is the leading bit of an (n+1)-bit group.
        n = (1u64 << n) | r.bits(n as u32)?;
    }
    Ok(n)
}

/// One quantised bucket: its norm, and (index, sign negative?, level ≥ 1) per nonzero.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedBucket {
    pub norm: f32,
    pub entries: Vec<(u32, bool, u32)>,
}

pub fn encode_qsgd(w: &mut BitWriter, b: &QuantizedBucket) -> Result<()> {
    w.bits(b.norm.to_bits() as u64, 32);
    w.bits(b.entries.len() as u64, 32);
    let mut prev: i64 = -1;
    for &(i, neg, level) in &b.entries {
        let gap = i as i64 - prev;
        if gap < 1 || level == 0 {
            return Err(CodecError::Invalid(format!(
                "entries must have increasing indices and levels ≥ 1 (index {i}, level {level})"
            )));
        }
        write(w, gap as u64)?;
        w.bit(neg);
        write(w, level as u64)?;
        prev = i as i64;
    }
    Ok(())
}

/// Reads one bucket of at most `d` coordinates with levels at most `s`.
pub fn decode_qsgd(r: &mut BitReader, d: usize, s: u32) -> Result<QuantizedBucket> {
    let norm = f32::from_bits(r.bits(32)? as u32);
    let count = r.bits(32)? as usize;
    if count > d {
        return Err(CodecError::Invalid(format!(
            "{count} nonzeros in a bucket of {d}"
        )));
    }
    let mut entries = Vec::with_capacity(count);
    let mut prev: i64 = -1;
    for _ in 0..count {
        prev += read(r)? as i64;
        if prev >= d as i64 {
            return Err(CodecError::Invalid(format!(
                "index {prev} beyond the bucket of {d}"
            )));
        }
        let neg = r.bit()?;
        let level = read(r)?;
        if level > s as u64 {
            return Err(CodecError::Invalid(format!("level {level} above s = {s}")));
        }
        entries.push((prev as u32, neg, level as u32));
    }
    Ok(QuantizedBucket { norm, entries })
}
