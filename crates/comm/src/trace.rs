//! An opt-in timeline of the sparse collectives' steps on this rank (gTopKAllReduce,
//! TopKAllReduce, their allgather and broadcast), for finding where their time goes
//! beyond the α-β model (which counts only the messages). Off by default: a call
//! then costs one branch per step. With [`Communicator::set_trace`] on, each step appends
//! an event stamped with `CLOCK_MONOTONIC`, which every process of one machine shares, so
//! that the ranks of a local or emulated-network job can be put on one time line
//! (`comm_bench --trace`).
//!
//! [`Communicator::set_trace`]: crate::Communicator::set_trace

/// One step of a collective on this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// `CLOCK_MONOTONIC`, nanoseconds.
    pub t_ns: u64,
    /// What happened: `begin` and `end` of a TopK or gTopK call; gTopK's `local_top`,
    /// `up_recv` (waiting for a child), `up_last_byte`, `up_cut` (its ⊤ merge done),
    /// `up_send`, `up_sent` (the write returned); the broadcast's `down_recv`,
    /// `down_last_byte`, `down_send`, `down_sent`, `down_receipt` (a child confirmed);
    /// the allgather's `gather_send` and `gather_recv_done` per Bruck step (its exchange
    /// done: the message received, and this rank's own written).
    pub what: &'static str,
    /// The other rank of a message step (this rank otherwise).
    pub peer: usize,
    /// The message's payload bytes (0 where there is none).
    pub bytes: usize,
}

/// The events recorded since the last [`Trace::take`], when on (without limit: a caller
/// that turns it on takes them).
#[derive(Default)]
pub(crate) struct Trace {
    on: bool,
    events: Vec<TraceEvent>,
}

impl Trace {
    pub(crate) fn set(&mut self, on: bool) {
        self.on = on;
    }
    /// Records a step, if tracing is on.
    pub(crate) fn mark(&mut self, what: &'static str, peer: usize, bytes: usize) {
        if self.on {
            self.events.push(TraceEvent {
                t_ns: monotonic_ns(),
                what,
                peer,
                bytes,
            });
        }
    }
    pub(crate) fn take(&mut self) -> Vec<TraceEvent> {
        std::mem::take(&mut self.events)
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of a machine (network
/// namespaces do not change it), unlike `Instant`, whose values cannot leave a process.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC exists on every Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_records_nothing_and_on_records_in_order() {
        let mut t = Trace::default();
        t.mark("begin", 0, 0);
        assert!(t.take().is_empty());
        t.set(true);
        t.mark("begin", 0, 0);
        t.mark("up_recv", 1, 8);
        let ev = t.take();
        assert_eq!(ev.len(), 2);
        assert_eq!((ev[1].what, ev[1].peer, ev[1].bytes), ("up_recv", 1, 8));
        assert!(ev[0].t_ns <= ev[1].t_ns);
        assert!(t.take().is_empty(), "take empties the trace");
    }
}
