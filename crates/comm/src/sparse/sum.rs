//! The sum of many sparse vectors (TopKAllReduce's reduction): the fold, the windowed
//! sum and the radix sort, each equal to the left fold bit for bit.

use super::{merge_sum_into, Entries, SparseBytes, SparseVec};
use crate::window_sum::{window_sum, worthwhile, WindowScratch};

/// The sum of many sparse vectors (TopKAllReduce's reduction), equal bit for bit to the
/// left fold `((p0 + p1) + p2) + …` of [`merge_sum_into`]. A fold costs O(P² k) merge
/// steps, each a data-dependent comparison; this is O(P k). (How: `sum_entries`, in
/// this file.)
pub fn sum_all(parts: &[SparseVec]) -> SparseVec {
    sum_entries(parts)
}

/// The sum of P messages in the wire form of [`SparseVec::encode`], as TopKAllReduce
/// receives them: each is checked, then read in place (no decoded copy), and the result
/// equals `sum_all` of the decoded parts bit for bit. A malformed message is an error
/// naming its position.
pub fn sum_encoded<B: AsRef<[u8]>>(messages: &[B]) -> Result<SparseVec, (usize, String)> {
    sum_encoded_with(
        messages.iter().map(AsRef::as_ref),
        &mut SumScratch::default(),
    )
}

/// [`sum_encoded`] with the sort's arrays kept in `scratch` between calls.
pub(crate) fn sum_encoded_with<'a>(
    messages: impl Iterator<Item = &'a [u8]>,
    scratch: &mut SumScratch,
) -> Result<SparseVec, (usize, String)> {
    let parts = messages
        .enumerate()
        .map(|(i, m)| SparseBytes::parse(m).map_err(|e| (i, e)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(sum_entries_with(&parts, scratch))
}

/// The two arrays [`sum_entries_with`] sorts between, kept by a caller that sums again
/// and again (TopKAllReduce) so that it does not allocate (and fault in) them each time.
#[derive(Debug, Default)]
pub(crate) struct SumScratch {
    keys: Vec<u64>,
    tmp: Vec<u64>,
    window: WindowScratch,
}

/// The sum behind [`sum_all`], in one of three forms, each equal to the left fold bit
/// for bit:
/// - up to [`FOLD_MAX_PARTS`] sorted parts: the fold itself, two-way merges
///   ([`fold_sorted`]);
/// - more parts, all sorted (every received message is: `SparseBytes::parse` checks),
///   with entries enough to share windows (`window_sum::worthwhile`): the windowed sum
///   (`window_sum.rs`: each window of 8,192 indices summed in a cache-resident
///   accumulator, part by part, and read out through a bitmap);
/// - otherwise (a `SparseVec` built by hand need not be sorted) the radix sort
///   ([`sum_by_radix`]): the parts' entries packed in part order into one array of words
///   (index in the high half, the value's bits in the low half, so a pass moves one
///   array, not two), stably LSD-radix-sorted by index with 12-bit digits (two passes
///   for the 24-bit indices of a 16 M-value gradient), and each run of one index added
///   left to right.
///
/// The windowed sum replaced the radix sort for sorted parts: sparse_merge_bench on a
/// 2-core Xeon, the two builds alternated, the in-place sum of 8 × 16,777 entries
/// 0.96-1.48 ms against 1.71-1.86, 32 × 16,777 4.7-5.6 against 8.2-8.5 (RESULTS.md,
/// "TopKAllReduce's sum in a window"). Tried and dropped earlier, each against the radix sort: scattering by the
/// high bits into L1-sized buckets then insertion-sorting each (a misprediction per
/// entry: 2× slower at 8 × 16,777 entries), and counting every digit's histogram while
/// packing (no faster at 8 parts, 1.1-1.3× slower at 32).
pub(crate) fn sum_entries<E: Entries>(parts: &[E]) -> SparseVec {
    sum_entries_with(parts, &mut SumScratch::default())
}

/// [`sum_entries`], in `scratch`'s buffers.
pub(crate) fn sum_entries_with<E: Entries>(parts: &[E], scratch: &mut SumScratch) -> SparseVec {
    if parts.len() <= FOLD_MAX_PARTS {
        if let Some(sorted) = parts
            .iter()
            .map(Entries::as_sorted)
            .collect::<Option<Vec<_>>>()
        {
            return fold_sorted(sorted);
        }
    }
    if parts.iter().all(Entries::is_sorted) && worthwhile(parts) {
        return window_sum(parts, &mut scratch.window);
    }
    sum_by_radix(parts, scratch)
}

/// Up to this many sorted parts the sum is the left fold itself: one branch-free two-way
/// merge beats the windowed sum at 2 parts (0.16-0.17 against 0.21-0.37 ms for 2 × 16,777
/// entries), not at 4 (0.67-0.70 against 0.46-0.71 ms; sparse_merge_bench on 2 cores,
/// in RESULTS.md).
pub(crate) const FOLD_MAX_PARTS: usize = 2;

/// `((p0 + p1) + p2) + …` by [`merge_sum_into`], for parts with one value per index
/// and strictly ascending indices.
/// The first part starts the sum as it is (copied only if borrowed).
pub(crate) fn fold_sorted(parts: Vec<std::borrow::Cow<'_, SparseVec>>) -> SparseVec {
    let mut parts = parts.into_iter();
    let Some(first) = parts.next() else {
        return SparseVec::default();
    };
    let (mut acc, mut next) = (first.into_owned(), SparseVec::default());
    for p in parts {
        merge_sum_into(&acc, &p, &mut next);
        std::mem::swap(&mut acc, &mut next);
    }
    acc
}

/// The radix sort behind [`sum_entries_with`] (see [`sum_entries`]), in `scratch`'s arrays.
fn sum_by_radix<E: Entries>(parts: &[E], scratch: &mut SumScratch) -> SparseVec {
    const BITS: u32 = 12;
    let total: usize = parts.iter().map(Entries::count).sum();
    let SumScratch { keys, tmp, .. } = scratch;
    keys.clear();
    keys.reserve(total);
    // Over every index, not each part's last: a SparseVec part need not be sorted.
    let max = parts.iter().map(|p| p.pack_into(keys)).max().unwrap_or(0);
    let passes = (32 - max.leading_zeros()).div_ceil(BITS);
    // Every slot is written by each pass before it is read: the zeros are only there to
    // size it (and a kept array is only extended, not cleared).
    tmp.resize(total, 0);
    for pass in 0..passes {
        let shift = 32 + pass * BITS;
        let digit = |x: u64| ((x >> shift) & ((1 << BITS) - 1)) as usize;
        let mut start = [0usize; 1 << BITS];
        for &x in keys.iter() {
            start[digit(x)] += 1;
        }
        let mut sum = 0;
        for c in start.iter_mut() {
            (*c, sum) = (sum, sum + *c);
        }
        for &x in keys.iter() {
            let d = &mut start[digit(x)];
            tmp[*d] = x;
            *d += 1;
        }
        std::mem::swap(keys, tmp);
    }
    collapse_runs(keys)
}

/// Sorted packed entries to a sparse vector, each run of one index summed left to right.
fn collapse_runs(keys: &[u64]) -> SparseVec {
    let mut out = SparseVec {
        indices: Vec::with_capacity(keys.len()),
        values: Vec::with_capacity(keys.len()),
    };
    for &x in keys {
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
