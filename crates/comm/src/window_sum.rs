//! The sum of many sorted sparse vectors (TopKAllReduce's reduction) through a small
//! dense window: the index space is walked in windows of [`WINDOW`] indices; every part's
//! entries in the window (a run of each part, since parts are sorted) are added, in part
//! order, into a window-sized accumulator that stays in cache, and the window's touched
//! indices, marked in a two-level bitmap, are read out in ascending order. O(P k) work
//! with no sort and no data-dependent comparison per entry: one load, one add and two ORs.
//!
//! The result equals the left fold `((p0 + p1) + p2) + …` of
//! [`crate::merge_sum_into`] bit for bit: each index lies in one window, its values are
//! added in part order, and the accumulator starts at −0.0, the additive identity of
//! IEEE arithmetic (−0.0 + x is x for every x, +0.0 and −0.0 included), so the first
//! value is taken as it is. (A NaN stays a NaN; its payload bits are the hardware's: a
//! signalling NaN comes out quiet, where the fold copies a lone one as it is. Arithmetic
//! never makes a signalling NaN, and the crate promises no NaN's bits.)
//!
//! Each window costs a look at every part besides its entries, so where the parts'
//! indices are spread so thinly that few entries share a window, the radix sort is
//! faster (32 × 16,384 entries one to a window: 77.6 ms against 27.0, in a reviewer's
//! scratch benchmark of this code, not a command of this repository): see
//! [`worthwhile`].

use crate::sparse::{Entries, SparseVec};

/// Indices per window: the accumulator (4 bytes an index, 32 KiB) fits a core's L1 data
/// cache, and the bitmap that marks touched indices is 128 words, summarised by 2.
const WINDOW_BITS: u32 = 13;
const WINDOW: usize = 1 << WINDOW_BITS;
const WORDS: usize = WINDOW / 64;
const SUMMARY: usize = WORDS.div_ceil(64);

/// What the windowed sum keeps between calls (an accumulator and bitmaps, left as they
/// must start: −0.0 and zeros) and the parts' cursors.
#[derive(Debug)]
pub(crate) struct WindowScratch {
    acc: Box<[f32; WINDOW]>,
    marks: Box<[u64; WORDS]>,
    summary: [u64; SUMMARY],
    cursors: Vec<usize>,
}

impl Default for WindowScratch {
    fn default() -> Self {
        WindowScratch {
            acc: Box::new([-0.0; WINDOW]),
            marks: Box::new([0; WORDS]),
            summary: [0; SUMMARY],
            cursors: Vec::new(),
        }
    }
}

/// One part's entries from position `from` whose index lies in the window starting at
/// `base`, added into `acc` and marked; returns the position of the first entry past the
/// window. The loop's only branch is the window's end, taken once per part and window.
#[inline(always)]
pub(crate) fn add_run<I: Copy, V: Copy>(
    indices: &[I],
    values: &[V],
    from: usize,
    base: u32,
    w: &mut WindowScratch,
    index: impl Fn(I) -> u32,
    value: impl Fn(V) -> f32,
) -> usize {
    let n = indices.len().min(values.len());
    let mut c = from;
    while c < n {
        // Every part's next index is at least `base` (the window starts at the lowest).
        let o = index(indices[c]).wrapping_sub(base) as usize;
        if o >= WINDOW {
            break;
        }
        w.acc[o] += value(values[c]);
        w.marks[o / 64] |= 1 << (o % 64);
        w.summary[o / 4096] |= 1 << ((o / 64) % 64);
        c += 1;
    }
    c
}

/// Whether the windowed sum suits `parts` (each with strictly ascending indices): when
/// the windows their indices span hold, on average, at least two entries per part, so
/// that a window's look at every part is paid for by its entries. TopKAllReduce at
/// density 0.001 of 16 M values has about 8 entries per part in a window.
pub(crate) fn worthwhile<E: Entries>(parts: &[E]) -> bool {
    let total: usize = parts.iter().map(Entries::count).sum();
    let ends = |p: &E| Some((p.index_at(0)?, p.index_at(p.count().checked_sub(1)?)?));
    let (lo, hi) = parts
        .iter()
        .filter_map(ends)
        .fold((u32::MAX, 0), |(lo, hi), (a, b)| (lo.min(a), hi.max(b)));
    if lo > hi {
        return true; // no entries: nothing to do either way
    }
    // The windows visited: those spanned, and at most one per entry.
    let windows = ((((hi - lo) >> WINDOW_BITS) as usize) + 1).min(total);
    total >= 2 * parts.len() * windows
}

/// The sum of `parts`, each with strictly ascending indices (the caller checks), in
/// `w`'s buffers; see the module comment.
pub(crate) fn window_sum<E: Entries>(parts: &[E], w: &mut WindowScratch) -> SparseVec {
    let total: usize = parts.iter().map(Entries::count).sum();
    // Sized to every entry (the union is at most that), written by position and cut to
    // the union at the end: a push per entry, its length and capacity reloaded after
    // each store, was the larger part of the read-out.
    let mut out = SparseVec {
        indices: vec![0; total],
        values: vec![0.0; total],
    };
    let mut n = 0;
    w.cursors.clear();
    w.cursors.resize(parts.len(), 0);
    // Window by window, each holding the lowest index not yet added.
    while let Some(lowest) = parts
        .iter()
        .zip(&w.cursors)
        .filter_map(|(p, &c)| p.index_at(c))
        .min()
    {
        let base = lowest & !(WINDOW as u32 - 1);
        for (p, part) in parts.iter().enumerate() {
            let from = w.cursors[p];
            w.cursors[p] = part.add_window(from, base, w);
        }
        n = drain(base, w, &mut out.indices, &mut out.values, n);
    }
    out.indices.truncate(n);
    out.values.truncate(n);
    out
}

/// Writes the window's touched indices, ascending, with their sums into `indices` and
/// `values` from position `n`, puts the accumulator and bitmaps back as they start, and
/// returns the position after the last written.
fn drain(
    base: u32,
    w: &mut WindowScratch,
    indices: &mut [u32],
    values: &mut [f32],
    mut n: usize,
) -> usize {
    for s in 0..SUMMARY {
        let mut words = std::mem::take(&mut w.summary[s]);
        while words != 0 {
            let word = s * 64 + words.trailing_zeros() as usize;
            words &= words - 1;
            let mut bits = std::mem::take(&mut w.marks[word]);
            while bits != 0 {
                let o = word * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                indices[n] = base + o as u32;
                values[n] = std::mem::replace(&mut w.acc[o], -0.0);
                n += 1;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::{window_sum, worthwhile, WindowScratch, WINDOW};
    use crate::sparse::{fold_sorted, SparseVec};
    use std::borrow::Cow;

    /// The reference: the left fold of two-way merges.
    fn fold(parts: &[SparseVec]) -> SparseVec {
        fold_sorted(parts.iter().map(Cow::Borrowed).collect())
    }

    fn bits(v: &SparseVec) -> Vec<u32> {
        v.values.iter().map(|x| x.to_bits()).collect()
    }

    /// Signed zeros in every order, an index at u32::MAX (the last window, whose end
    /// is past u32), indices on window edges, and a scratch reused across calls.
    #[test]
    fn signed_zeros_window_edges_and_the_last_index_sum_as_the_fold() {
        let w = WINDOW as u32;
        let edges = [0, 1, w - 1, w, w + 1, 5 * w - 1, u32::MAX - 1, u32::MAX];
        let values = [0.0f32, -0.0, 1.5, -1.5, f32::MIN_POSITIVE, 3.0e38];
        let mut scratch = WindowScratch::default();
        for shift in 0..values.len() {
            let parts: Vec<SparseVec> = (0..4)
                .map(|p| SparseVec {
                    indices: edges.iter().copied().skip(p % 3).collect(),
                    values: (0..edges.len() - p % 3)
                        .map(|j| values[(j + p + shift) % values.len()])
                        .collect(),
                })
                .collect();
            let (sum, want) = (window_sum(&parts, &mut scratch), fold(&parts));
            assert_eq!(sum.indices, want.indices, "shift {shift}");
            assert_eq!(bits(&sum), bits(&want), "shift {shift}");
        }
        // A lone −0.0 stays −0.0; empty parts and no parts give nothing.
        let lone = [SparseVec {
            indices: vec![7],
            values: vec![-0.0],
        }];
        assert_eq!(
            window_sum(&lone, &mut scratch).values[0].to_bits(),
            (-0.0f32).to_bits()
        );
        let empty = [SparseVec::default(), SparseVec::default()];
        assert!(window_sum(&empty, &mut scratch).is_empty());
        assert!(window_sum::<SparseVec>(&[], &mut scratch).is_empty());
    }

    /// Parts spread one entry to a window go to the radix sort; TopKAllReduce's (8 × 16,777
    /// entries over 16 M indices) and parts within one window stay windowed.
    #[test]
    fn thinly_spread_parts_are_not_worth_windowing() {
        let part = |n: u32, step: u32, off: u32| SparseVec {
            indices: (0..n).map(|j| j * step + off).collect(),
            values: vec![1.0; n as usize],
        };
        let w = WINDOW as u32;
        let spread: Vec<SparseVec> = (0..32).map(|p| part(1000, 32 * w, p * w)).collect();
        assert!(!worthwhile(&spread));
        let topk: Vec<SparseVec> = (0..8).map(|p| part(16_777, 1000, p)).collect();
        assert!(worthwhile(&topk));
        let narrow: Vec<SparseVec> = (0..8).map(|p| part(10, 2, p)).collect();
        assert!(worthwhile(&narrow));
        assert!(worthwhile(&[SparseVec::default(), SparseVec::default()]));
    }
}
