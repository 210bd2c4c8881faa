//! The collectives with a root: `barrier` (every rank checks in with rank 0, which
//! releases them) and `broadcast` along a binomial tree, which gTopKAllReduce's way down
//! uses too.

use super::wire::Expect;
use super::Communicator;
use crate::counters::Collective;
use crate::error::{CommError, Result};

/// The smallest broadcast message whose sender waits for each child's receipt before
/// sending to the next (`broadcast_tagged`). Sharing the link delays the first child by
/// the message's wire time; the receipt delays the next by a round trip's latency, about
/// α. They are even where the wire time is α: 2 kB at 1 Gbit/s and 10-15 µs, 16 kB at
/// 10 Gbit/s. This is the second, so that the wait is only paid where the link clearly
/// gains; MPI libraries draw the same line (eager sends below it, rendezvous above) at
/// 16-128 kB. Measured with 4 workers on 2 cores (RESULTS.md): receipts took the
/// broadcast of gTopK's 2 kB messages (1 MiB) to 0.089 ms, against 0.039-0.068 without.
const RECEIPT_MIN_BYTES: usize = 16 << 10;

impl Communicator {
    /// Returns when every rank has called it.
    pub fn barrier(&mut self) -> Result<()> {
        self.guarded(|c| c.barrier_unguarded())
    }
    fn barrier_unguarded(&mut self) -> Result<()> {
        let tag = self.next_tag();
        if self.rank == 0 {
            for p in 1..self.world {
                self.recv_from(p, tag, Collective::Barrier, Expect::Exactly(0))?;
            }
            for p in 1..self.world {
                self.send_to(p, tag, Collective::Barrier, &[])?;
            }
        } else {
            self.send_to(0, tag, Collective::Barrier, &[])?;
            self.recv_from(0, tag, Collective::Barrier, Expect::Exactly(0))?;
        }
        Ok(())
    }
    /// `root`'s bytes on every rank, along a binomial tree (log₂ P rounds).
    /// A `root` that is not a rank is an error, before any communication.
    pub fn broadcast(&mut self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        self.guarded(|c| c.broadcast_unguarded(root, data))
    }
    fn broadcast_unguarded(&mut self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        if root >= self.world {
            return Err(CommError::Argument(format!(
                "broadcast from root {root}, which is not a rank of this world of {}",
                self.world
            )));
        }
        let tag = self.next_tag();
        let expect = Expect::AtMost(self.max_frame);
        self.broadcast_tagged(root, data, tag, Collective::Broadcast, expect)
            .map(|(got, _)| got.unwrap_or_else(|| data.to_vec()))
    }
    /// A binomial-tree broadcast from `root`; returns what this rank received (None at
    /// the root, which has it already) and the rank it came from (this rank's parent in
    /// the tree, or this rank at the root), which is the rank to blame for a message that
    /// does not decode.
    ///
    /// A rank with several children sends to them one after another, each once the one
    /// before has confirmed it has the whole message (an empty frame back), as the
    /// model's rounds assume. Written back to back, the messages shared the link: in
    /// the emulated 1 Gbit/s network (4 workers, gTopK's 134 kB at 64 MiB) both of rank
    /// 0's children had theirs 2.0-2.1 ms after it began sending instead of 1.1 ms for
    /// the first, and the broadcast took 3.1 ms against its model's 2.3 (RESULTS.md).
    /// The confirmation costs about α on the sender's later rounds, so messages under
    /// [`RECEIPT_MIN_BYTES`] go back to back as before.
    pub(super) fn broadcast_tagged(
        &mut self,
        root: usize,
        data: &[u8],
        tag: u32,
        kind: Collective,
        expect: Expect,
    ) -> Result<(Option<Vec<u8>>, usize)> {
        let p = self.world;
        let vr = (self.rank + p - root) % p;
        let mut from = self.rank;
        // What this rank received; the root sends `data` itself (a rank sends only after
        // its receive, so `data` is read at the root alone).
        let mut got: Option<Vec<u8>> = None;
        let mut mask = 1;
        while mask < p {
            if vr < mask {
                if vr + mask < p {
                    let dst = (vr + mask + root) % p;
                    let msg = got.as_deref().unwrap_or(data);
                    self.trace.mark("down_send", dst, msg.len());
                    self.send_to(dst, tag, kind, msg)?;
                    self.trace.mark("down_sent", dst, msg.len());
                    // Another child follows: it gets its message once this one has all
                    // of it (its receipt, an empty frame), so that the two do not share
                    // this rank's link.
                    if vr + 2 * mask < p && msg.len() >= RECEIPT_MIN_BYTES {
                        self.recv_from(dst, tag, kind, Expect::Exactly(0))?;
                        self.trace.mark("down_receipt", dst, 0);
                    }
                }
            } else if vr < 2 * mask {
                from = (vr - mask + root) % p;
                self.trace.mark("down_recv", from, 0);
                let msg = self.recv_from(from, tag, kind, expect)?;
                self.trace.mark("down_last_byte", from, msg.len());
                // The parent waits for this before it sends to its next child, if it has
                // one (vr - mask + 2 mask < p); sent before this rank forwards anything,
                // so that it does not queue behind that on this rank's link.
                if vr + mask < p && msg.len() >= RECEIPT_MIN_BYTES {
                    self.send_to(from, tag, kind, &[])?;
                }
                got = Some(msg);
            }
            mask <<= 1;
        }
        Ok((got, from))
    }
}
