//! Mutual challenge-response authentication with a shared token (HMAC-SHA256): each side
//! sends a fresh random nonce and proves knowledge of the token by returning the HMAC of
//! the other side's nonce with its role and rank. The token itself never crosses the wire.

use crate::error::{CommError, Result};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{Read, Write};
use std::net::TcpStream;

const NONCE: usize = 32;
const MAC: usize = 32;

fn mac(token: &[u8], nonce: &[u8], role: &[u8], rank: usize) -> Result<[u8; MAC]> {
    let mut m = Hmac::<Sha256>::new_from_slice(token)
        .map_err(|e| CommError::Config(format!("bad token: {e}")))?;
    m.update(nonce);
    m.update(role);
    m.update(&(rank as u64).to_le_bytes());
    Ok(m.finalize().into_bytes().into())
}

fn io(who: &str, e: std::io::Error) -> CommError {
    CommError::Auth {
        who: who.to_string(),
        msg: format!("connection failed during the handshake: {e}"),
    }
}

/// Runs the handshake; both sides call it. `my_rank` is sent, the peer's returned.
pub(crate) fn handshake(
    stream: &mut TcpStream,
    token: &[u8],
    my_rank: usize,
    who: &str,
) -> Result<usize> {
    let mut my_nonce = [0u8; NONCE];
    getrandom::getrandom(&mut my_nonce)
        .map_err(|e| CommError::Config(format!("no randomness for nonces: {e}")))?;
    let mut hello = Vec::with_capacity(8 + NONCE);
    hello.extend((my_rank as u64).to_le_bytes());
    hello.extend(my_nonce);
    stream.write_all(&hello).map_err(|e| io(who, e))?;
    let mut theirs = [0u8; 8 + NONCE];
    stream.read_exact(&mut theirs).map_err(|e| io(who, e))?;
    let peer = u64::from_le_bytes(theirs[..8].try_into().unwrap_or_default()) as usize;
    let proof = mac(token, &theirs[8..], b"gradex-proof", my_rank)?;
    stream.write_all(&proof).map_err(|e| io(who, e))?;
    let mut got = [0u8; MAC];
    stream.read_exact(&mut got).map_err(|e| io(who, e))?;
    let mut m = Hmac::<Sha256>::new_from_slice(token)
        .map_err(|e| CommError::Config(format!("bad token: {e}")))?;
    m.update(&my_nonce);
    m.update(b"gradex-proof");
    m.update(&(peer as u64).to_le_bytes());
    m.verify_slice(&got).map_err(|_| CommError::Auth {
        who: who.to_string(),
        msg: format!("peer claiming rank {peer} does not know the job token; refused"),
    })?;
    Ok(peer)
}
