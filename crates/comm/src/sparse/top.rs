//! The ⊤ operator of paper 002 (gTop-k): the k entries of largest magnitude of a
//! sparse vector, and of the sum of two.

use super::{merge_sum_into, SparseVec};

/// Keeps the k entries of largest |value| (ties: the smaller index), indices still
/// ascending. O(n): the k-th largest magnitude is found by selection, then one pass in
/// index order keeps everything above it and the first ties, which are the smallest
/// indices. (A full sort by magnitude was the bulk of gTopKAllReduce's time at k = 16 K.)
/// The kept entries go to a new vector that replaces `v`'s; [`top_merge_into`] is the
/// form that reuses buffers. Panics if `v` has fewer values than indices, as
/// [`merge_sum_into`] does ([`SparseVec::check`] catches that).
pub fn truncate_top(v: &mut SparseVec, k: usize) {
    if v.len() <= k {
        return;
    }
    let mut out = SparseVec::default();
    top_into(v, k, &mut Vec::new(), &mut out);
    *v = out;
}

/// The buffers [`top_merge_into`] reuses from call to call: the sum before the cut and
/// the magnitudes the selection permutes. gTopKAllReduce makes a ⊤ merge of 2k entries
/// per tree level; fresh buffers cost a first touch of each page every time.
#[derive(Debug, Default)]
pub struct TopMergeScratch {
    merged: SparseVec,
    mags: Vec<u32>,
}

/// a ⊤ b: sum by index, keep the k largest |value| (ties: the smaller index), ascending.
pub fn top_merge(a: &SparseVec, b: &SparseVec, k: usize) -> SparseVec {
    let mut out = SparseVec::default();
    top_merge_into(a, b, k, &mut TopMergeScratch::default(), &mut out);
    out
}

/// [`top_merge`] into `out`, with buffers kept in `scratch`.
pub fn top_merge_into(
    a: &SparseVec,
    b: &SparseVec,
    k: usize,
    scratch: &mut TopMergeScratch,
    out: &mut SparseVec,
) {
    merge_sum_into(a, b, &mut scratch.merged);
    top_into(&scratch.merged, k, &mut scratch.mags, out);
}

/// `v`'s k entries of largest |value| (see [`truncate_top`]) written into `out`;
/// `mags` is scratch.
pub(crate) fn top_into(v: &SparseVec, k: usize, mags: &mut Vec<u32>, out: &mut SparseVec) {
    let n = v.len();
    out.indices.clear();
    out.values.clear();
    if n <= k {
        out.indices.extend_from_slice(&v.indices);
        out.values.extend_from_slice(&v.values);
        return;
    }
    if k == 0 {
        return;
    }
    // A float's bits with the sign cleared order as |value| does (NaN above infinity, as
    // `f32::total_cmp` has it), so selection and the passes below compare integers.
    let mag = |x: f32| x.to_bits() & 0x7fff_ffff;
    let (thr, above, equal) = kth_largest_magnitude(&v.values, k, mags);
    let mut ties = k - above;
    // One slot more than kept: every entry is written at the cursor, which moves on only
    // for a kept one (about half the entries, at random in gTopKAllReduce, where a branch
    // would mispredict), so a dropped entry after the k-th lands in slot k.
    out.indices.resize(k + 1, 0);
    out.values.resize(k + 1, 0.0);
    let (oi, ov) = (&mut out.indices[..], &mut out.values[..]);
    let mut w = 0;
    if equal == ties {
        // Every entry at the threshold is kept (the usual case: no tie across it), so
        // an entry is kept by its magnitude alone, with no count of ties carried from
        // one to the next: exactly k are, so the cursor never passes slot k.
        for (&i, &x) in v.indices.iter().zip(&v.values) {
            oi[w] = i;
            ov[w] = x;
            w += (mag(x) >= thr) as usize;
        }
    } else {
        for (&i, &x) in v.indices.iter().zip(&v.values) {
            let m = mag(x);
            let tie = m == thr && ties > 0;
            ties -= tie as usize;
            oi[w] = i;
            ov[w] = x;
            w = (w + (m > thr || tie) as usize).min(k);
        }
    }
    out.indices.truncate(k);
    out.values.truncate(k);
}

/// The k-th largest of `values`' magnitudes as bits (`mag` in [`top_into`]), how many
/// are strictly above it and how many equal it; 0 < k ≤ values.len(). A radix select: one pass counts
/// the magnitudes by their top 12 bits (sign cleared: the exponent and 4 bits of
/// mantissa), the counts name the bucket that holds the k-th, a second pass gathers that
/// bucket's magnitudes into `scratch`, and a selection among those alone finds it.
/// Against a selection over all of them (`select_nth_unstable`, whose data-dependent
/// branches mispredict), the threshold of gTopKAllReduce's 2 × 16,777 merged entries
/// took 45 µs instead of 64-69 µs on the 2-core build machine. Many equal magnitudes
/// only make the bucket larger, never the answer wrong. The count of those equal to the
/// k-th lets [`top_into`] keep entries by magnitude alone where no tie straddles the
/// cut: the whole cut then took 77-82 µs against 133-182 µs (best of 300, beside a CI
/// run).
pub(super) fn kth_largest_magnitude(
    values: &[f32],
    k: usize,
    scratch: &mut Vec<u32>,
) -> (u32, usize, usize) {
    const SHIFT: u32 = 31 - 12;
    let mag = |x: f32| x.to_bits() & 0x7fff_ffff;
    let mut hist = [0u32; 1 << 12];
    for &x in values {
        hist[(mag(x) >> SHIFT) as usize] += 1;
    }
    // From the top: the bucket where the count reaches k, and how many lie above it.
    let (mut bucket, mut above) = (hist.len() - 1, 0usize);
    while above + (hist[bucket] as usize) < k {
        above += hist[bucket] as usize;
        bucket -= 1;
    }
    scratch.clear();
    scratch.extend(
        values
            .iter()
            .map(|&x| mag(x))
            .filter(|&m| (m >> SHIFT) as usize == bucket),
    );
    let need = k - above; // 1 ≤ need ≤ this bucket's count
    let n = scratch.len();
    let thr = *scratch.select_nth_unstable(n - need).1;
    above += scratch[n - need..].iter().filter(|&&m| m > thr).count();
    // Every magnitude equal to it is in this bucket.
    let equal = scratch.iter().filter(|&&m| m == thr).count();
    (thr, above, equal)
}
