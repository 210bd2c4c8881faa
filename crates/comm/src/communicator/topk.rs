//! TopKAllReduce: every rank's sparse vector gathered and summed, identically everywhere;
//! [`TopkSum`] chooses when the sum is made (as blocks arrive, or after the gather).

use super::gather::{bruck_relay, Received};
use super::{check_local, Communicator, Scratch};
use crate::arrival_sum::ARRIVAL_MAX_PARTS;
use crate::counters::Collective;
use crate::error::{CommError, Result};
use crate::sparse::{sum_encoded_with, SparseVec};

/// When [`Communicator::topk_allreduce`] sums the blocks it gathers. Every choice gives
/// the same bits; they differ in time only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TopkSum {
    /// The default. Up to 4 ranks, as the blocks arrive (see [`ARRIVAL_ALWAYS_MAX`]); up
    /// to [`ARRIVAL_MAX_PARTS`], as they arrive until a block finds another complete
    /// behind it (the merges do not keep up with the bytes, and their O(P² k) work is
    /// more than the sum after the gather's O(P k)), then after the gather, and after
    /// such a stop the next calls sum after the gather from the start
    /// ([`ArrivalBackoff`]); beyond, after the gather.
    #[default]
    Auto,
    /// Always as the blocks arrive, at any world size and however fast they come.
    OnArrival,
    /// Always after the gather (`sparse::sum_entries`: the windowed sum, or the fold of
    /// 2 parts).
    AfterGather,
}

/// Up to this many ranks [`TopkSum::Auto`] always sums as the blocks arrive: the merges'
/// work is then at most about twice the sum after the gather (0.89-1.1 against 0.46-0.71
/// ms for 4 × 16,777 entries, `sparse_merge_bench` on 2 cores), and all but about 1 µs
/// of it is done while the bytes still arrive, where the sum after the gather lies on the
/// collective's critical path.
const ARRIVAL_ALWAYS_MAX: usize = 4;

impl TopkSum {
    /// At `world` ranks: whether a call starts summing as the blocks arrive, and whether
    /// it may then stop and sum after the gather (only such calls can count in
    /// [`Communicator::topk_arrival_stops`]).
    pub fn plan(self, world: usize) -> (bool, bool) {
        match self {
            TopkSum::Auto if world <= ARRIVAL_ALWAYS_MAX => (true, false),
            TopkSum::Auto => (world <= ARRIVAL_MAX_PARTS, world <= ARRIVAL_MAX_PARTS),
            TopkSum::OnArrival => (true, false),
            TopkSum::AfterGather => (false, false),
        }
    }
}

/// The most calls in a row that [`ArrivalBackoff`] sends straight to the sum after the
/// gather before trying to sum on arrival again.
const BACKOFF_MAX: u32 = 64;

/// [`TopkSum::Auto`]'s memory of its stops. A call that stopped summing as the blocks
/// arrived sends the next call straight to the sum after the gather, and each further
/// stop in a row doubles that run of calls (up to [`BACKOFF_MAX`]); a call that kept up
/// ends it. Where the stops are chance (a core-per-host network at 16 and 64 MiB: 0-5 of
/// 72 calls), a stop costs one call; where they are the rule (2 kB blocks that come in
/// one read, which arrive faster than they merge; ranks sharing cores, where merges that
/// are abandoned took CPU the others wanted), Auto no longer starts merges it will give
/// up. With 8 workers 4 to a core in the emulated network, TopK at 64 MiB took 18.0-20.5
/// ms with Auto before this and 14.9-17.2 with it, six alternated pairs, faster in each;
/// 16 MiB likewise; 1 MiB even (RESULTS.md, "Auto's stops remembered").
#[derive(Debug, Default)]
pub(super) struct ArrivalBackoff {
    /// Calls left to sum after the gather without trying.
    skip: u32,
    /// The length of the next run, doubled at each stop in a row.
    next: u32,
}

impl ArrivalBackoff {
    /// Whether this call skips summing on arrival (and counts one call of the run).
    fn skip_this(&mut self) -> bool {
        let skip = self.skip > 0;
        self.skip = self.skip.saturating_sub(1);
        skip
    }
    fn stopped(&mut self) {
        self.next = (self.next * 2).clamp(1, BACKOFF_MAX);
        self.skip = self.next;
    }
    fn kept_up(&mut self) {
        self.next = 0;
    }
}

impl std::str::FromStr for TopkSum {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(TopkSum::Auto),
            "arrival" => Ok(TopkSum::OnArrival),
            "after" => Ok(TopkSum::AfterGather),
            _ => Err(format!(
                "{s:?} is not a time for TopKAllReduce's sum: auto, arrival or after"
            )),
        }
    }
}

impl Communicator {
    /// TopKAllReduce: every rank's sparse vector gathered and summed (ranks' values added
    /// in rank order, so the result is identical everywhere). O(kP) traffic per rank.
    /// The sum is made as the blocks arrive or after the gather ([`TopkSum`],
    /// [`Communicator::set_topk_sum`]). A malformed `local` (see [`SparseVec::check`]) is
    /// an error before any communication; a peer's malformed block is an error naming
    /// that peer, and the rank that relayed it where another did.
    pub fn topk_allreduce(&mut self, local: &SparseVec) -> Result<SparseVec> {
        self.guarded(|c| c.topk_allreduce_unguarded(local))
    }
    fn topk_allreduce_unguarded(&mut self, local: &SparseVec) -> Result<SparseVec> {
        check_local("topk_allreduce", local)?;
        self.trace.mark("begin", self.rank, 0);
        let tag = self.next_tag();
        let mut s = std::mem::take(&mut self.scratch);
        local.encode_into(&mut s.local);
        let (p, r) = (self.world, self.rank);
        // Whether this call sums as the blocks arrive (arrival_sum.rs), and whether it
        // stops doing so once blocks come faster than it merges (see TopkSum). Either
        // way the result has the same bits.
        let (mut arriving, may_stop) = self.topk_sum.plan(p);
        if may_stop && self.topk_backoff.skip_this() {
            arriving = false;
            self.topk_arrival_skips += 1;
        }
        let Scratch {
            local,
            gather,
            sum,
            arrival,
        } = &mut s;
        if arriving {
            arrival.begin(p);
        }
        let watching = arriving;
        // This rank's own block joins at the first read, so that decoding it is not in
        // front of the first send. A block is merged at the next read (see ArrivalSum::
        // settle), or at once where that read brought bytes of the next block of the
        // same message: the last block of a message then waits for bytes of the next
        // step's, after this rank's next send has left. The last block of all is summed
        // as it arrives (ArrivalSum::add_partial, arrival_last.rs).
        let mut own_added = false;
        let mut on_block = |event: Received| {
            // A block with another complete behind it: the bytes come faster than this
            // rank merges them (see TopkSum::Auto).
            if let Received::Block { more: true, .. } = event {
                arriving &= !may_stop;
            }
            if !arriving {
                return;
            }
            if !own_added {
                arrival.add(r, local);
                own_added = true;
            }
            match event {
                Received::Block { j, bytes, .. } => arrival.add((r + j) % p, bytes),
                Received::Bytes => arrival.settle(),
                // The last block's part of the sum is made as it arrives
                // (arrival_last.rs); an earlier block's waits until it is complete.
                Received::Part { j, bytes, len } => {
                    arrival.settle();
                    arrival.add_partial((r + j) % p, bytes, len);
                }
            }
        };
        let on_block = watching.then_some(&mut on_block as &mut dyn FnMut(Received));
        let gathered = self.allgather_into(local, tag, Collective::TopkAllreduce, gather, on_block);
        if watching && may_stop && gathered.is_ok() {
            if arriving {
                self.topk_backoff.kept_up();
            } else {
                self.topk_arrival_stops += 1;
                self.topk_backoff.stopped();
            }
        }
        let out = gathered.and_then(|()| {
            let summed = if arriving {
                if !own_added {
                    // No read came (a world of one): the sum is this rank's block.
                    arrival.add(r, local);
                }
                arrival.finish()
            } else {
                // Checked and summed in rank order (the same on every rank), read in place.
                let have = &gather.have;
                sum_encoded_with((0..p).map(|q| have.block((q + p - r) % p)), sum)
            };
            summed.map_err(|(peer, msg)| {
                let via = bruck_relay(p, r, peer);
                let msg = if via == peer {
                    msg
                } else {
                    format!("{msg} (its block, relayed by rank {via})")
                };
                CommError::Protocol { peer, msg }
            })
        });
        self.scratch = s;
        self.trace.mark("end", self.rank, 0);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{ArrivalBackoff, BACKOFF_MAX};

    /// Calls skipped after each of `stops` stops in a row (each followed by its run).
    fn runs(b: &mut ArrivalBackoff, stops: usize) -> Vec<u32> {
        (0..stops)
            .map(|_| {
                b.stopped();
                let mut n = 0;
                while b.skip_this() {
                    n += 1;
                }
                n
            })
            .collect()
    }

    #[test]
    fn stops_in_a_row_double_the_skipped_run_and_a_call_that_keeps_up_ends_it() {
        let mut b = ArrivalBackoff::default();
        assert!(!b.skip_this(), "no stop yet: every call tries");
        assert_eq!(runs(&mut b, 9), [1, 2, 4, 8, 16, 32, 64, 64, 64]);
        assert_eq!(BACKOFF_MAX, 64);
        b.kept_up();
        assert!(!b.skip_this());
        assert_eq!(runs(&mut b, 2), [1, 2], "a kept-up call starts over");
    }
}
