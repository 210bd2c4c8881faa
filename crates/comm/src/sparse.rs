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
        let word = |w: &[u8]| [w[0], w[1], w[2], w[3]];
        let (ib, vb) = b[4..].split_at(4 * n);
        let indices: Vec<u32> = ib
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes(word(w)))
            .collect();
        if indices.windows(2).any(|w| w[0] >= w[1]) {
            return Err("sparse indices are not strictly ascending".into());
        }
        let values = vb
            .chunks_exact(4)
            .map(|w| f32::from_le_bytes(word(w)))
            .collect();
        Ok(SparseVec { indices, values })
    }
}

/// a + b: the union of the indices, values summed where both have one (a's value first,
/// so a left fold over ranks sums each index in rank order on every rank). Written into
/// `out`, whose buffers are reused.
pub fn merge_sum_into(a: &SparseVec, b: &SparseVec, out: &mut SparseVec) {
    let (ai, av, bi, bv) = (&a.indices, &a.values, &b.indices, &b.values);
    // Sized up front and written by position, choosing the side by selects rather than
    // branches (which side comes next is random).
    let cap = ai.len() + bi.len();
    out.indices.clear();
    out.values.clear();
    out.indices.resize(cap, 0);
    out.values.resize(cap, 0.0);
    let (mut i, mut j, mut w) = (0, 0, 0);
    while i < ai.len() && j < bi.len() {
        let (x, y) = (ai[i], bi[j]);
        let (ta, tb) = (x <= y, y <= x);
        let (va, vb) = (av[i], bv[j]);
        out.indices[w] = if ta { x } else { y };
        out.values[w] = if ta && tb {
            va + vb
        } else if ta {
            va
        } else {
            vb
        };
        i += ta as usize;
        j += tb as usize;
        w += 1;
    }
    for (src_i, src_v) in [(&ai[i..], &av[i..]), (&bi[j..], &bv[j..])] {
        out.indices[w..w + src_i.len()].copy_from_slice(src_i);
        out.values[w..w + src_v.len()].copy_from_slice(src_v);
        w += src_i.len();
    }
    out.indices.truncate(w);
    out.values.truncate(w);
}

/// The sum of many sparse vectors (TopKAllReduce's reduction), equal bit for bit to the
/// left fold `((p0 + p1) + p2) + …` of [`merge_sum_into`]: the parts are concatenated in
/// order and stably radix-sorted by index, so each index's values are added in part
/// order. A fold costs O(P² k) merge steps, each a data-dependent comparison; the sort is
/// O(P k) per 12-bit digit of the largest index (two passes for 16 M values).
pub fn sum_all(parts: &[SparseVec]) -> SparseVec {
    // 12-bit digits: two passes for the 24-bit indices of a 16 M-value gradient. Measured
    // (sparse_merge_bench, 32 × 16,777 pairs): 4.0-4.4 ms against 6.3-6.9 ms with 8-bit
    // digits (three passes); at 8 ranks the two are within the run-to-run noise.
    const BITS: u32 = 12;
    let total: usize = parts.iter().map(SparseVec::len).sum();
    // Index and value packed in one word (index in the high half), so a pass moves one
    // array, not two.
    let mut keys: Vec<u64> = Vec::with_capacity(total);
    for p in parts {
        keys.extend(
            p.indices
                .iter()
                .zip(&p.values)
                .map(|(&i, v)| (u64::from(i) << 32) | u64::from(v.to_bits())),
        );
    }
    if !keys.is_empty() {
        // Over every index, not each part's last: the fields are public, so a part need
        // not be sorted, and the sort below does not need it to be (even for one part).
        let max = parts
            .iter()
            .flat_map(|p| p.indices.iter().copied())
            .max()
            .unwrap_or(0);
        let passes = (32 - max.leading_zeros()).div_ceil(BITS);
        let mut tmp = vec![0u64; total];
        for pass in 0..passes {
            let shift = 32 + pass * BITS;
            let digit = |x: u64| ((x >> shift) & ((1 << BITS) - 1)) as usize;
            let mut start = [0usize; 1 << BITS];
            for &x in &keys {
                start[digit(x)] += 1;
            }
            let mut sum = 0;
            for c in start.iter_mut() {
                (*c, sum) = (sum, sum + *c);
            }
            for &x in &keys {
                let d = &mut start[digit(x)];
                tmp[*d] = x;
                *d += 1;
            }
            std::mem::swap(&mut keys, &mut tmp);
        }
    }
    // Runs of one index become one entry, summed left to right.
    let mut out = SparseVec {
        indices: Vec::with_capacity(total),
        values: Vec::with_capacity(total),
    };
    for &x in &keys {
        let (i, v) = ((x >> 32) as u32, f32::from_bits(x as u32));
        match out.indices.last() {
            Some(&last) if last == i => {
                if let Some(s) = out.values.last_mut() {
                    *s += v;
                }
            }
            _ => {
                out.indices.push(i);
                out.values.push(v);
            }
        }
    }
    out
}

/// Keeps the k entries of largest |value| (ties: the smaller index), indices still
/// ascending. O(n): the k-th largest magnitude is found by selection, then one pass in
/// index order keeps everything above it and the first ties, which are the smallest
/// indices. (A full sort by magnitude was the bulk of gTopKAllReduce's time at k = 16 K.)
pub fn truncate_top(v: &mut SparseVec, k: usize) {
    use std::cmp::Ordering::{Equal, Greater};
    if v.len() <= k {
        return;
    }
    if k == 0 {
        v.indices.clear();
        v.values.clear();
        return;
    }
    let mut mags: Vec<f32> = v.values.iter().map(|x| x.abs()).collect();
    let (_, kth, _) = mags.select_nth_unstable_by(k - 1, |x, y| y.total_cmp(x));
    let thr = *kth;
    let above = v
        .values
        .iter()
        .filter(|x| x.abs().total_cmp(&thr) == Greater)
        .count();
    let mut ties = k - above;
    let mut w = 0;
    for r in 0..v.len() {
        let keep = match v.values[r].abs().total_cmp(&thr) {
            Greater => true,
            Equal if ties > 0 => {
                ties -= 1;
                true
            }
            _ => false,
        };
        if keep {
            v.indices[w] = v.indices[r];
            v.values[w] = v.values[r];
            w += 1;
        }
    }
    v.indices.truncate(w);
    v.values.truncate(w);
}

/// a ⊤ b: sum by index, keep the k largest |value| (ties: the smaller index), ascending.
pub fn top_merge(a: &SparseVec, b: &SparseVec, k: usize) -> SparseVec {
    let mut out = SparseVec::default();
    merge_sum_into(a, b, &mut out);
    truncate_top(&mut out, k);
    out
}
