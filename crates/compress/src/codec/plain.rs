//! Plain sparse pairs: a u32 count, the u32 indices, then the f32 values (little-endian),
//! the format of TopKAllReduce and gTop-k (8 bytes per nonzero).

use super::{CodecError, Result};

pub fn encode(indices: &[u32], values: &[f32]) -> Result<Vec<u8>> {
    if indices.len() != values.len() {
        return Err(CodecError::Invalid(format!(
            "{} indices for {} values",
            indices.len(),
            values.len()
        )));
    }
    let mut out = Vec::with_capacity(4 + 8 * indices.len());
    out.extend((indices.len() as u32).to_le_bytes());
    indices.iter().for_each(|i| out.extend(i.to_le_bytes()));
    values.iter().for_each(|v| out.extend(v.to_le_bytes()));
    Ok(out)
}

/// Decodes pairs whose indices must be below `n`.
pub fn decode(bytes: &[u8], n: usize) -> Result<(Vec<u32>, Vec<f32>)> {
    let count = u32::from_le_bytes(
        bytes
            .get(..4)
            .ok_or(CodecError::Truncated("pair count"))?
            .try_into()
            .map_err(|_| CodecError::Truncated("pair count"))?,
    ) as usize;
    if bytes.len() != 4 + 8 * count {
        return Err(CodecError::Invalid(format!(
            "{} bytes cannot hold {count} pairs",
            bytes.len()
        )));
    }
    let word = |k: usize| {
        [
            bytes[4 + 4 * k],
            bytes[5 + 4 * k],
            bytes[6 + 4 * k],
            bytes[7 + 4 * k],
        ]
    };
    let indices: Vec<u32> = (0..count).map(|k| u32::from_le_bytes(word(k))).collect();
    if let Some(&bad) = indices.iter().find(|&&i| i as usize >= n) {
        return Err(CodecError::Invalid(format!(
            "index {bad} beyond the tensor's {n} elements"
        )));
    }
    let values = (0..count)
        .map(|k| f32::from_le_bytes(word(count + k)))
        .collect();
    Ok((indices, values))
}
