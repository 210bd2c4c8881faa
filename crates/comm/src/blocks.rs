//! The blocks of Bruck's allgather (allgather_v, TopKAllReduce): the message form that
//! carries several ranks' blocks at once (varint lengths, then the bodies), checked
//! before anything is sized by a peer's numbers, and [`Gathered`], the blocks a rank
//! holds, kept with the send and receive buffers between calls ([`GatherScratch`]).
//!
//! Why kept: a rank that allocates its messages afresh on every call gets memory the
//! allocator may have returned to the system since the last call (mimalloc purges freed
//! pages after a delay), and touching it again costs a page fault per 4 KiB. In the
//! emulated 1 Gbit/s network (8 workers on 2 cores, 64 MiB at density 0.001) the kept
//! buffers took TopKAllReduce from 164-293 minor faults per call to 24-33 (mimalloc's
//! defaults), and from 662 to 131 with its purge delay at 10 ms; its gather alone from
//! up to 132 to none. The time this saves was below what 8 workers on 2 cores resolve
//! (RESULTS.md, "TopKAllReduce's page faults").

/// Varints rather than fixed u64s because the sparse methods' per-tensor messages are
/// small: DGC at 99.9 % on ResNet-20 sends about 32 bytes per tensor and rank, so Bruck's
/// three u64 lengths per tensor (P = 4) were 20 % of the payload it put on the wire
/// (`dgc_table2 --preset quick`, RESULTS.md); a block under 128 bytes
/// now costs one length byte.
fn push_varint(m: &mut Vec<u8>, mut v: u64) {
    loop {
        let low = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            m.push(low);
            return;
        }
        m.push(low | 0x80);
    }
}

/// One LEB128 varint at the start of `m`: (value, bytes read). A truncated varint, one
/// longer than 10 bytes or one whose value does not fit in a u64 is an error; so is a
/// non-canonical one (a trailing zero group), so that every length has one encoding.
pub(crate) fn read_varint(m: &[u8]) -> Result<(u64, usize), String> {
    let mut v = 0u64;
    for (i, &b) in m.iter().enumerate().take(10) {
        let bits = u64::from(b & 0x7f);
        if i == 9 && b > 1 {
            return Err("allgather message: a block length overflows 64 bits".into());
        }
        v |= bits << (7 * i);
        if b & 0x80 == 0 {
            if b == 0 && i > 0 {
                return Err("allgather message: a block length is not minimally encoded".into());
            }
            return Ok((v, i + 1));
        }
    }
    Err("allgather message: a block length is truncated or longer than 10 bytes".into())
}

/// The blocks this rank holds during an allgather, one after another in one buffer.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    bytes: Vec<u8>,
    /// Each block's end in `bytes`.
    ends: Vec<usize>,
}

impl Gathered {
    /// Empties it, keeping its buffers.
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }
    pub(crate) fn push(&mut self, block: &[u8]) {
        self.bytes.extend_from_slice(block);
        self.ends.push(self.bytes.len());
    }
    /// Blocks held.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }
    /// Block `j`, in the order the blocks were added.
    pub(crate) fn block(&self, j: usize) -> &[u8] {
        let start = if j == 0 { 0 } else { self.ends[j - 1] };
        &self.bytes[start..self.ends[j]]
    }
    /// The message that carries the first `count` blocks, written into `out` (emptied
    /// first): their lengths as varints, then their bodies, which lie in `bytes` as a
    /// prefix.
    pub(crate) fn pack_first(&self, count: usize, out: &mut Vec<u8>) {
        out.clear();
        let mut start = 0;
        for &end in &self.ends[..count] {
            push_varint(out, (end - start) as u64);
            start = end;
        }
        out.extend_from_slice(&self.bytes[..start]);
    }
    /// Appends the `count` blocks of a message in [`Gathered::pack_first`]'s form. A
    /// message that does not hold exactly that many blocks is an error, and nothing is
    /// appended. The bodies follow the lengths back to back, as they lie in `bytes`, so
    /// once the lengths add up they are copied in one piece.
    pub(crate) fn append_message(&mut self, m: &[u8], count: usize) -> Result<(), String> {
        // Every length takes at least one byte: a count the message cannot hold is
        // refused before any length is read.
        if count > m.len() {
            return Err(format!(
                "allgather message of {} bytes cannot hold {count} block lengths",
                m.len()
            ));
        }
        let held = self.ends.len();
        let base = self.bytes.len();
        let head = push_ends(m, count, base, &mut self.ends)?;
        let body = &m[head..];
        let end = self.ends[held..].last().copied().unwrap_or(base);
        if end != base + body.len() {
            self.ends.truncate(held);
            return Err(format!(
                "allgather message: {count} block lengths do not add up to its {} bytes",
                body.len()
            ));
        }
        self.bytes.extend_from_slice(body);
        Ok(())
    }
}

/// Reads the `count` varint block lengths at the start of message `m` and pushes the
/// blocks' running ends, counted from `base`, onto `ends`; returns where the bodies
/// start. A length malformed or cut short, or ends past `usize::MAX`, is an error, and
/// then nothing is pushed.
fn push_ends(m: &[u8], count: usize, base: usize, ends: &mut Vec<usize>) -> Result<usize, String> {
    let held = ends.len();
    let (mut head, mut end) = (0, base);
    for _ in 0..count {
        let next = read_varint(&m[head..]).and_then(|(len, used)| {
            usize::try_from(len)
                .ok()
                .and_then(|len| end.checked_add(len))
                .map(|e| (e, used))
                .ok_or_else(|| "allgather message: block lengths add up past memory".into())
        });
        match next {
            Ok((e, used)) => {
                head += used;
                end = e;
                ends.push(e);
            }
            Err(e) => {
                ends.truncate(held);
                return Err(e);
            }
        }
    }
    Ok(head)
}

/// Hands out the blocks of a message in [`Gathered::pack_first`]'s form while it is still
/// arriving, each as soon as its last byte is in (TopKAllReduce sums them meanwhile:
/// `arrival_sum.rs`). It checks nothing beyond what it needs to cut a block from the
/// bytes present: a malformed message delivers what it delivers, and
/// [`Gathered::append_message`], which reads the whole message afterwards, refuses it.
#[derive(Debug, Default)]
pub(crate) struct BlockWatch {
    count: usize,
    /// Where the bodies start, once every length has arrived.
    body: Option<usize>,
    /// Each block's end, counted from `body`.
    ends: Vec<usize>,
    /// Blocks handed out.
    next: usize,
}

impl BlockWatch {
    /// Watches a new message of `count` blocks.
    pub(crate) fn reset(&mut self, count: usize) {
        self.count = count;
        self.body = None;
        self.ends.clear();
        self.next = 0;
    }

    /// `prefix`: the message's bytes received so far. Calls `f(i, block, more)` for
    /// each block now complete and not handed out before, in order; `more` says that
    /// a later block, not empty, is complete too: the bytes came faster than the
    /// receiver handled them.
    /// Returns how many blocks it handed out.
    pub(crate) fn poll(&mut self, prefix: &[u8], mut f: impl FnMut(usize, &[u8], bool)) -> usize {
        let body = match self.body {
            Some(b) => b,
            None => match self.read_lengths(prefix) {
                Some(b) => b,
                // Lengths still arriving, or malformed (then they stay so).
                None => return 0,
            },
        };
        // `body` was read from an earlier prefix of the same message; prefixes only grow.
        let Some(have) = prefix.len().checked_sub(body) else {
            return 0;
        };
        let start = |i: usize| if i == 0 { 0 } else { self.ends[i - 1] };
        // Where the complete blocks end.
        let done = self.ends.partition_point(|&e| e <= have);
        let done_end = if done == 0 { 0 } else { self.ends[done - 1] };
        let before = self.next;
        while self.next < done {
            let i = self.next;
            // Bytes of a later block complete (an empty block is no sign of lag).
            let more = done_end > self.ends[i];
            // Both ends lie within `prefix` (at most `have` past `body`).
            let block = &prefix[body + start(i)..body + self.ends[i]];
            self.next += 1;
            f(i, block, more);
        }
        self.next - before
    }

    /// The next block not handed out, its bytes in `prefix` so far and its whole length,
    /// if its start has arrived (after a [`BlockWatch::poll`] of the same prefix: a
    /// complete block is handed out there, not here).
    pub(crate) fn partial<'p>(&self, prefix: &'p [u8]) -> Option<(usize, &'p [u8], usize)> {
        let body = self.body?;
        let i = self.next;
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        // The ends are the peer's word (any usize): compared, never added to.
        let have = prefix.len().checked_sub(body)?;
        let to = have.min(end);
        (to > start).then(|| {
            (
                i,
                &prefix[body + start..body + to],
                end.saturating_sub(start),
            )
        })
    }

    /// The bodies' start, if all `count` lengths are in `prefix` (they are read again
    /// from the start on each call until then: at most 10 bytes each).
    fn read_lengths(&mut self, prefix: &[u8]) -> Option<usize> {
        self.ends.clear();
        let body = push_ends(prefix, self.count, 0, &mut self.ends).ok()?;
        self.body = Some(body);
        Some(body)
    }
}

/// What Bruck's allgather reuses from call to call: the blocks held, the message being
/// sent and the one being received, and the watch that hands out the received blocks
/// as they complete. They keep the capacity of the largest call so far.
#[derive(Debug, Default)]
pub(crate) struct GatherScratch {
    pub(crate) have: Gathered,
    pub(crate) send: Vec<u8>,
    pub(crate) recv: Vec<u8>,
    pub(crate) watch: BlockWatch,
}

#[cfg(test)]
mod tests {
    use super::{read_varint, BlockWatch, Gathered};

    fn gathered(blocks: &[Vec<u8>]) -> Gathered {
        let mut g = Gathered::default();
        for b in blocks {
            g.push(b);
        }
        g
    }

    fn blocks(g: &Gathered) -> Vec<Vec<u8>> {
        (0..g.len()).map(|j| g.block(j).to_vec()).collect()
    }

    /// A message read back as `count` blocks.
    fn unpack(m: &[u8], count: usize) -> Result<Vec<Vec<u8>>, String> {
        let mut g = Gathered::default();
        g.append_message(m, count)?;
        Ok(blocks(&g))
    }

    #[test]
    fn packed_blocks_round_trip_and_bad_lengths_are_errors() {
        let bs = vec![b"ab".to_vec(), Vec::new(), b"cdef".to_vec()];
        let mut m = Vec::new();
        gathered(&bs).pack_first(3, &mut m);
        assert_eq!(unpack(&m, 3).unwrap(), bs);
        // Fewer or more blocks than the step needs, a truncated message, and lengths
        // that overflow or exceed the bytes present are errors, not panics.
        assert!(unpack(&m, 4).is_err());
        assert!(unpack(&m, 2).is_err());
        assert!(unpack(&m[..m.len() - 1], 3).is_err());
        assert!(unpack(&m[..5], 1).is_err());
        assert!(unpack(&[], usize::MAX).is_err());
        // A first length of u64::MAX (ten varint bytes), then the real second block.
        let mut huge = vec![0xff; 9];
        huge.extend([0x01, 0x01, 1, 2]);
        assert!(unpack(&huge, 2).is_err());
        // A failed append leaves what was held.
        let mut g = gathered(&bs);
        assert!(g.append_message(&huge, 2).is_err());
        assert_eq!(blocks(&g), bs);
        // Lengths one byte each below 128, two from 128, exactly as many as needed.
        let sizes = [0usize, 1, 127, 128, 300, 16_384];
        let bs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![7u8; n]).collect();
        gathered(&bs).pack_first(sizes.len(), &mut m);
        let body: usize = sizes.iter().sum();
        assert_eq!(m.len() - body, 1 + 1 + 1 + 2 + 2 + 3);
        assert_eq!(unpack(&m, sizes.len()).unwrap(), bs);
        // The first blocks only, and the message buffer reused without leftovers.
        gathered(&bs).pack_first(2, &mut m);
        assert_eq!(unpack(&m, 2).unwrap(), bs[..2].to_vec());
        // Varints that overflow, run past 10 bytes, are cut short or are not minimal.
        for bad in [
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02][..],
            &[0x80; 11][..],
            &[0x80][..],
            &[0x81, 0x00, 5][..],
        ] {
            assert!(read_varint(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            read_varint(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            Ok((u64::MAX, 10))
        );
        let mut rng = tensor::Rng::new(3);
        for _ in 0..2000 {
            let n = rng.below(40);
            let junk: Vec<u8> = (0..n).map(|_| rng.below(256) as u8).collect();
            let _ = unpack(&junk, rng.below(4));
        }
    }

    #[test]
    fn blocks_are_handed_out_as_their_last_byte_arrives() {
        let sizes = [3usize, 0, 200, 1, 130];
        let bs: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|b| (b + i) as u8).collect())
            .collect();
        let mut m = Vec::new();
        gathered(&bs).pack_first(bs.len(), &mut m);
        // Fed one byte at a time: every block exactly once, in order, complete, and
        // never another complete one behind it.
        let mut w = BlockWatch::default();
        w.reset(bs.len());
        let (mut got, mut handed) = (Vec::new(), 0);
        for n in 0..=m.len() {
            handed += w.poll(&m[..n], |i, b, more| {
                assert!(!more, "block {i} of a byte-at-a-time feed");
                got.push((i, b.to_vec()));
            });
            // The next block's bytes so far: a proper, non-empty prefix of it.
            if let Some((i, part, len)) = w.partial(&m[..n]) {
                assert_eq!(i, handed, "at byte {n}");
                assert_eq!(len, bs[i].len(), "at byte {n}");
                assert!(!part.is_empty() && part.len() < bs[i].len(), "at byte {n}");
                assert_eq!(part, &bs[i][..part.len()], "at byte {n}");
            }
        }
        assert_eq!(handed, bs.len());
        assert_eq!(w.partial(&m), None, "every block handed out");
        let want: Vec<(usize, Vec<u8>)> = bs.iter().cloned().enumerate().collect();
        assert_eq!(got, want);
        // All at once: every block but the last has another (not empty) behind it.
        w.reset(bs.len());
        let mut more = Vec::new();
        w.poll(&m, |_, _, x| more.push(x));
        assert_eq!(more, [true, true, true, true, false]);
        // Up to the end of the third block: the first two have it behind them.
        w.reset(bs.len());
        more.clear();
        let third_end = m.len() - 131;
        w.poll(&m[..third_end], |_, _, x| more.push(x));
        assert_eq!(more, [true, true, false]);
        // Lengths that overflow: nothing is handed out. A message one byte short: every
        // block but the last.
        let mut huge = vec![0xff; 9];
        huge.extend([0x01, 0x01, 1, 2]);
        let short = &m[..m.len() - 1];
        for (msg, count, want) in [(&huge[..], 2, 0), (short, bs.len(), 3 + 200 + 1)] {
            w.reset(count);
            let mut n = 0;
            w.poll(msg, |_, b, _| n += b.len());
            assert_eq!(n, want);
        }
    }
}
