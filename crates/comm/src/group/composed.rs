//! The collectives of sparse exchange composed of a [`ProcessGroup`]'s primitives, written
//! once for every backend: NCCL runs these on the GPU, and the multi-process TCP tests run
//! the same functions against the TCP communicator's streamed paths.
//!
//! - allgather-v: every rank's length by a one-element allgather, then one allgather of
//!   the buffers padded to the longest. One collective call instead of P broadcasts (or
//!   P−1 sends and receives each): NCCL's ring allgather moves (P−1)·max elements per
//!   rank where grouped broadcasts would move (P−1)·mean, so padding costs where the
//!   lengths differ a lot; sparse gradients of one density differ little (a fixed k, or
//!   a threshold's count near it). The lengths are read on the host (they size what
//!   follows): one synchronisation per call.
//! - TopKAllReduce: the indices and values gathered so, then summed by index in rank order
//!   on a dense scratch of the parameter's length (one scatter per rank, so the sum's
//!   order, and its bits, are those of the CPU's sum of the gathered vectors).
//! - gTopKAllReduce: paper 002's binomial tree of ⊤ merges to rank 0 (a child sends its
//!   length, then its indices and values; the parent sums them with its own on a dense
//!   scratch and keeps the k largest magnitudes), then rank 0's result broadcast.
//!
//! The dense scratch makes each merge a pass over the parameter (O(n) instead of O(k)):
//! on a GPU a pass over 25 M values is a fraction of a millisecond and needs no sort; on
//! the CPU the TCP communicator takes its own sparse merges instead of these.

use super::{check_tensor, counted_as, tensor_err, ProcessGroup};
use crate::counters::Collective;
use crate::{CommError, Result};
use tensor::sparsify::{self, Selected};
use tensor::{DType, Device, Shape, Tensor};

/// Every rank's `t` (any length, shape `[len]` on return), in rank order.
pub fn allgather_v<G: ProcessGroup + ?Sized>(g: &mut G, t: &Tensor) -> Result<Vec<Tensor>> {
    const OP: &str = "allgather_v";
    check_tensor(OP, g.device(), t, false)?;
    counted_as(g, Collective::AllgatherV, |g| {
        let lens = lengths(g, OP, t.elem_count())?;
        gather_padded(g, OP, t, &lens)
    })
}

/// TopKAllReduce (see [`ProcessGroup::topk_allreduce`]): the union of the ranks' indices,
/// ascending, with their values summed in rank order.
pub fn topk_allreduce<G: ProcessGroup + ?Sized>(g: &mut G, local: &Selected) -> Result<Selected> {
    const OP: &str = "topk_allreduce";
    check_selected(OP, g.device(), local)?;
    counted_as(g, Collective::TopkAllreduce, |g| {
        let lens = lengths(g, OP, local.len())?;
        let indices = gather_padded(g, OP, &local.indices, &lens)?;
        let values = gather_padded(g, OP, &local.values, &lens)?;
        union_sum(OP, &indices, &values, local.source_len, g.device())
    })
}

/// gTopKAllReduce (paper 002, Alg. 3; see [`ProcessGroup::gtopk_allreduce`]). Truncating
/// at every tree level makes this the tree's result, which can differ from the top-k of
/// the full sum; that is the algorithm the paper defines.
pub fn gtopk_allreduce<G: ProcessGroup + ?Sized>(
    g: &mut G,
    local: &Selected,
    k: usize,
) -> Result<Selected> {
    const OP: &str = "gtopk_allreduce";
    check_selected(OP, g.device(), local)?;
    let n = local.source_len;
    counted_as(g, Collective::GtopkAllreduce, |g| {
        let (p, r) = (g.world_size(), g.rank());
        let mut cur = if local.len() > k {
            top_of_sum(OP, &[local], k, n)?
        } else {
            local.clone()
        };
        let mut mask = 1;
        while mask < p {
            if r & mask != 0 {
                send_selected(g, OP, &cur, r - mask)?;
                break;
            }
            if r + mask < p {
                let child = recv_selected(g, OP, r + mask, k, n)?;
                cur = top_of_sum(OP, &[&cur, &child], k, n)?;
            }
            mask <<= 1;
        }
        broadcast_selected(g, OP, &cur, 0, k, n)
    })
}

fn check_selected(op: &'static str, device: Device, s: &Selected) -> Result<()> {
    check_tensor(op, device, &s.indices, false)?;
    check_tensor(op, device, &s.values, true)?;
    if s.indices.dtype() != DType::U32 || s.indices.elem_count() != s.values.elem_count() {
        return Err(CommError::Argument(format!(
            "{op}: {} {:?} indices for {} values (want u32 indices, one per value)",
            s.indices.elem_count(),
            s.indices.dtype(),
            s.values.elem_count()
        )));
    }
    Ok(())
}

/// Every rank's `len`, by a one-element allgather read on the host.
fn lengths<G: ProcessGroup + ?Sized>(
    g: &mut G,
    op: &'static str,
    len: usize,
) -> Result<Vec<usize>> {
    let mine = u32::try_from(len)
        .map_err(|_| CommError::Argument(format!("{op}: {len} elements; lengths travel as u32")))?;
    let t = Tensor::from_vec(vec![mine], 1, g.device()).map_err(tensor_err(op))?;
    let all = g.allgather(&t)?.to_vec::<u32>().map_err(tensor_err(op))?;
    Ok(all.into_iter().map(|l| l as usize).collect())
}

/// Every rank's `t` (whose lengths are `lens`) by one allgather of `t` padded to the
/// longest; nothing travels when every rank's is empty.
fn gather_padded<G: ProcessGroup + ?Sized>(
    g: &mut G,
    op: &'static str,
    t: &Tensor,
    lens: &[usize],
) -> Result<Vec<Tensor>> {
    let (dtype, device) = (t.dtype(), t.device());
    let longest = lens.iter().copied().max().unwrap_or(0);
    let empty = || Tensor::zeros(0, dtype, device).map_err(tensor_err(op));
    if longest == 0 {
        return lens.iter().map(|_| empty()).collect();
    }
    let flat = t.flatten_all().map_err(tensor_err(op))?;
    let mine = if flat.elem_count() < longest {
        let pad = Tensor::zeros(longest - flat.elem_count(), dtype, device);
        Tensor::cat(&[flat, pad.map_err(tensor_err(op))?], 0).map_err(tensor_err(op))?
    } else {
        flat
    };
    let all = g.allgather(&mine)?;
    lens.iter()
        .enumerate()
        .map(|(r, &len)| {
            if len == 0 {
                return empty();
            }
            let row = all.narrow(0, r, 1).and_then(|x| x.narrow(1, 0, len));
            row.and_then(|x| x.flatten_all())
                .and_then(|x| x.contiguous())
                .map_err(tensor_err(op))
        })
        .collect()
}

/// The parts' entries summed by index (in the parts' order) on a dense scratch of `n`.
fn dense_sum(op: &'static str, parts: &[(&Tensor, &Tensor)], n: usize) -> Result<Option<Tensor>> {
    let shape = Shape::from(n);
    let mut sum: Option<Tensor> = None;
    for (indices, values) in parts {
        if indices.elem_count() == 0 {
            continue;
        }
        let d = values
            .index_add_into(indices, 0, &shape)
            .map_err(tensor_err(op))?;
        sum = Some(match sum {
            None => d,
            Some(s) => s.add(&d).map_err(tensor_err(op))?,
        });
    }
    Ok(sum)
}

/// The union of the parts' indices, ascending, each with its values summed in order.
fn union_sum(
    op: &'static str,
    indices: &[Tensor],
    values: &[Tensor],
    n: usize,
    device: Device,
) -> Result<Selected> {
    let parts: Vec<(&Tensor, &Tensor)> = indices.iter().zip(values).collect();
    let Some(sum) = dense_sum(op, &parts, n)? else {
        return empty_selected(op, n, device);
    };
    // Where an index is present: a sum can be zero (or −0) and still belong to the union.
    let ones: Vec<Tensor> = indices
        .iter()
        .map(|i| Tensor::ones(i.elem_count(), DType::F32, device))
        .collect::<tensor::Result<_>>()
        .map_err(tensor_err(op))?;
    let marks: Vec<(&Tensor, &Tensor)> = indices.iter().zip(&ones).collect();
    let Some(seen) = dense_sum(op, &marks, n)? else {
        return empty_selected(op, n, device);
    };
    let present = sparsify::at_least(&seen, 0.5).map_err(tensor_err(op))?;
    let values = sum
        .index_select(&present.indices, 0)
        .map_err(tensor_err(op))?;
    Ok(Selected {
        indices: present.indices,
        values,
        source_len: n,
    })
}

/// The ⊤ merge: the parts summed by index, then the `k` largest magnitudes (ties to the
/// lower index; zeros are never chosen).
fn top_of_sum(op: &'static str, parts: &[&Selected], k: usize, n: usize) -> Result<Selected> {
    let pairs: Vec<(&Tensor, &Tensor)> = parts.iter().map(|s| (&s.indices, &s.values)).collect();
    match dense_sum(op, &pairs, n)? {
        Some(sum) => sparsify::topk_magnitude(&sum, k).map_err(tensor_err(op)),
        None => empty_selected(op, n, parts[0].values.device()),
    }
}

fn empty_selected(op: &'static str, n: usize, device: Device) -> Result<Selected> {
    zeroed_selected(op, 0, n, device)
}

/// `len` zero pairs from a tensor of `n`: the buffers a receive fills.
fn zeroed_selected(op: &'static str, len: usize, n: usize, device: Device) -> Result<Selected> {
    Ok(Selected {
        indices: Tensor::zeros(len, DType::U32, device).map_err(tensor_err(op))?,
        values: Tensor::zeros(len, DType::F32, device).map_err(tensor_err(op))?,
        source_len: n,
    })
}

fn length_tensor(op: &'static str, len: usize, device: Device) -> Result<Tensor> {
    Tensor::from_vec(vec![len as u32], 1, device).map_err(tensor_err(op))
}

/// A length a peer sent, read on the host and held to `k` (a ⊤ merge's result has at
/// most k entries), so that no buffer is sized by a peer's word alone.
fn read_length(op: &'static str, t: &Tensor, k: usize, peer: usize) -> Result<usize> {
    let len = t.to_vec::<u32>().map_err(tensor_err(op))?[0] as usize;
    if len > k {
        return Err(CommError::Protocol {
            peer,
            msg: format!("{op}: {len} entries announced, at most k = {k} expected"),
        });
    }
    Ok(len)
}

fn send_selected<G: ProcessGroup + ?Sized>(
    g: &mut G,
    op: &'static str,
    s: &Selected,
    to: usize,
) -> Result<()> {
    g.send_recv(Some((&length_tensor(op, s.len(), g.device())?, to)), None)?;
    if !s.is_empty() {
        g.send_recv(Some((&s.indices, to)), None)?;
        g.send_recv(Some((&s.values, to)), None)?;
    }
    Ok(())
}

fn recv_selected<G: ProcessGroup + ?Sized>(
    g: &mut G,
    op: &'static str,
    from: usize,
    k: usize,
    n: usize,
) -> Result<Selected> {
    let device = g.device();
    let len_t = Tensor::zeros(1, DType::U32, device).map_err(tensor_err(op))?;
    g.send_recv(None, Some((&len_t, from)))?;
    let len = read_length(op, &len_t, k, from)?;
    let s = zeroed_selected(op, len, n, device)?;
    if len > 0 {
        g.send_recv(None, Some((&s.indices, from)))?;
        g.send_recv(None, Some((&s.values, from)))?;
    }
    Ok(s)
}

/// `root`'s `s` on every rank (the others' `s` is ignored).
fn broadcast_selected<G: ProcessGroup + ?Sized>(
    g: &mut G,
    op: &'static str,
    s: &Selected,
    root: usize,
    k: usize,
    n: usize,
) -> Result<Selected> {
    let device = g.device();
    let len_t = length_tensor(op, s.len(), device)?;
    g.broadcast(&len_t, root)?;
    if g.rank() == root {
        if !s.is_empty() {
            g.broadcast(&s.indices, root)?;
            g.broadcast(&s.values, root)?;
        }
        return Ok(s.clone());
    }
    let len = read_length(op, &len_t, k, root)?;
    let out = zeroed_selected(op, len, n, device)?;
    if len > 0 {
        g.broadcast(&out.indices, root)?;
        g.broadcast(&out.values, root)?;
    }
    Ok(out)
}
