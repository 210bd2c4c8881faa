//! TopKAllReduce's sum done while its allgather is still receiving: each rank's block is
//! merged in as soon as its last byte has arrived, so that what is left once the gather
//! ends is one pass over the result (with the last block merged in it), instead of
//! summing all P blocks then. The sum after the gather (then the radix sort of
//! [`crate::sparse`], 1.6-1.9 ms for 8 × 16,777 entries; since the windowed sum,
//! `window_sum.rs`, 1.0-1.5 ms) made the collective 1.2-1.45× its α-β model on a
//! core-per-host 1 Gbit/s network while its gather alone was 0.93-1.16× (RESULTS.md).
//!
//! The result must equal, bit for bit on every rank, the left fold `((p0 + p1) + p2) + …`
//! in rank order (a NaN aside: Rust does not specify the sign and payload of a NaN that
//! arithmetic makes, so a NaN is only a NaN). But the blocks arrive in another order
//! (Bruck's allgather brings rank r those of ranks r, r+1, …, P−1, then 0, …, r−1), and
//! float addition is not associative: no value can be added before every lower rank's
//! value for its index has been. So the blocks are merged without adding anything, into
//! one run sorted by (index, rank): each entry carries its rank in its key, and arrival
//! order does not matter. The last block is merged in and each index's values added in
//! key order, that is in rank order (the left fold, per index), as that block arrives
//! (`arrival_last.rs`, through [`ArrivalSum::add_partial`]), or by
//! [`ArrivalSum::finish`] in one pass when its bytes were not fed.
//!
//! Each block merged costs a pass over the run, O(P² k) in all against the sum after the
//! gather's O(P k) (`sparse_merge_bench`: 2.6-2.7 against the radix sort's 1.6 ms at
//! 8 × 16,777 entries;
//! 0.57-0.59 ms left after the last block). That is hidden behind the wire while a merge
//! (about 5 ns an entry of the run here) is shorter than the next block's transfer (64 ns
//! an entry at 1 Gbit/s), to about a dozen ranks; on a faster network it is extra work.
//! So TopKAllReduce uses this only up to [`ARRIVAL_MAX_PARTS`] ranks, and from 5 ranks on
//! stops merging when blocks come faster than that: when a block finds another complete
//! behind it (`TopkSum::Auto`). That also stops it where the backlog is not the merges'
//! doing (a small message comes in one read; a sender ahead fills the socket while an
//! earlier step's is late), at no measured cost; a rule that also asked whether the
//! merges took most of the time was slower (RESULTS.md, "On the core-per-host machine
//! with the sum on arrival").

use crate::arrival_last::LastBlock;
use crate::sparse::{SparseBytes, SparseVec};
use std::hint::select_unpredictable;

/// Up to this world size TopKAllReduce sums as the blocks arrive; beyond it, after the
/// gather (`sparse::sum_entries`; see the module's comment for why).
pub const ARRIVAL_MAX_PARTS: usize = 8;

/// Entries sorted by (index, rank): `keys` hold `index << 32 | rank`, `values` the
/// values, in the same order.
#[derive(Debug, Default)]
pub(crate) struct Run {
    pub(crate) keys: Vec<u64>,
    pub(crate) values: Vec<f32>,
}

impl Run {
    fn clear(&mut self) {
        self.keys.clear();
        self.values.clear();
    }
}

/// The state of one sum in progress; its buffers are kept between sums.
#[derive(Debug, Default)]
pub struct ArrivalSum {
    /// Every block merged so far.
    run: Run,
    /// A merge's output, swapped with `run`.
    spare: Run,
    /// The block added last, decoded with its rank into the keys: merged into `run` by
    /// `settle` or when the next block comes, or by `finish` in the pass that adds. So
    /// the last block of all costs no pass of its own, and (with `settle` called as
    /// bytes arrive) the merge of a Bruck message's last block is not made between its
    /// arrival and this rank's next send, but during the next receive.
    pending: Run,
    /// Which ranks have been added.
    added: Vec<bool>,
    /// How many ranks have been added.
    count: usize,
    /// The last block's part of the sum, made as it arrives (`add_partial`).
    last: LastBlock,
    /// The rank whose block `last` is summing, once it began.
    streaming: Option<usize>,
    /// `last`'s result, once `add` brought that whole block; `finish` hands it out.
    streamed: Option<SparseVec>,
    /// The first malformed block: its rank and what is wrong.
    error: Option<(usize, String)>,
}

impl ArrivalSum {
    /// Starts a sum of the blocks of `world` ranks, to arrive in any order.
    pub fn begin(&mut self, world: usize) {
        self.run.clear();
        self.pending.clear();
        self.added.clear();
        self.added.resize(world, false);
        self.count = 0;
        self.streaming = None;
        self.streamed = None;
        self.error = None;
    }

    /// Adds rank `rank`'s block, in the wire form of [`SparseVec::encode`], and merges in
    /// the one added before it if `settle` has not. A malformed block is remembered (the first one) and
    /// returned by `finish`; the rest of the sum is then skipped. Panics if `rank` is
    /// outside the world given to `begin` or was added already (a caller's mistake,
    /// not a peer's).
    pub fn add(&mut self, rank: usize, block: &[u8]) {
        let world = self.added.len();
        assert!(
            rank < world,
            "ArrivalSum: rank {rank} in a world of {world}"
        );
        assert!(!self.added[rank], "ArrivalSum: rank {rank} added twice");
        self.added[rank] = true;
        self.count += 1;
        if self.error.is_some() {
            return;
        }
        if self.streaming == Some(rank) {
            // The last block, whose part of the sum was made as it arrived.
            match self.last.finish(&self.run, block) {
                Ok(out) => self.streamed = Some(out),
                Err(e) => self.error = Some((rank, e)),
            }
            return;
        }
        let b = match SparseBytes::parse(block) {
            Ok(b) => b,
            Err(e) => {
                self.error = Some((rank, e));
                return;
            }
        };
        self.settle();
        let Run { keys, values } = &mut self.pending;
        keys.clear();
        values.clear();
        keys.extend(b.indices().map(|i| u64::from(i) << 32 | rank as u64));
        values.extend(b.values());
    }

    /// Merges the block added last into the run now, if it is not yet (a receiver calls
    /// this when bytes come that complete no block, so that the block's merge is done
    /// while waiting and not when the next block completes).
    pub fn settle(&mut self) {
        if self.pending.keys.is_empty() || self.error.is_some() {
            return;
        }
        if self.run.keys.is_empty() {
            // The first block with entries is the run.
            std::mem::swap(&mut self.run, &mut self.pending);
        } else {
            merge_keep_into(&self.run, &self.pending, &mut self.spare);
            std::mem::swap(&mut self.run, &mut self.spare);
        }
        self.pending.clear();
    }

    /// Takes in `prefix`, the bytes so far of `rank`'s block, if it is the one block
    /// still missing: the rest of the sum is then made as they arrive
    /// (`arrival_last.rs`), and [`ArrivalSum::add`] of the whole block completes it, so
    /// that little is left for `finish` once its last byte is in. Otherwise (other
    /// blocks missing too) nothing happens: each of those is merged once complete.
    /// Each call's prefix must extend the one before; `len` is the whole block's.
    pub fn add_partial(&mut self, rank: usize, prefix: &[u8], len: usize) {
        let world = self.added.len();
        if self.error.is_some() || rank >= world || self.added[rank] || self.count + 1 != world {
            return;
        }
        if self.streaming != Some(rank) {
            self.settle();
            self.last.begin(rank);
            self.streaming = Some(rank);
        }
        self.last.feed(&self.run, prefix, len);
    }

    /// The sum of every block: indices ascending, each index's values added in rank
    /// order. The first malformed block's rank and cause if there was one (again on
    /// every call until the next `begin`). Panics unless every rank has been added, and
    /// on a second call after a sum whose last block was fed as it arrived (its result
    /// is handed out, not kept).
    pub fn finish(&mut self) -> Result<SparseVec, (usize, String)> {
        let (world, count) = (self.added.len(), self.count);
        assert_eq!(
            count, world,
            "ArrivalSum: finish after {count} of {world} blocks"
        );
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if self.streaming.is_some() {
            // Made as the last block arrived; moved out, so once per sum.
            return Ok(self
                .streamed
                .take()
                .expect("ArrivalSum: finish called twice on a sum whose last block streamed"));
        }
        let mut out = SparseVec::default();
        merge_collapse_into(&self.run, &self.pending, &mut out);
        Ok(out)
    }
}

/// `a` and `b` merged by key into `out` (its buffers reused).
fn merge_keep_into(a: &Run, b: &Run, out: &mut Run) {
    let (ak, bk) = (&a.keys[..], &b.keys[..]);
    let (av, bv) = (&a.values[..ak.len()], &b.values[..bk.len()]);
    let cap = ak.len() + bk.len();
    out.keys.clear();
    out.values.clear();
    out.keys.resize(cap, 0);
    out.values.resize(cap, 0.0);
    let (mut i, mut j, mut w) = (0, 0, 0);
    for (ok, ov) in out.keys.iter_mut().zip(out.values.iter_mut()) {
        let (Some(&x), Some(&y)) = (ak.get(i), bk.get(j)) else {
            break;
        };
        // Selects, not branches: which side comes next is random (see merge_sum_into).
        let ta = x <= y;
        *ok = select_unpredictable(ta, x, y);
        *ov = *select_unpredictable(ta, &av[i], &bv[j]);
        i += ta as usize;
        j += !ta as usize;
        w += 1;
    }
    for (src_k, src_v) in [(&ak[i..], &av[i..]), (&bk[j..], &bv[j..])] {
        out.keys[w..w + src_k.len()].copy_from_slice(src_k);
        out.values[w..w + src_v.len()].copy_from_slice(src_v);
        w += src_k.len();
    }
    debug_assert_eq!(w, cap);
}

/// `a` and `b` merged by key, and each index's values (those of equal `key >> 32`)
/// added left to right in key order, that is in rank order, into `out`.
fn merge_collapse_into(a: &Run, b: &Run, out: &mut SparseVec) {
    let (ak, bk) = (&a.keys[..], &b.keys[..]);
    let (av, bv) = (&a.values[..ak.len()], &b.values[..bk.len()]);
    let cap = ak.len() + bk.len();
    out.indices.clear();
    out.values.clear();
    out.indices.resize(cap, 0);
    out.values.resize(cap, 0.0);
    let (mut i, mut j) = (0, 0);
    // The first entry starts the sum (none: the result is empty).
    let (first, mut cur_v) = match (ak.first(), bk.first()) {
        (Some(&x), Some(&y)) if y < x => {
            j = 1;
            (y, bv[0])
        }
        (Some(&x), _) => {
            i = 1;
            (x, av[0])
        }
        (None, Some(&y)) => {
            j = 1;
            (y, bv[0])
        }
        (None, None) => return,
    };
    let mut cur_i = (first >> 32) as u32;
    // The entry being summed is held in registers (`cur_i`, `cur_v`) and written out
    // every step at `w`; an entry of a new index moves `w` on. So the loop carries no
    // store-to-load dependency, and nothing branches on the data.
    let mut w = 0;
    let mut step = |key: u64, v: f32| {
        let x = (key >> 32) as u32;
        let same = x == cur_i;
        let sum = cur_v + v;
        out.indices[w] = cur_i;
        out.values[w] = cur_v;
        w += !same as usize;
        cur_i = x;
        cur_v = *select_unpredictable(same, &sum, &v);
    };
    while let (Some(&x), Some(&y)) = (ak.get(i), bk.get(j)) {
        let ta = x <= y;
        let v = *select_unpredictable(ta, &av[i], &bv[j]);
        i += ta as usize;
        j += !ta as usize;
        step(select_unpredictable(ta, x, y), v);
    }
    for (&k, &v) in ak[i..]
        .iter()
        .zip(&av[i..])
        .chain(bk[j..].iter().zip(&bv[j..]))
    {
        step(k, v);
    }
    out.indices[w] = cur_i;
    out.values[w] = cur_v;
    out.indices.truncate(w + 1);
    out.values.truncate(w + 1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::sum_all;

    /// Parts over a small index range, so that most indices repeat across ranks and
    /// the order of addition shows in the bits.
    fn parts(p: usize, seed: u64) -> Vec<SparseVec> {
        let mut r = tensor::Rng::new(seed);
        (0..p)
            .map(|q| {
                let n = if q % 3 == 2 { 0 } else { 40 + 17 * q };
                SparseVec::new(
                    (0..n)
                        .map(|_| {
                            let scale = [1e-3, 1.0, 1e4][r.below(3)];
                            (r.below(120) as u32, (r.normal() * scale) as f32)
                        })
                        .collect(),
                )
            })
            .collect()
    }

    /// The values' bits, every NaN as one: Rust leaves the sign and payload of an
    /// arithmetic NaN unspecified (LLVM may swap the operands of an addition), so two
    /// code paths can give different NaNs for the same sum.
    fn bits(v: &SparseVec) -> Vec<u32> {
        v.values
            .iter()
            .map(|x| {
                if x.is_nan() {
                    f32::NAN.to_bits()
                } else {
                    x.to_bits()
                }
            })
            .collect()
    }

    #[test]
    fn every_rank_gets_the_rank_order_fold_bit_for_bit() {
        let mut s = ArrivalSum::default();
        for p in 1..=9 {
            let parts = parts(p, 40 + p as u64);
            let want = sum_all(&parts);
            for r in 0..p {
                s.begin(p);
                for j in 0..p {
                    let q = (r + j) % p;
                    s.add(q, &parts[q].encode());
                    // Settled after some blocks, not others, as reads come.
                    if (j + r) % 3 != 1 {
                        s.settle();
                    }
                }
                let got = s.finish().unwrap();
                assert_eq!(got.indices, want.indices, "P = {p}, rank {r}");
                assert_eq!(bits(&got), bits(&want), "P = {p}, rank {r}");
            }
        }
    }

    #[test]
    fn signed_zeros_nans_and_a_lone_value_keep_their_bits() {
        // The fold never adds 0.0 to a value an index has in one rank only, so -0.0
        // stays -0.0; -0.0 + -0.0 is -0.0 and -0.0 + 0.0 is 0.0, so the order shows;
        // a NaN stays a NaN (its bits are not specified: see `bits`).
        let v = |pairs: &[(u32, f32)]| SparseVec::new(pairs.to_vec());
        let nan = f32::from_bits(0x7fc0_1234);
        let parts = [
            v(&[(1, -0.0), (2, -0.0), (3, 0.0), (5, nan)]),
            v(&[(2, -0.0), (3, -0.0), (4, -0.0), (5, 1.0)]),
            v(&[(3, -0.0), (5, -nan), (6, -0.0)]),
        ];
        let want = sum_all(&parts);
        let z = (-0.0f32).to_bits();
        assert_eq!(bits(&want), [z, z, 0, z, f32::NAN.to_bits(), z]);
        let mut s = ArrivalSum::default();
        for p in 1..=3 {
            let want = sum_all(&parts[..p]);
            for r in 0..p {
                s.begin(p);
                for j in 0..p {
                    s.add((r + j) % p, &parts[(r + j) % p].encode());
                }
                let got = s.finish().unwrap();
                assert_eq!(got.indices, want.indices, "P = {p}, rank {r}");
                assert_eq!(bits(&got), bits(&want), "P = {p}, rank {r}");
            }
        }
    }

    /// The last block fed as it arrives (`add_partial`, in pieces of 1 byte to the whole
    /// block) gives the same bits as added whole, on every rank of worlds of 1 to 9,
    /// with signed zeros, infinities and NaN among the values.
    #[test]
    fn the_last_block_streamed_gives_the_same_bits() {
        let mut whole = ArrivalSum::default();
        let mut streamed = ArrivalSum::default();
        let mut rng = tensor::Rng::new(17);
        for p in 1..=9 {
            let mut parts = parts(p, 70 + p as u64);
            // Specials in one part: a lone -0.0 and sums that show their order.
            if let Some(first) = parts.first_mut() {
                for (i, x) in first.values.iter_mut().enumerate() {
                    match i % 7 {
                        1 => *x = -0.0,
                        3 => *x = f32::INFINITY,
                        5 => *x = f32::NAN,
                        _ => {}
                    }
                }
            }
            for r in 0..p {
                whole.begin(p);
                streamed.begin(p);
                for j in 0..p {
                    let q = (r + j) % p;
                    let block = parts[q].encode();
                    whole.add(q, &block);
                    if j + 1 == p {
                        // The last block, in pieces of random sizes (1 byte and up).
                        let mut have = 0;
                        while have < block.len() {
                            have = (have + 1 + rng.below(block.len() / 3 + 1)).min(block.len());
                            streamed.add_partial(q, &block[..have], block.len());
                        }
                    } else {
                        // Earlier blocks' parts are ignored.
                        streamed.add_partial(q, &block[..block.len() / 2], block.len());
                    }
                    streamed.add(q, &block);
                }
                let (a, b) = (whole.finish().unwrap(), streamed.finish().unwrap());
                assert_eq!(a.indices, b.indices, "P = {p}, rank {r}");
                assert_eq!(bits(&a), bits(&b), "P = {p}, rank {r}");
                let want = sum_all(&parts);
                assert_eq!(b.indices, want.indices, "P = {p}, rank {r}");
                assert_eq!(bits(&b), bits(&want), "P = {p}, rank {r}");
            }
        }
    }

    /// A malformed last block, found as it streams or at its end, is named as one added
    /// whole would be.
    #[test]
    fn a_malformed_streamed_last_block_is_named() {
        let parts = parts(4, 9);
        let good = parts[3].encode();
        let n = parts[3].len();
        assert!(n > 1);
        let mut descending = good.clone();
        descending[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut short = good.clone();
        short.truncate(good.len() - 2);
        let mut long = good.clone();
        long.extend([0, 0, 0, 0]);
        for (block, what) in [
            (&descending, "ascending"),
            (&short, "cannot hold"),
            (&long, "cannot hold"),
        ] {
            let mut s = ArrivalSum::default();
            s.begin(4);
            for (q, part) in parts.iter().enumerate().take(3) {
                s.add(q, &part.encode());
            }
            for cut in [5, 4 + 4 * n, block.len()] {
                s.add_partial(3, &block[..cut.min(block.len())], block.len());
            }
            s.add(3, block);
            let (rank, msg) = s.finish().unwrap_err();
            assert_eq!(rank, 3, "{what}");
            assert!(msg.contains(what), "{what}: {msg}");
        }
    }

    #[test]
    #[should_panic(expected = "added twice")]
    fn a_rank_added_twice_is_a_callers_mistake() {
        let mut s = ArrivalSum::default();
        s.begin(3);
        s.add(1, &SparseVec::default().encode());
        s.add(1, &SparseVec::default().encode());
    }

    #[test]
    #[should_panic(expected = "finish after 1 of 2 blocks")]
    fn finishing_before_every_block_is_a_callers_mistake() {
        let mut s = ArrivalSum::default();
        s.begin(2);
        s.add(0, &SparseVec::default().encode());
        let _ = s.finish();
    }

    #[test]
    fn a_malformed_block_is_named_and_the_next_sum_starts_clean() {
        let parts = parts(4, 3);
        let mut s = ArrivalSum::default();
        s.begin(4);
        s.add(1, &parts[1].encode());
        // A count of one entry, and no entry.
        s.add(2, &[1, 0, 0, 0]);
        s.add(3, &parts[3].encode());
        s.add(0, &parts[0].encode());
        let (rank, msg) = s.finish().unwrap_err();
        assert_eq!(rank, 2);
        assert!(msg.contains("cannot hold"), "{msg}");
        // Asked again, the same answer, not a sum of what was left.
        assert_eq!(s.finish().unwrap_err().0, 2);
        s.begin(4);
        for (q, part) in parts.iter().enumerate() {
            s.add(q, &part.encode());
        }
        assert_eq!(s.finish().unwrap(), sum_all(&parts));
    }
}
