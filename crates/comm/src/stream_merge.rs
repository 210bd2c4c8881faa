//! gTopKAllReduce's sum by index made while a child's message is still arriving.
//!
//! Up the tree, rank 0 receives ⌈log₂P⌉ messages one after another, and each ⊤ merge
//! (sum by index, then keep the k largest) lay between a receive and the next, on the
//! collective's critical path: with 8 workers at 64 MiB (k = 16,777), 0.24 ms a level on
//! the device machine, while gTopK ran 1.15-1.33× its α-β model (RESULTS.md, "On the
//! core-per-host machine with the sum on arrival"). The sum needs no more than the
//! entries in index order, which is the order they come in, so it is made as the bytes
//! arrive and only the cut to k is left once the last one is in.
//!
//! The wire form ([`crate::SparseVec::encode`]: count, indices, values) sends every
//! index before any value, so the merge runs in two passes over the stream: as indices
//! arrive, the merged index list is built (with this rank's values, and for each of the
//! child's entries the place its value goes and whether it adds to one of ours); as
//! values arrive, each goes to its place. The result equals
//! [`crate::merge_sum_into`]`(ours, theirs)` bit for bit (ours + theirs where both have
//! an index, as there; a NaN aside: Rust leaves the bits of a NaN that arithmetic makes
//! unspecified, and the compiler may swap an addition's operands, so a NaN is only a
//! NaN). The message is checked as it comes, with what
//! [`crate::SparseVec::decode`] checks: a count that the length matches, indices
//! strictly ascending; nothing is allocated from the count alone.

use crate::sparse::{arrived_parts, length_error, word, SparseVec, NOT_ASCENDING, SHORT_OF_COUNT};

/// Marks a place whose value adds the child's to ours: the high bit of a place, free
/// since every place is below ours' length plus the child's count, which
/// `merge_indices` holds under 2³¹.
const BOTH: u32 = 1 << 31;

/// One merge in progress; the buffers are kept between merges.
#[derive(Debug, Default)]
pub(crate) struct StreamMerge {
    /// The merged entries so far: indices in order, values ours or, at the child's
    /// places, ours or nothing until the child's value comes.
    merged: SparseVec,
    /// For each of the child's entries merged so far, where its value goes (`| BOTH`
    /// where it adds to ours).
    place: Vec<u32>,
    /// The child's entry count, once its 4 bytes are in.
    count: Option<usize>,
    /// Next of ours to merge.
    ours_next: usize,
    /// The child's values placed so far.
    values_done: usize,
    /// The first thing found wrong with the message.
    error: Option<String>,
}

impl StreamMerge {
    /// Starts merging a new message into `ours`.
    pub(crate) fn begin(&mut self) {
        self.merged.indices.clear();
        self.merged.values.clear();
        self.place.clear();
        self.count = None;
        self.ours_next = 0;
        self.values_done = 0;
        self.error = None;
    }

    /// Takes in `prefix`, the message's bytes received so far (each call a longer
    /// prefix of the same message), merging with `ours` (the same on every call) what is
    /// new in it.
    pub(crate) fn feed(&mut self, ours: &SparseVec, prefix: &[u8]) {
        if self.error.is_some() {
            return;
        }
        // Bytes past what the count allows are found at `finish` (the length check).
        let Some((n, indices, values)) = arrived_parts(prefix, &mut self.count) else {
            return;
        };
        if indices.len() / 4 < self.place.len() {
            // A shorter prefix than one fed before: not how a receive calls, nothing new.
            return;
        }
        // New indices, or (all in) ours not merged yet: with an empty message, all of it.
        let tail = self.place.len() == n && self.ours_next < ours.indices.len();
        if self.place.len() < indices.len() / 4 || tail {
            self.merge_indices(ours, indices, n);
            if self.error.is_some() {
                return;
            }
        }
        if self.values_done < values.len() / 4 {
            self.place_values(values);
        }
    }

    /// The merge of indices `place.len()..` of `indices` (the child's indices received),
    /// and once all `n` are in, of the rest of ours.
    fn merge_indices(&mut self, ours: &SparseVec, indices: &[u8], n: usize) {
        let (oi, ov) = (&ours.indices[..], &ours.values[..ours.indices.len()]);
        if oi.len().saturating_add(n) >= BOTH as usize {
            self.error = Some(format!(
                "sparse payload of {n} entries is too long to merge"
            ));
            return;
        }
        let mut a = self.ours_next;
        let mut prev = match self.place.len() {
            0 => None,
            j => Some(word(indices, j - 1)),
        };
        for j in self.place.len()..indices.len() / 4 {
            let y = word(indices, j);
            if prev.is_some_and(|p| p >= y) {
                self.error = Some(NOT_ASCENDING.into());
                return;
            }
            prev = Some(y);
            // Ours below the child's index first (a scan: the two sides are about as
            // dense, so a few entries at a time); then the child's, on ours or alone.
            let from = a;
            while oi.get(a).is_some_and(|&x| x < y) {
                a += 1;
            }
            self.merged.indices.extend_from_slice(&oi[from..a]);
            self.merged.values.extend_from_slice(&ov[from..a]);
            let at = self.merged.indices.len() as u32;
            if oi.get(a) == Some(&y) {
                self.merged.indices.push(y);
                self.merged.values.push(ov[a]);
                self.place.push(at | BOTH);
                a += 1;
            } else {
                self.merged.indices.push(y);
                self.merged.values.push(0.0);
                self.place.push(at);
            }
        }
        if self.place.len() == n {
            self.merged.indices.extend_from_slice(&oi[a..]);
            self.merged.values.extend_from_slice(&ov[a..]);
            a = oi.len();
        }
        self.ours_next = a;
    }

    /// Puts values `values_done..` of `values` (the child's values received) in place.
    fn place_values(&mut self, values: &[u8]) {
        let v = &mut self.merged.values;
        for j in self.values_done..values.len() / 4 {
            let x = f32::from_bits(word(values, j));
            let p = self.place[j];
            let at = (p & !BOTH) as usize;
            // ours + theirs where both have the index, as merge_sum_into adds.
            v[at] = if p & BOTH != 0 { v[at] + x } else { x };
        }
        self.values_done = values.len() / 4;
    }

    /// The sum, once `payload` is the whole message (fed or not): an error if the
    /// message is malformed (a length its count does not match, indices not strictly
    /// ascending).
    pub(crate) fn finish(
        &mut self,
        ours: &SparseVec,
        payload: &[u8],
    ) -> Result<&SparseVec, String> {
        self.feed(ours, payload);
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let n = self.count.ok_or(SHORT_OF_COUNT)?;
        length_error(payload.len(), n).map_or(Ok(&self.merged), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::{merge_sum_into, random_vector};

    /// Signed zeros and infinities among normal values.
    fn sample(r: &mut tensor::Rng, n: usize, range: usize) -> SparseVec {
        let special = [0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY];
        random_vector(r, n, range, &special, 10)
    }

    /// Fed in pieces of every size from a byte to the whole, the merge equals
    /// merge_sum_into bit for bit, with buffers reused across merges of different sizes
    /// (overlapping, disjoint and empty sides).
    #[test]
    fn fed_in_any_pieces_it_equals_merge_sum_into() {
        let mut r = tensor::Rng::new(5);
        let mut m = StreamMerge::default();
        for (n_ours, n_theirs, range) in [
            (300, 200, 600),
            (0, 50, 100),
            (40, 0, 100),
            (0, 0, 10),
            (1000, 1000, 1_000_000),
            (7, 300, 310),
        ] {
            let (ours, theirs) = (
                sample(&mut r, n_ours, range),
                sample(&mut r, n_theirs, range),
            );
            let mut want = SparseVec::default();
            merge_sum_into(&ours, &theirs, &mut want);
            let wire = theirs.encode();
            for piece in [1, 3, 4, 5, 8, 64, 1000, wire.len()] {
                m.begin();
                let mut end = 0;
                while end < wire.len() {
                    end = (end + piece + r.below(3)).min(wire.len());
                    m.feed(&ours, &wire[..end]);
                    // The same prefix again, and a shorter one: nothing new.
                    m.feed(&ours, &wire[..end]);
                    m.feed(&ours, &wire[..end / 2]);
                }
                let got = m.finish(&ours, &wire).expect("a well-formed message");
                assert_eq!(
                    got.indices, want.indices,
                    "{n_ours} / {n_theirs}, pieces {piece}"
                );
                // inf + -inf makes a NaN, whose bits are not specified: a NaN is a NaN.
                let bits = |v: &SparseVec| {
                    let bits = |x: &f32| if x.is_nan() { u32::MAX } else { x.to_bits() };
                    v.values.iter().map(bits).collect::<Vec<_>>()
                };
                assert_eq!(
                    bits(got),
                    bits(&want),
                    "{n_ours} / {n_theirs}, pieces {piece}"
                );
            }
            // Not fed at all: finish takes the whole message.
            m.begin();
            assert_eq!(
                m.finish(&ours, &wire).map(|v| v.indices.clone()),
                Ok(want.indices)
            );
        }
    }

    /// What SparseVec::decode refuses, this refuses, fed or not; random bytes of every
    /// small length give an error or a sum, never a panic.
    #[test]
    fn malformed_messages_are_errors_never_panics() {
        let ours = SparseVec::new(vec![(1, 1.0), (5, 2.0), (9, 3.0)]);
        let good = SparseVec::new(vec![(2, 1.0), (5, 1.0), (7, 1.0)]).encode();
        let mut m = StreamMerge::default();
        let mut check = |bytes: &[u8], fed: bool| {
            m.begin();
            if fed {
                for end in 0..=bytes.len() {
                    m.feed(&ours, &bytes[..end]);
                }
            }
            let ours_result = m.finish(&ours, bytes).map(|_| ());
            assert_eq!(
                ours_result.is_ok(),
                SparseVec::decode(bytes).is_ok(),
                "{bytes:?}, fed {fed}: {ours_result:?}"
            );
        };
        for fed in [false, true] {
            for cut in 0..good.len() {
                check(&good[..cut], fed);
            }
            let mut long = good.clone();
            long.push(0);
            check(&long, fed);
            // Descending and repeated indices.
            let mut bad = good.clone();
            bad[8..12].copy_from_slice(&2u32.to_le_bytes());
            check(&bad, fed);
            bad[8..12].copy_from_slice(&1u32.to_le_bytes());
            check(&bad, fed);
            // A count far beyond what came.
            let mut huge = good.clone();
            huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
            check(&huge, fed);
        }
        let mut r = tensor::Rng::new(9);
        for len in 0..200 {
            let g: Vec<u8> = (0..len).map(|_| r.below(256) as u8).collect();
            m.begin();
            m.feed(&ours, &g[..len / 2]);
            let _ = m.finish(&ours, &g);
        }
    }
}
