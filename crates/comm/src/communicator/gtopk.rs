//! gTopKAllReduce (paper 002, Alg. 3): ⊤ merges up a binomial tree to rank 0, whose
//! result is broadcast down the same tree; a child's entries are summed as they arrive.

use super::wire::Expect;
use super::{check_local, Communicator};
use crate::counters::Collective;
use crate::error::{CommError, Result};
use crate::sparse::{top_into, SparseVec};
use crate::stream_merge::StreamMerge;

/// What gTopKAllReduce keeps between calls: this rank's running ⊤ merge, the sum with
/// a child's entries as they arrive, the magnitudes the cut selects
/// among, and the wire form of what this rank receives and sends up (at rank 0, down).
/// At k = 16,777 each is 67-268 kB; made afresh at every tree level, they are new
/// memory on each call, at rank 0 too, whose ⌈log₂P⌉ merges in a row lie on the
/// collective's critical path.
#[derive(Debug, Default)]
pub(super) struct GtopkScratch {
    cur: SparseVec,
    merge: StreamMerge,
    mags: Vec<u32>,
    wire: Vec<u8>,
}

impl Communicator {
    /// gTopKAllReduce (paper 002, Alg. 3): the ⊤ merge (sum by index, keep the k largest
    /// magnitudes, ties to the smaller index) applied up a binomial tree to rank 0, whose
    /// result is then broadcast down the same tree: O(k log P) traffic per rank, any world
    /// size. Note that truncating at every level makes this the tree's result, which can
    /// differ from the top-k of the full sum when an index small on one side is large
    /// after summation; that is the algorithm the paper defines. A malformed `local` (see
    /// [`SparseVec::check`]) is an error before any communication.
    pub fn gtopk_allreduce(&mut self, local: &SparseVec, k: usize) -> Result<SparseVec> {
        self.guarded(|c| c.gtopk_allreduce_unguarded(local, k))
    }
    fn gtopk_allreduce_unguarded(&mut self, local: &SparseVec, k: usize) -> Result<SparseVec> {
        check_local("gtopk_allreduce", local)?;
        self.trace.mark("begin", self.rank, 0);
        let tag = self.next_tag();
        // Every message is a ⊤ merge's result: at most k entries of 8 bytes and a count.
        let expect = Expect::AtMost((k as u64).saturating_mul(8).saturating_add(4));
        // The buffers of earlier calls (see GtopkScratch), put back however this ends.
        let mut g = std::mem::take(&mut self.gtopk);
        let out = self
            .gtopk_reduce(local, k, tag, expect, &mut g)
            .and_then(|()| {
                // Only rank 0's `wire` is sent (the others' holds what they sent up).
                self.broadcast_tagged(0, &g.wire, tag, Collective::GtopkAllreduce, expect)
            });
        let v = out.and_then(|(got, from)| match got {
            Some(bytes) => {
                SparseVec::decode(&bytes).map_err(|msg| CommError::Protocol { peer: from, msg })
            }
            // Rank 0 has the result as it made it: no copy of the bytes it sent to decode.
            None => Ok(g.cur.clone()),
        });
        self.gtopk = g;
        self.trace.mark("end", self.rank, 0);
        v
    }
    /// gTopKAllReduce's way up the tree: this rank's ⊤ merges of what its children send,
    /// sent on to its parent. Leaves the result encoded in `g.wire` at rank 0.
    fn gtopk_reduce(
        &mut self,
        local: &SparseVec,
        k: usize,
        tag: u32,
        expect: Expect,
        g: &mut GtopkScratch,
    ) -> Result<()> {
        let (p, r) = (self.world, self.rank);
        let GtopkScratch {
            cur,
            merge,
            mags,
            wire,
        } = g;
        top_into(local, k, mags, cur);
        self.trace.mark("local_top", r, 0);
        let mut mask = 1;
        while mask < p {
            if r & mask != 0 {
                cur.encode_into(wire);
                self.trace.mark("up_send", r - mask, wire.len());
                self.send_to(r - mask, tag, Collective::GtopkAllreduce, wire)?;
                self.trace.mark("up_sent", r - mask, wire.len());
                return Ok(());
            } else if r + mask < p {
                // The child's entries are summed into ours as they arrive
                // (stream_merge.rs); the cut to k waits for the last byte.
                let peer = r + mask;
                merge.begin();
                let mut feed = |prefix: &[u8]| merge.feed(cur, prefix);
                let kind = Collective::GtopkAllreduce;
                self.trace.mark("up_recv", peer, 0);
                self.recv_from_into(peer, tag, kind, expect, wire, Some(&mut feed))?;
                self.trace.mark("up_last_byte", peer, wire.len());
                let summed = merge.finish(cur, wire);
                let summed = summed.map_err(|msg| CommError::Protocol { peer, msg })?;
                // The sum lives in `merge`, so the cut can replace `cur`.
                top_into(summed, k, mags, cur);
                self.trace.mark("up_cut", peer, 0);
            }
            mask <<= 1;
        }
        cur.encode_into(wire);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Expect;
    use crate::CommConfig;
    use std::time::Duration;

    /// A broadcast message that does not decode is blamed on the rank it came from (the
    /// tree parent), not on the root: in gTopKAllReduce's broadcast with 4 ranks, rank 3
    /// receives from rank 1, here a scripted rank that forwards garbage.
    #[test]
    fn a_malformed_gtopk_broadcast_names_the_rank_that_sent_it() {
        use super::{Collective, Communicator};
        use crate::SparseVec;
        let world = 4;
        let configs = CommConfig::loopback_job(world, b"t").unwrap();
        let errors: Vec<Option<String>> = std::thread::scope(|s| {
            let hs: Vec<_> = configs
                .into_iter()
                .enumerate()
                .map(|(rank, cfg)| {
                    s.spawn(move || {
                        let cfg = CommConfig {
                            timeout: Duration::from_secs(20),
                            ..cfg
                        };
                        let mut c = Communicator::connect(&cfg).unwrap();
                        let mine = SparseVec {
                            indices: vec![rank as u32],
                            values: vec![1.0 + rank as f32],
                        };
                        if rank != 1 {
                            return c.gtopk_allreduce(&mine, 2).err().map(|e| e.to_string());
                        }
                        // Rank 1's part, by hand: its reduction message to rank 0, the
                        // broadcast from rank 0, then five bytes of garbage to rank 3.
                        let tag = c.next_tag();
                        let k = Collective::GtopkAllreduce;
                        c.send_to(0, tag, k, &mine.encode()).unwrap();
                        c.recv_from(0, tag, k, Expect::AtMost(1 << 20)).unwrap();
                        c.send_to(3, tag, k, &[1, 2, 3, 4, 5]).unwrap();
                        None
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(errors[0].is_none() && errors[2].is_none(), "{errors:?}");
        let e = errors[3]
            .as_deref()
            .expect("rank 3 must refuse the message");
        assert!(e.starts_with("rank 1: malformed frame"), "{e}");
    }
}
