//! The wire frame: a 16-byte header — magic `GX`, version, kind, a u32 tag (the collective
//! and step it belongs to), a u64 payload length — then the payload. The decoder checks
//! magic, version and the length bound before anything is allocated.

/// 2 since the allgather's packed block lengths became varints (u64s in 1): a peer of the
/// other layout is refused by the version check instead of misreading the lengths. 3
/// since the kind `KIND_REFUSED` (a point-to-point message refused over the frame limit).
pub const FRAME_VERSION: u8 = 3;
pub const HEADER_LEN: usize = 16;
/// `kind` of an ordinary frame.
pub const KIND_DATA: u8 = 0;
/// `kind` of the notice a rank sends its peers when a collective fails because of a peer:
/// the payload is the failed rank (u32, little-endian) and the cause as UTF-8, at most
/// [`ABORT_MAX`] bytes in all. A receiver returns it as its own error, so every rank
/// names the rank that failed, not the neighbour the failure reached it through.
pub const KIND_ABORT: u8 = 1;
pub const ABORT_MAX: u64 = 1024;
/// `kind` of the frame a rank sends instead of a point-to-point message over the frame
/// limit, under that message's tag: the payload is the message's length and the limit
/// (two u64, little-endian). The receiver's `recv` returns the refusal at once, where it
/// would otherwise wait out its timeout for a message that never comes.
pub const KIND_REFUSED: u8 = 2;
pub const REFUSED_LEN: u64 = 16;
const MAGIC: [u8; 2] = *b"GX";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: u8,
    pub tag: u32,
    pub len: u64,
}

pub fn encode_header(h: &FrameHeader) -> [u8; HEADER_LEN] {
    let mut b = [0u8; HEADER_LEN];
    b[..2].copy_from_slice(&MAGIC);
    b[2] = FRAME_VERSION;
    b[3] = h.kind;
    b[4..8].copy_from_slice(&h.tag.to_le_bytes());
    b[8..16].copy_from_slice(&h.len.to_le_bytes());
    b
}

/// Parses a header; `max_len` bounds the payload a peer may announce.
pub fn decode_header(b: &[u8], max_len: u64) -> Result<FrameHeader, String> {
    if b.len() < HEADER_LEN {
        return Err(format!(
            "truncated header ({} of {HEADER_LEN} bytes)",
            b.len()
        ));
    }
    if b[..2] != MAGIC {
        return Err(format!("bad magic {:02x?}", &b[..2]));
    }
    if b[2] != FRAME_VERSION {
        return Err(format!(
            "protocol version {} (this build speaks {FRAME_VERSION})",
            b[2]
        ));
    }
    if ![KIND_DATA, KIND_ABORT, KIND_REFUSED].contains(&b[3]) {
        return Err(format!("unknown frame kind {}", b[3]));
    }
    let len = u64::from_le_bytes(b[8..16].try_into().map_err(|_| "header length field")?);
    if len > max_len {
        return Err(format!(
            "payload of {len} bytes exceeds the maximum of {max_len}"
        ));
    }
    let tag = u32::from_le_bytes(b[4..8].try_into().map_err(|_| "header tag field")?);
    Ok(FrameHeader {
        kind: b[3],
        tag,
        len,
    })
}
