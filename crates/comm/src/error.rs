//! Communication errors: which peer, which operation, what went wrong.

#[derive(Debug, thiserror::Error)]
pub enum CommError {
    #[error("rank {peer}: {op}: {source}")]
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
}

pub type Result<T> = std::result::Result<T, CommError>;
