//! Sparse vectors for the sparse collectives, and the ⊤ operator of paper 002 (gTop-k):
//! the union of two sparse vectors with values summed per index, truncated to its k
//! entries of largest magnitude.

/// Indices ascending, one value each.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SparseVec {
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

impl SparseVec {
    pub fn new(mut pairs: Vec<(u32, f32)>) -> Self {
        pairs.sort_by_key(|p| p.0);
        // Duplicate indices are summed.
        let mut out = SparseVec::default();
        for (i, v) in pairs {
            if out.indices.last() == Some(&i) {
                if let Some(last) = out.values.last_mut() {
                    *last += v;
                }
            } else {
                out.indices.push(i);
                out.values.push(v);
            }
        }
        out
    }
    pub fn len(&self) -> usize {
        self.indices.len()
    }
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(4 + 8 * self.len());
        b.extend((self.len() as u32).to_le_bytes());
        for i in &self.indices {
            b.extend(i.to_le_bytes());
        }
        for v in &self.values {
            b.extend(v.to_le_bytes());
        }
        b
    }
    pub(crate) fn decode(b: &[u8]) -> Result<Self, String> {
        let n = u32::from_le_bytes(
            b.get(..4)
                .ok_or("sparse payload shorter than its count")?
                .try_into()
                .map_err(|_| "count")?,
        ) as usize;
        if b.len() != 4 + 8 * n {
            return Err(format!(
                "sparse payload of {} bytes cannot hold {n} entries",
                b.len()
            ));
        }
        let word = |k: usize| [b[4 + 4 * k], b[5 + 4 * k], b[6 + 4 * k], b[7 + 4 * k]];
        let indices: Vec<u32> = (0..n).map(|k| u32::from_le_bytes(word(k))).collect();
        if indices.windows(2).any(|w| w[0] >= w[1]) {
            return Err("sparse indices are not strictly ascending".into());
        }
        let values = (0..n).map(|k| f32::from_le_bytes(word(n + k))).collect();
        Ok(SparseVec { indices, values })
    }
}

/// a ⊤ b: sum by index, keep the k largest |value| (ties: the smaller index), ascending.
pub fn top_merge(a: &SparseVec, b: &SparseVec, k: usize) -> SparseVec {
    let (mut i, mut j) = (0, 0);
    let mut merged: Vec<(u32, f32)> = Vec::with_capacity(a.len() + b.len());
    while i < a.len() || j < b.len() {
        let take_a = j >= b.len() || (i < a.len() && a.indices[i] <= b.indices[j]);
        let take_b = i >= a.len() || (j < b.len() && b.indices[j] <= a.indices[i]);
        match (take_a, take_b) {
            (true, true) => {
                merged.push((a.indices[i], a.values[i] + b.values[j]));
                i += 1;
                j += 1;
            }
            (true, false) => {
                merged.push((a.indices[i], a.values[i]));
                i += 1;
            }
            _ => {
                merged.push((b.indices[j], b.values[j]));
                j += 1;
            }
        }
    }
    if merged.len() > k {
        merged.sort_by(|x, y| y.1.abs().total_cmp(&x.1.abs()).then(x.0.cmp(&y.0)));
        merged.truncate(k);
        merged.sort_by_key(|p| p.0);
    }
    SparseVec {
        indices: merged.iter().map(|p| p.0).collect(),
        values: merged.iter().map(|p| p.1).collect(),
    }
}
