//! The last step of TopKAllReduce's sum on arrival (`arrival_sum.rs`), made while the
//! last block is still arriving. Once every other rank's block is merged into the run
//! (sorted by index, then rank), what is left is to merge the last block in and add
//! each index's values in rank order, a pass over the whole result: 0.57-0.60 ms for
//! 8 × 16,777 entries (`sparse_merge_bench`, on the device machine too), after the
//! gather's last byte and so on TopK's critical path, where TopK at 64 MiB ran
//! 0.7-0.9 ms beyond its gather alone (RESULTS.md).
//!
//! The wire form sends the block's indices before its values, so the pass runs as they
//! come: as the last block's indices arrive, every index of the run below the newest
//! one is added up and written out, and each index of the last block gets its place in
//! the result, with the sum of the run's values of lower ranks at that index (those are
//! added before the last block's value in rank order) and the range of those of higher
//! ranks (added after it). As the values arrive, each completes its place. The bits
//! equal `merge_collapse_into` of the run and the whole block (unit test, fed in pieces
//! of every size; a NaN is only a NaN, as there). The block is checked as it comes, as
//! [`crate::SparseVec::decode`] checks it: a count its length (known from the gather's
//! block lengths) matches, then strictly ascending indices.

use crate::arrival_sum::Run;
use crate::sparse::{arrived_parts, length_error, word, SparseVec, NOT_ASCENDING, SHORT_OF_COUNT};

/// Where a value of the last block goes, and what it is added between.
#[derive(Clone, Copy, Debug, Default)]
struct Place {
    /// Its entry in the result.
    at: u32,
    /// The run's entries of higher ranks at its index: `after..end`, added after it.
    after: u32,
    end: u32,
    /// The sum, in rank order, of the run's values of lower ranks at its index, if any.
    before: Option<f32>,
}

/// The sum with the last block in progress. `places` keeps its buffer between sums;
/// the result is handed out by `finish`.
#[derive(Debug, Default)]
pub(crate) struct LastBlock {
    /// The last block's rank.
    rank: u64,
    /// The result so far: the run's indices added up below the last block's newest
    /// index, and the last block's, whose values wait for theirs.
    out: SparseVec,
    /// For each of the last block's indices received so far.
    places: Vec<Place>,
    /// The block's entry count, once its 4 bytes are in.
    count: Option<usize>,
    /// The next run entry to write out.
    run_next: usize,
    /// The last block's values placed so far.
    values_done: usize,
    /// The first thing found wrong with the block.
    error: Option<String>,
}

impl LastBlock {
    /// Starts the last step: `rank`'s block is the one still arriving.
    pub(crate) fn begin(&mut self, rank: usize) {
        self.rank = rank as u64;
        self.out.indices.clear();
        self.out.values.clear();
        self.places.clear();
        self.count = None;
        self.run_next = 0;
        self.values_done = 0;
        self.error = None;
    }

    /// Takes in `prefix`, the block's bytes so far (each call a longer prefix of the
    /// same block of `len` bytes), summing with `run` (the same on every call) what is
    /// new in it.
    pub(crate) fn feed(&mut self, run: &Run, prefix: &[u8], len: usize) {
        if self.error.is_some() {
            return;
        }
        let first = self.count.is_none();
        let Some((n, indices, values)) = arrived_parts(prefix, &mut self.count) else {
            return;
        };
        if first {
            // The length first, as `SparseVec::decode` checks it: the same error
            // whatever pieces the block came in.
            self.error = length_error(len, n);
            if self.error.is_some() {
                return;
            }
            // Room for the result at once (growing it as it filled copied it several
            // times over). The count is the peer's word: at most as much again as the
            // run is taken on it.
            let room = run.keys.len() + n.min(run.keys.len());
            self.out.indices.reserve(room);
            self.out.values.reserve(room);
        }
        if indices.len() / 4 < self.places.len() {
            return; // a shorter prefix than before: nothing new
        }
        let tail = self.places.len() == n && self.run_next < run.keys.len();
        if self.places.len() < indices.len() / 4 || tail {
            self.take_indices(run, indices, n);
            if self.error.is_some() {
                return;
            }
        }
        if self.values_done < values.len() / 4 {
            self.take_values(run, values);
        }
    }

    /// Indices `places.len()..` of `indices` (the block's received), and once all `n`
    /// are in, the rest of the run.
    fn take_indices(&mut self, run: &Run, indices: &[u8], n: usize) {
        if run.keys.len().saturating_add(n) > u32::MAX as usize {
            self.error = Some(format!("sparse payload of {n} entries is too long to sum"));
            return;
        }
        let mut prev = self.places.len().checked_sub(1).map(|j| word(indices, j));
        for j in self.places.len()..indices.len() / 4 {
            let y = word(indices, j);
            if prev.is_some_and(|p| p >= y) {
                self.error = Some(NOT_ASCENDING.into());
                return;
            }
            prev = Some(y);
            // The run's indices below y, each added up; then y's own entries.
            self.write_run_below(run, u64::from(y) << 32);
            let (keys, values) = (&run.keys[..], &run.values[..run.keys.len()]);
            let mut before = None;
            let mut i = self.run_next;
            while keys
                .get(i)
                .is_some_and(|&k| k >> 32 == u64::from(y) && k & 0xffff_ffff < self.rank)
            {
                before = Some(before.map_or(values[i], |s: f32| s + values[i]));
                i += 1;
            }
            let after = i;
            while keys.get(i).is_some_and(|&k| k >> 32 == u64::from(y)) {
                i += 1;
            }
            self.run_next = i;
            self.places.push(Place {
                at: self.out.indices.len() as u32,
                after: after as u32,
                end: i as u32,
                before,
            });
            self.out.indices.push(y);
            self.out.values.push(0.0);
        }
        if self.places.len() == n {
            self.write_run_below(run, u64::MAX);
        }
    }

    /// Writes out the run's entries from `run_next` with keys below `limit`, each
    /// index's values added in key (rank) order.
    fn write_run_below(&mut self, run: &Run, limit: u64) {
        let (keys, values) = (&run.keys[..], &run.values[..run.keys.len()]);
        let mut i = self.run_next;
        while i < keys.len() && keys[i] < limit {
            let x = keys[i] >> 32;
            let mut s = values[i];
            i += 1;
            while i < keys.len() && keys[i] >> 32 == x && keys[i] < limit {
                s += values[i];
                i += 1;
            }
            self.out.indices.push(x as u32);
            self.out.values.push(s);
        }
        self.run_next = i;
    }

    /// Values `values_done..` of `values` (the block's received), each added between
    /// the run's values of lower and of higher ranks at its index.
    fn take_values(&mut self, run: &Run, values: &[u8]) {
        let rv = &run.values[..];
        for j in self.values_done..values.len() / 4 {
            let p = self.places[j];
            let x = f32::from_bits(word(values, j));
            let mut s = p.before.map_or(x, |b| b + x);
            for &v in &rv[p.after as usize..p.end as usize] {
                s += v;
            }
            self.out.values[p.at as usize] = s;
        }
        self.values_done = values.len() / 4;
    }

    /// The sum, once `block` is the whole block (fed or not), or what is wrong with it.
    pub(crate) fn finish(&mut self, run: &Run, block: &[u8]) -> Result<SparseVec, String> {
        self.feed(run, block, block.len());
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        // The length was checked when the count came in (`feed`).
        self.count.ok_or(SHORT_OF_COUNT)?;
        Ok(std::mem::take(&mut self.out))
    }
}
