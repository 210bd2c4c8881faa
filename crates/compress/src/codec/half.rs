//! f16 values (IEEE half precision, little-endian): the dense method's 16-bit wire.

use super::{CodecError, Result};

pub fn encode(values: &[f32]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
        .collect()
}

pub fn decode(bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    if bytes.len() != 2 * n {
        return Err(CodecError::Invalid(format!(
            "{} bytes for {n} half-precision values",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect())
}
