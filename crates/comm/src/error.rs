//! Communication errors: which peer, which operation, what went wrong.

#[derive(Debug, thiserror::Error)]
pub enum CommError {
    #[error("rank {peer}: {op}: {}", io_cause(source))]
    Peer {
        peer: usize,
        op: &'static str,
        source: std::io::Error,
    },
    #[error("rank {peer}: malformed frame: {msg}")]
    Protocol { peer: usize, msg: String },
    #[error("authentication failed with {who}: {msg}")]
    Auth { who: String, msg: String },
    #[error("rendezvous: {0}")]
    Rendezvous(String),
    #[error("configuration: {0}")]
    Config(String),
    #[error("nccl: {0}")]
    Nccl(String),
    /// This rank called a collective with an argument it cannot take part with (a
    /// malformed sparse vector, a root that is not a rank). Nothing was sent, but the
    /// peers wait for this rank's part: the communicator tells them (they fail at once,
    /// naming this rank and the cause) and gives up, as for [`CommError::TooLarge`].
    #[error("invalid argument: {0}")]
    Argument(String),
    /// This rank's message to `peer` is over the frame limit the peer accepts, so it was
    /// not sent. Inside a collective the peers wait for it: the communicator tells them
    /// and gives up ([`crate::Communicator`]'s guard). A point-to-point send over the
    /// limit returns this error too, after telling `peer`, whose `recv` returns
    /// [`CommError::Refused`]; both communicators stay usable.
    #[error("a message of {len} bytes for rank {peer} exceeds the frame limit of {limit} bytes, which the receiver would refuse (raise GRADEX_MAX_FRAME, or CommConfig::max_frame, on every rank)")]
    TooLarge { peer: usize, len: u64, limit: u64 },
    /// The point-to-point message this rank waited for from `peer` was not sent: its
    /// `len` bytes are over the frame limit `limit`. The next `recv` from `peer` waits for
    /// the message after it; the communicator stays usable.
    #[error("rank {peer} did not send its point-to-point message: {len} bytes exceed the frame limit of {limit} bytes (raise GRADEX_MAX_FRAME, or CommConfig::max_frame, on every rank)")]
    Refused { peer: usize, len: u64, limit: u64 },
    /// A collective failed because of rank `failed`; `reporter` is the rank whose notice
    /// (or whose own failure) brought the news.
    #[error("rank {failed} failed: {cause} (reported by rank {reporter})")]
    PeerFailed {
        failed: usize,
        reporter: usize,
        cause: String,
    },
    /// A tensor operation inside a collective failed (a copy to or from the device, the
    /// merge of received entries): `op` names the collective.
    #[error("{op}: {source}")]
    Tensor {
        op: &'static str,
        source: tensor::Error,
    },
}

/// An I/O error as a peer's failure reads: a socket timeout (Linux reports EAGAIN,
/// "Resource temporarily unavailable") said as what it means.
fn io_cause(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
            "no progress within the timeout (GRADEX_TIMEOUT_SECS, CommConfig::timeout): that rank is hung, stopped or far behind ({e})"
        ),
        _ => e.to_string(),
    }
}

impl CommError {
    /// The rank this error blames, if it blames one.
    pub fn failed_rank(&self) -> Option<usize> {
        match self {
            CommError::Peer { peer, .. } | CommError::Protocol { peer, .. } => Some(*peer),
            CommError::PeerFailed { failed, .. } => Some(*failed),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, CommError>;

#[cfg(test)]
mod tests {
    use super::CommError;
    use std::io::{Error, ErrorKind};

    #[test]
    fn a_socket_timeout_reads_as_one() {
        let e = |kind| CommError::Peer {
            peer: 3,
            op: "receive",
            source: Error::from(kind),
        };
        for kind in [ErrorKind::WouldBlock, ErrorKind::TimedOut] {
            let text = e(kind).to_string();
            assert!(
                text.starts_with(
                    "rank 3: receive: no progress within the timeout (GRADEX_TIMEOUT_SECS"
                ),
                "{text}"
            );
        }
        let text = e(ErrorKind::ConnectionReset).to_string();
        assert!(!text.contains("timeout"), "{text}");
    }
}
