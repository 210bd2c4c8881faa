//! Point-to-point `send` and `recv`, matched per pair of ranks in order, and the refusal
//! of a message over the frame limit (the receiver's `recv` returns it at once).

use super::wire::Expect;
use super::{Communicator, P2P};
use crate::counters::Collective;
use crate::error::{CommError, Result};
use crate::frame::{HEADER_LEN, KIND_REFUSED, REFUSED_LEN};

impl Communicator {
    /// Point-to-point send, matched by the next `recv` from this rank on `peer` (messages
    /// between a pair arrive in order; other ranks need not take part). A pair's
    /// point-to-point messages and collective frames share its connection, in order, so
    /// `peer` must receive the message before either of the two calls its next
    /// collective; a collective that finds it instead fails and says so. A message over
    /// the frame limit is refused with [`CommError::TooLarge`], and the communicator
    /// stays usable.
    pub fn send(&mut self, peer: usize, payload: &[u8]) -> Result<()> {
        self.check_alive()?;
        match self.send_unguarded(peer, payload) {
            // The peer was told (its recv returns the refusal): the communicator stays
            // usable, so this goes past the guard, which gives up on a collective's
            // message over the limit.
            Err(e @ CommError::TooLarge { .. }) => Err(e),
            r => self.guard(r),
        }
    }
    fn send_unguarded(&mut self, peer: usize, payload: &[u8]) -> Result<()> {
        self.check_peer(peer)?;
        let n = self.p2p_sent[peer].wrapping_add(1);
        let tag = P2P | (n & !P2P);
        let sent = self.send_to(peer, tag, Collective::SendRecv, payload);
        if let Err(CommError::TooLarge { len, limit, .. }) = sent {
            // Sent in the message's place, under its tag, so the receiver's recv
            // returns at once and the pair's numbering stays in step.
            let mut refusal = len.to_le_bytes().to_vec();
            refusal.extend(limit.to_le_bytes());
            self.send_kind(peer, KIND_REFUSED, tag, &refusal)?;
            self.p2p_sent[peer] = n;
            return sent;
        }
        sent?;
        self.p2p_sent[peer] = n;
        Ok(())
    }
    pub fn recv(&mut self, peer: usize) -> Result<Vec<u8>> {
        self.guarded(|c| c.recv_unguarded(peer))
    }
    fn recv_unguarded(&mut self, peer: usize) -> Result<Vec<u8>> {
        self.check_peer(peer)?;
        self.p2p_received[peer] = self.p2p_received[peer].wrapping_add(1);
        let tag = P2P | (self.p2p_received[peer] & !P2P);
        let got = self.recv_from(
            peer,
            tag,
            Collective::SendRecv,
            Expect::AtMost(self.max_frame),
        );
        if let Err(CommError::Refused { .. }) = got {
            // The refusal's bytes, as its sender counted them.
            self.counters
                .received(Collective::SendRecv, 0, HEADER_LEN + REFUSED_LEN as usize);
        }
        got
    }
}
