//! Sparse vectors for the sparse collectives: the vector, its wire form read in place,
//! and the sum of two; the sum of many is `sum.rs`, the ⊤ operator of paper 002 (gTop-k:
//! the union of two sparse vectors with values summed per index, truncated to its k
//! entries of largest magnitude) is `top.rs`.

use crate::window_sum::{add_run, WindowScratch};

mod sum;
mod top;

#[cfg(test)]
pub(crate) use sum::{fold_sorted, sum_entries};
pub use sum::{sum_all, sum_encoded};
pub(crate) use sum::{sum_encoded_with, SumScratch};
#[cfg(test)]
use top::kth_largest_magnitude;
pub(crate) use top::top_into;
pub use top::{top_merge, top_merge_into, truncate_top, TopMergeScratch};

use std::hint::select_unpredictable;

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
    /// Checks the invariants the collectives and the wire form rely on (the fields are
    /// public, so a vector built by hand can break them): one value per index, indices
    /// strictly ascending. (A vector has no dense length here to check indices against.)
    pub fn check(&self) -> Result<(), String> {
        if self.values.len() != self.indices.len() {
            return Err(format!(
                "{} indices but {} values",
                self.indices.len(),
                self.values.len()
            ));
        }
        if let Some(at) = self.indices.windows(2).position(|w| w[0] >= w[1]) {
            return Err(format!(
                "indices not strictly ascending: {} then {} at positions {at} and {} \
                 (SparseVec::new sorts and merges duplicates)",
                self.indices[at],
                self.indices[at + 1],
                at + 1
            ));
        }
        Ok(())
    }
    /// The wire form: entry count (u32), the indices, then the values (little-endian).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        self.encode_into(&mut b);
        b
    }
    /// [`SparseVec::encode`] into `b` (emptied first), whose capacity is reused.
    pub fn encode_into(&self, b: &mut Vec<u8>) {
        b.clear();
        b.reserve(4 + 8 * self.len());
        b.extend((self.len() as u32).to_le_bytes());
        // The wire is little-endian, as this target is (communicator/wire.rs refuses others):
        // the slices' own bytes, copied whole (an element at a time, the encoding of
        // gTopK's 134 kB message took a median of 58 µs in a trace, on its critical path
        // at every tree level; whole, 11 µs).
        b.extend_from_slice(bytemuck::cast_slice(&self.indices));
        b.extend_from_slice(bytemuck::cast_slice(&self.values));
    }
    /// The inverse of [`SparseVec::encode`]; a wrong length or indices that are not
    /// strictly ascending are errors.
    pub fn decode(b: &[u8]) -> Result<Self, String> {
        SparseBytes::parse(b).map(|v| v.to_vec())
    }
}

/// a + b: the union of the indices, values summed where both have one (a's value first,
/// so a left fold over ranks sums each index in rank order on every rank). Written into
/// `out`, whose buffers are reused. Panics if a vector has fewer values than indices
/// ([`SparseVec::check`] catches that).
pub fn merge_sum_into(a: &SparseVec, b: &SparseVec, out: &mut SparseVec) {
    let (ai, bi) = (&a.indices[..], &b.indices[..]);
    // Cut to the indices' lengths, so that one bounds check covers both arrays.
    let (av, bv) = (&a.values[..ai.len()], &b.values[..bi.len()]);
    // Sized up front and written by position.
    let cap = ai.len() + bi.len();
    out.indices.clear();
    out.values.clear();
    out.indices.resize(cap, 0);
    out.values.resize(cap, 0.0);
    let (mut i, mut j, mut w) = (0, 0, 0);
    for (oi, ov) in out.indices.iter_mut().zip(out.values.iter_mut()) {
        let (Some(&x), Some(&y)) = (ai.get(i), bi.get(j)) else {
            break;
        };
        let (ta, tb) = (x <= y, y <= x);
        let (va, vb) = (av[i], bv[j]);
        // Which side comes next is random: selects, not branches, or every other entry
        // is a misprediction (the compiler turned plain `if`s here into jumps).
        *oi = select_unpredictable(ta, x, y);
        // A select of the addresses: LLVM lowers a select of two floats (even of their
        // bits) to a jump on x86.
        let one = *select_unpredictable(ta, &av[i], &bv[j]);
        *ov = select_unpredictable(ta & tb, va + vb, one);
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

/// Read access to one part of a sum: a [`SparseVec`] in memory, or a peer's message as it
/// arrived ([`SparseBytes`]), so that the received parts are summed without first being
/// decoded into vectors of their own.
pub(crate) trait Entries {
    fn count(&self) -> usize;
    /// Appends every entry as `index << 32 | value bits`, in order; returns the largest
    /// index (0 when empty).
    fn pack_into(&self, keys: &mut Vec<u64>) -> u32;
    /// The part as a well-formed vector (one value per index, indices strictly
    /// ascending), borrowed where it is one already; None if it is not.
    fn as_sorted(&self) -> Option<std::borrow::Cow<'_, SparseVec>>;
    /// Whether the part is well-formed (one value per index, indices strictly
    /// ascending), which the windowed sum needs.
    fn is_sorted(&self) -> bool;
    /// Entry `j`'s index, if there is an entry `j`.
    fn index_at(&self, j: usize) -> Option<u32>;
    /// The windowed sum's step for this part (see [`crate::window_sum::add_run`]).
    fn add_window(&self, from: usize, base: u32, w: &mut WindowScratch) -> usize;
}

fn pack(i: u32, v: u32) -> u64 {
    (u64::from(i) << 32) | u64::from(v)
}

impl Entries for SparseVec {
    fn count(&self) -> usize {
        self.indices.len().min(self.values.len())
    }
    fn pack_into(&self, keys: &mut Vec<u64>) -> u32 {
        keys.extend(
            self.indices
                .iter()
                .zip(&self.values)
                .map(|(&i, v)| pack(i, v.to_bits())),
        );
        self.indices.iter().copied().max().unwrap_or(0)
    }
    fn as_sorted(&self) -> Option<std::borrow::Cow<'_, SparseVec>> {
        self.is_sorted().then_some(std::borrow::Cow::Borrowed(self))
    }
    fn is_sorted(&self) -> bool {
        self.check().is_ok()
    }
    fn index_at(&self, j: usize) -> Option<u32> {
        self.indices.get(j).copied()
    }
    fn add_window(&self, from: usize, base: u32, w: &mut WindowScratch) -> usize {
        add_run(&self.indices, &self.values, from, base, w, |i| i, |v| v)
    }
}

/// A sparse vector in its wire form (count, indices, values; little-endian words),
/// checked once (length, strictly ascending indices) and then read in place.
pub(crate) struct SparseBytes<'a> {
    indices: &'a [[u8; 4]],
    values: &'a [[u8; 4]],
}

/// What is wrong with a sparse payload, in the words every reader of the wire form uses
/// (`SparseBytes::parse`, and `stream_merge.rs`, which checks a message as it comes).
pub(crate) const SHORT_OF_COUNT: &str = "sparse payload shorter than its count";
pub(crate) const NOT_ASCENDING: &str = "sparse indices are not strictly ascending";
pub(crate) fn wrong_length(bytes: usize, n: usize) -> String {
    format!("sparse payload of {bytes} bytes cannot hold {n} entries")
}
/// The streamed readers' length check: [`wrong_length`] unless `bytes` is exactly a
/// count and `n` entries.
pub(crate) fn length_error(bytes: usize, n: usize) -> Option<String> {
    (n.checked_mul(8).and_then(|b| b.checked_add(4)) != Some(bytes)).then(|| wrong_length(bytes, n))
}

/// The whole words of a sparse message's first `prefix` bytes, for readers that take it
/// in as it arrives (`stream_merge.rs`, `arrival_last.rs`): the entry count (read once
/// into `count`, then kept), the indices and the values received so far, each at most
/// the count's worth. None until the count's 4 bytes are in. Bytes past what the count
/// allows are left to the reader's length check at the end.
pub(crate) fn arrived_parts<'p>(
    prefix: &'p [u8],
    count: &mut Option<usize>,
) -> Option<(usize, &'p [u8], &'p [u8])> {
    let n = match *count {
        Some(n) => n,
        None => *count.insert(u32::from_le_bytes(*prefix.first_chunk::<4>()?) as usize),
    };
    let body = prefix.get(4..).unwrap_or_default();
    let indices = (body.len() / 4).min(n);
    let values = body.get(n.saturating_mul(4)..).unwrap_or_default();
    let have_values = (values.len() / 4).min(n);
    Some((n, &body[..indices * 4], &values[..have_values * 4]))
}

/// The `j`-th little-endian u32 of `b` (of what [`arrived_parts`] gives).
pub(crate) fn word(b: &[u8], j: usize) -> u32 {
    let w: [u8; 4] = b[4 * j..4 * j + 4].try_into().expect("4 bytes");
    u32::from_le_bytes(w)
}

impl<'a> SparseBytes<'a> {
    pub(crate) fn parse(b: &'a [u8]) -> Result<Self, String> {
        let (count, body) = b.split_first_chunk::<4>().ok_or(SHORT_OF_COUNT)?;
        let n = u32::from_le_bytes(*count) as usize;
        // Words: [u8; 4] chunks, so the loops below carry no bounds checks.
        let (words, rest) = body.as_chunks::<4>();
        if !rest.is_empty() || n.checked_mul(2) != Some(words.len()) {
            return Err(wrong_length(b.len(), n));
        }
        let (indices, values) = words.split_at(n);
        if indices
            .windows(2)
            .any(|w| u32::from_le_bytes(w[0]) >= u32::from_le_bytes(w[1]))
        {
            return Err(NOT_ASCENDING.into());
        }
        Ok(SparseBytes { indices, values })
    }
    pub(crate) fn to_vec(&self) -> SparseVec {
        let mut v = SparseVec::default();
        self.copy_into(&mut v);
        v
    }
    /// The entries into `v`, replacing what it held (its buffers are reused).
    pub(crate) fn copy_into(&self, v: &mut SparseVec) {
        v.indices.clear();
        v.values.clear();
        v.indices.extend(self.indices());
        v.values.extend(self.values());
    }
    pub(crate) fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        self.indices.iter().map(|&w| u32::from_le_bytes(w))
    }
    pub(crate) fn values(&self) -> impl Iterator<Item = f32> + '_ {
        self.values.iter().map(|&w| f32::from_le_bytes(w))
    }
}

impl Entries for SparseBytes<'_> {
    fn count(&self) -> usize {
        self.indices.len()
    }
    fn pack_into(&self, keys: &mut Vec<u64>) -> u32 {
        keys.extend(
            self.indices
                .iter()
                .zip(self.values)
                .map(|(&i, &v)| pack(u32::from_le_bytes(i), u32::from_le_bytes(v))),
        );
        // Strictly ascending (checked by `parse`), so the last index is the largest.
        self.indices.last().map_or(0, |&w| u32::from_le_bytes(w))
    }
    fn as_sorted(&self) -> Option<std::borrow::Cow<'_, SparseVec>> {
        // Checked by `parse`; decoded, since the merge reads whole words.
        Some(std::borrow::Cow::Owned(self.to_vec()))
    }
    fn is_sorted(&self) -> bool {
        true // checked by `parse`
    }
    fn index_at(&self, j: usize) -> Option<u32> {
        self.indices.get(j).map(|&w| u32::from_le_bytes(w))
    }
    fn add_window(&self, from: usize, base: u32, w: &mut WindowScratch) -> usize {
        add_run(
            self.indices,
            self.values,
            from,
            base,
            w,
            u32::from_le_bytes,
            f32::from_le_bytes,
        )
    }
}

/// A random sparse vector for tests: up to `n` entries (repeats dropped) below `range`,
/// about one value in `every` drawn from `special` (0: none), the rest normal.
#[cfg(test)]
pub(crate) fn random_vector(
    r: &mut tensor::Rng,
    n: usize,
    range: usize,
    special: &[f32],
    every: usize,
) -> SparseVec {
    let mut e: Vec<(u32, f32)> = (0..n)
        .map(|_| {
            let pick = match every {
                0 => false,
                1 => true,
                e => r.below(e) == 0,
            };
            let x = if pick {
                special[r.below(special.len())]
            } else {
                r.normal() as f32
            };
            (r.below(range) as u32, x)
        })
        .collect();
    e.sort_by_key(|&(i, _)| i);
    e.dedup_by_key(|&mut (i, _)| i);
    SparseVec::new(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(seed: u64, n: usize) -> SparseVec {
        let mut r = tensor::Rng::new(seed);
        SparseVec::new(
            (0..n)
                .map(|_| (r.below(5000) as u32, r.normal() as f32))
                .collect(),
        )
    }

    #[test]
    fn wire_form_round_trips_and_malformed_messages_are_errors() {
        let v = sample(1, 300);
        let b = v.encode();
        assert_eq!(SparseVec::decode(&b).unwrap(), v);
        assert_eq!(
            SparseVec::decode(&SparseVec::default().encode()).unwrap(),
            SparseVec::default()
        );
        // Every truncation, and one byte too many.
        for cut in 0..b.len() {
            assert!(SparseVec::decode(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(SparseVec::decode(&long).is_err());
        // A count that claims more than arrived (no allocation of that size happens).
        let mut huge = b.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(SparseVec::decode(&huge).is_err());
        // Repeated and descending indices.
        let mut dup = SparseVec {
            indices: vec![3, 3],
            values: vec![1.0, 2.0],
        }
        .encode();
        assert!(SparseVec::decode(&dup).unwrap_err().contains("ascending"));
        dup[4..8].copy_from_slice(&4u32.to_le_bytes());
        assert!(SparseVec::decode(&dup).is_err());
        // Garbage of every small length: an error or a valid vector, never a panic.
        let mut r = tensor::Rng::new(7);
        for len in 0..200 {
            let g: Vec<u8> = (0..len).map(|_| r.below(256) as u8).collect();
            let _ = SparseVec::decode(&g);
        }
    }

    /// The radix select's threshold against a sort, for magnitudes across many of its
    /// buckets (tiny, subnormal, huge, infinite, NaN) and within one (equal exponents),
    /// at every k.
    #[test]
    fn kth_largest_magnitude_matches_a_sort() {
        let mag = |x: f32| x.to_bits() & 0x7fff_ffff;
        let mut r = tensor::Rng::new(3);
        let spread = [1e-40, 1e-30, 3.0e-8, 0.25, 1.0, 1.5, 7.0, 1e20, f32::MAX];
        let mut scratch = Vec::new();
        for case in 0..4 {
            let values: Vec<f32> = (0..300)
                .map(|i| match case {
                    0 => spread[r.below(spread.len())] * if i % 2 == 0 { 1.0 } else { -1.0 },
                    1 => 1.0 + r.below(1000) as f32 / 1000.0, // one exponent: one or two buckets
                    2 => [0.0, -0.0, f32::INFINITY, f32::NAN, 2.0][r.below(5)],
                    _ => (r.below(2001) as f32 - 1000.0) * 1e-3,
                })
                .collect();
            let mut sorted: Vec<u32> = values.iter().map(|&x| mag(x)).collect();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            for k in 1..=values.len() {
                let thr = sorted[k - 1];
                let above = sorted.iter().filter(|&&m| m > thr).count();
                let equal = sorted.iter().filter(|&&m| m == thr).count();
                assert_eq!(
                    kth_largest_magnitude(&values, k, &mut scratch),
                    (thr, above, equal),
                    "case {case}, k {k}"
                );
            }
        }
    }

    /// The ⊤ merge against its definition (sum by index; the k largest |value|, ties to
    /// the smaller index; ascending), with ties forced (values from a small set, signed
    /// zeros, infinities, NaN), k from 0 past the sum's length, one scratch and output
    /// reused across calls that grow and shrink.
    #[test]
    fn top_merge_into_equals_its_definition_with_reused_buffers() {
        let mag = |x: f32| x.to_bits() & 0x7fff_ffff;
        let by_definition = |a: &SparseVec, b: &SparseVec, k: usize| {
            let sum = sum_all(&[a.clone(), b.clone()]);
            let mut e: Vec<(u32, f32)> = sum.indices.iter().copied().zip(sum.values).collect();
            e.sort_by_key(|&(i, x)| (std::cmp::Reverse(mag(x)), i));
            e.truncate(k);
            e.sort_by_key(|&(i, _)| i);
            e
        };
        let set = [
            1.0,
            -1.0,
            2.0,
            0.0,
            -0.0,
            0.5,
            f32::INFINITY,
            f32::NAN,
            -2.0,
        ];
        let mut r = tensor::Rng::new(11);
        let mut part = |n: usize, range: usize, few: bool| {
            let every = if few { 1 } else { 0 };
            random_vector(&mut r, n, range, &set, every)
        };
        let (mut scratch, mut out) = (TopMergeScratch::default(), SparseVec::default());
        for (n, few) in [
            (3000, false),
            (40, true),
            (0, true),
            (2500, true),
            (7, false),
        ] {
            let (a, b) = (part(n, 4 * n + 1, few), part(n / 2, 4 * n + 1, few));
            for k in [0, 1, 2, n / 3, n, 2 * n] {
                top_merge_into(&a, &b, k, &mut scratch, &mut out);
                let want = by_definition(&a, &b, k);
                let got: Vec<(u32, f32)> = out
                    .indices
                    .iter()
                    .copied()
                    .zip(out.values.clone())
                    .collect();
                assert_eq!(got.len(), want.len(), "n {n}, k {k}");
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        g.0 == w.0 && g.1.to_bits() == w.1.to_bits()
                            || g.0 == w.0 && g.1.is_nan() && w.1.is_nan(),
                        "n {n}, k {k}: {g:?} against {w:?}"
                    );
                }
                let mut t = sum_all(&[a.clone(), b.clone()]);
                truncate_top(&mut t, k);
                assert_eq!(t.indices, out.indices, "truncate_top, n {n}, k {k}");
            }
        }
    }

    #[test]
    fn summing_messages_in_place_equals_decoding_them_first() {
        let parts: Vec<SparseVec> = (0..6)
            .map(|p| sample(p + 10, 400 + 50 * p as usize))
            .collect();
        let wire: Vec<Vec<u8>> = parts.iter().map(SparseVec::encode).collect();
        let views: Vec<SparseBytes> = wire
            .iter()
            .map(|b| SparseBytes::parse(b).unwrap())
            .collect();
        let (a, b) = (sum_entries(&views), sum_all(&parts));
        assert_eq!(a.indices, b.indices);
        let bits = |v: &SparseVec| v.values.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b));
    }
}
