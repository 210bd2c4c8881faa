//! `allgather_v` by Bruck's algorithm (⌈log₂P⌉ messages for any P), which can hand each
//! received block to its caller as soon as it is complete: TopKAllReduce sums them so.

use super::wire::Expect;
use super::Communicator;
use crate::blocks::GatherScratch;
use crate::counters::Collective;
use crate::error::{CommError, Result};

/// Called by the allgather after each read of a message: with each block received as
/// soon as it is complete, or to say that bytes came and completed none.
pub(super) type OnBlock<'a> = Option<&'a mut dyn FnMut(Received<'_>)>;

/// What a receive in the allgather saw after a read (see [`Communicator::allgather_into`]).
pub(super) enum Received<'b> {
    /// Block `j` is complete; `more`: a later one, not empty, is too.
    Block {
        j: usize,
        bytes: &'b [u8],
        more: bool,
    },
    /// Bytes arrived and completed no block.
    Bytes,
    /// Bytes arrived and block `j` is not complete yet: `bytes` is what it has so far, of
    /// `len` (delivered instead of `Bytes`, and after the blocks a read completed).
    Part {
        j: usize,
        bytes: &'b [u8],
        len: usize,
    },
}

/// The rank from which rank `r`'s Bruck allgather over `p` ranks received rank `q`'s
/// block: the rank at distance d, the largest power of two not over (q − r) mod P (the
/// step at distance d brings blocks d to 2d − 1); `r` for its own block. A malformed
/// block is blamed on its origin, whose bytes the relays only copy, and names its relay.
pub(super) fn bruck_relay(p: usize, r: usize, q: usize) -> usize {
    let j = (q + p - r) % p;
    if j == 0 {
        return r;
    }
    let d = 1usize << (usize::BITS - 1 - j.leading_zeros());
    (r + d) % p
}

impl Communicator {
    /// Every rank's buffer (of any length) on every rank. Bruck's algorithm packs up to
    /// ⌊P/2⌋ ranks' buffers into one message (min(d, P−d) at distance d), and each
    /// message is held to `max_frame`, so the buffers of any ⌊P/2⌋ consecutive ranks must
    /// fit in it together; a message over
    /// it fails the collective on every rank at once, naming the setting.
    pub fn allgather_v(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.guarded(|c| c.allgather_v_unguarded(data))
    }
    fn allgather_v_unguarded(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let tag = self.next_tag();
        let mut g = std::mem::take(&mut self.scratch.gather);
        let gathered = self.allgather_into(data, tag, Collective::AllgatherV, &mut g, None);
        let (p, r) = (self.world, self.rank);
        let out = gathered.map(|()| {
            (0..p)
                .map(|q| g.have.block((q + p - r) % p).to_vec())
                .collect()
        });
        self.scratch.gather = g;
        out
    }
    /// Bruck's allgather: ⌈log₂P⌉ steps for any P. Before the step at distance d, this
    /// rank holds the blocks of ranks r, r+1, …, r+d−1 (mod P); it sends the first
    /// min(d, P−d) of them to rank r−d and appends those of rank r+d. Every rank sends
    /// P−1 blocks in all, as in a ring, but in ⌈log₂P⌉ messages instead of P−1: the
    /// latency term that dominates the sparse collectives' small messages (a ring's
    /// P−1 dependent steps were 2–2.6× the α-β model with 8 ranks on 2 cores).
    /// Afterwards `g.have.block(j)` is rank (r + j) mod P's block; `g`'s buffers are
    /// reused, so a call allocates only where it outgrows the earlier ones.
    /// `on_block` is called after each read with each received block that is now
    /// complete (`Received::Block`, in the order j = 1, 2, …, P−1, while the rest of its
    /// message is still arriving; `more` says that a later block has arrived too: see
    /// [`crate::blocks::BlockWatch::poll`]), then with the next block's bytes so far if
    /// some are in (`Received::Part`), or else, when the read completed no block, with
    /// `Received::Bytes`. A block handed out may belong to a message that then turns
    /// out malformed: the gather fails then.
    pub(super) fn allgather_into(
        &mut self,
        data: &[u8],
        tag: u32,
        kind: Collective,
        g: &mut GatherScratch,
        mut on_block: OnBlock,
    ) -> Result<()> {
        let (p, r) = (self.world, self.rank);
        g.have.clear();
        g.have.push(data);
        let mut d = 1;
        while d < p {
            let count = d.min(p - d);
            let (to, from) = ((r + p - d) % p, (r + d) % p);
            g.have.pack_first(count, &mut g.send);
            let expect = Expect::AtMost(self.max_frame);
            let first = g.have.len();
            let watch = &mut g.watch;
            watch.reset(count);
            let mut progress = on_block.as_mut().map(|f| {
                move |prefix: &[u8]| {
                    let block = |i: usize, bytes: &[u8], more: bool| {
                        f(Received::Block {
                            j: first + i,
                            bytes,
                            more,
                        })
                    };
                    let handed = watch.poll(prefix, block);
                    if let Some((i, bytes, len)) = watch.partial(prefix) {
                        f(Received::Part {
                            j: first + i,
                            bytes,
                            len,
                        });
                    } else if handed == 0 {
                        f(Received::Bytes);
                    }
                }
            });
            let progress = progress.as_mut().map(|f| f as &mut dyn FnMut(&[u8]));
            self.trace.mark("gather_send", to, g.send.len());
            self.exchange(to, tag, kind, &g.send, from, expect, &mut g.recv, progress)?;
            self.trace.mark("gather_recv_done", from, g.recv.len());
            g.have
                .append_message(&g.recv, count)
                .map_err(|msg| CommError::Protocol { peer: from, msg })?;
            d *= 2;
        }
        debug_assert_eq!(g.have.len(), p, "Bruck's steps bring every rank's block");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::bruck_relay;

    /// Bruck's steps played out on paper: who hands each rank each block.
    #[test]
    fn the_relay_is_the_rank_each_block_came_from() {
        for p in 1..=17 {
            for r in 0..p {
                // At the step at distance d, rank r receives from r + d the blocks that
                // rank holds at its positions 0..min(d, p − d): ranks r + d + i.
                let mut from = vec![None; p];
                from[r] = Some(r);
                let mut d = 1;
                while d < p {
                    for i in 0..d.min(p - d) {
                        from[(r + d + i) % p] = Some((r + d) % p);
                    }
                    d *= 2;
                }
                for (q, &came_from) in from.iter().enumerate() {
                    assert_eq!(Some(bruck_relay(p, r, q)), came_from, "p {p}, r {r}, q {q}");
                }
            }
        }
    }
}
