//! Bytes sent and received, per collective kind: payload (what the method put on the
//! wire) and total (with frame headers).

use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Collective {
    Barrier,
    Broadcast,
    Allreduce,
    AllgatherV,
    SendRecv,
    TopkAllreduce,
    GtopkAllreduce,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub payload_sent: u64,
    pub payload_received: u64,
    pub total_sent: u64,
    pub total_received: u64,
}

#[derive(Clone, Debug, Default)]
pub struct ByteCounters {
    pub by_kind: BTreeMap<Collective, Traffic>,
    /// While set, what the primitives count goes under this kind instead of theirs: a
    /// collective composed of primitives (group/composed.rs) is counted as itself.
    attributed: Option<Collective>,
}

impl ByteCounters {
    /// Counts everything under `kind` until called again with `None` (see `attributed`).
    pub(crate) fn attribute(&mut self, kind: Option<Collective>) {
        self.attributed = kind;
    }
    pub(crate) fn sent(&mut self, kind: Collective, payload: usize, header: usize) {
        let kind = self.attributed.unwrap_or(kind);
        let t = self.by_kind.entry(kind).or_default();
        t.payload_sent += payload as u64;
        t.total_sent += (payload + header) as u64;
    }
    pub(crate) fn received(&mut self, kind: Collective, payload: usize, header: usize) {
        let kind = self.attributed.unwrap_or(kind);
        let t = self.by_kind.entry(kind).or_default();
        t.payload_received += payload as u64;
        t.total_received += (payload + header) as u64;
    }
    /// Sum over all kinds.
    pub fn total(&self) -> Traffic {
        self.by_kind
            .values()
            .fold(Traffic::default(), |a, t| Traffic {
                payload_sent: a.payload_sent + t.payload_sent,
                payload_received: a.payload_received + t.payload_received,
                total_sent: a.total_sent + t.total_sent,
                total_received: a.total_received + t.total_received,
            })
    }
}
