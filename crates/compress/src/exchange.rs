//! Pieces every method's exchange is built from: timing of the compression and
//! communication parts, the dense averaged allreduce, the allgather of encoded messages
//! decoded peer by peer, the sparse-to-dense scatter, and the density arithmetic (k of n,
//! the staged warm-up DGC and gTop-k share).

use crate::codec::CodecError;
use crate::method::{TensorUpdate, Update, UpdateKind, WireStats};
use crate::{CompressError, Result};
use comm::{Communicator, ProcessGroup, ReduceOp, Wire16};
use std::time::Instant;
use tensor::sparsify::Selected;
use tensor::{DType, Tensor};

/// Accumulates compression and communication seconds into a [`WireStats`].
pub(crate) struct Meter {
    pub stats: WireStats,
}

impl Meter {
    pub fn new(elements: usize) -> Self {
        Meter {
            stats: WireStats {
                elements,
                dense_bytes: 4 * elements,
                ..WireStats::default()
            },
        }
    }
    pub fn compress<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        self.stats.compress_seconds += t.elapsed().as_secs_f64();
        out
    }
    pub fn decompress<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        self.stats.decompress_seconds += t.elapsed().as_secs_f64();
        out
    }
    pub fn comm<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        self.stats.comm_seconds += t.elapsed().as_secs_f64();
        out
    }
    pub fn update(self, values: Vec<f32>, kind: UpdateKind) -> Update {
        Update {
            values,
            kind,
            stats: self.stats,
        }
    }
    /// [`Meter::update`] for the tensor code: the values stay where they are (a GPU's).
    pub fn tensor_update(self, values: Tensor, kind: UpdateKind) -> TensorUpdate {
        TensorUpdate {
            values,
            kind,
            stats: self.stats,
        }
    }
}

/// The ring allreduce of `values`, averaged: the dense exchange (and the fallback every
/// sparse method uses for tensors below its size threshold).
pub(crate) fn dense_average(comm: &mut Communicator, values: &[f32]) -> Result<Update> {
    let mut out = values.to_vec();
    let stats = average_in_place(comm, &mut out)?;
    Ok(Update {
        values: out,
        kind: UpdateKind::Gradient,
        stats,
    })
}

/// [`dense_average`] on tensors: `grad` averaged over the group's ranks in a new tensor
/// (autograd's gradient is not the method's to overwrite), on the same device.
pub(crate) fn dense_average_tensor(
    group: &mut dyn ProcessGroup,
    grad: &Tensor,
) -> Result<TensorUpdate> {
    dense_average_tensor_on(group, grad, None)
}

/// [`dense_average_tensor`] with `wire` on the wire: f32 (`None`) or a 16-bit format.
pub(crate) fn dense_average_tensor_on(
    group: &mut dyn ProcessGroup,
    grad: &Tensor,
    wire: Option<Wire16>,
) -> Result<TensorUpdate> {
    let n = grad.elem_count();
    let mut m = Meter::new(n);
    // x·1 + 0 is x (−0 aside): a contiguous copy on the device.
    let out = tensor::no_grad(|| grad.scale(1.0))?;
    m.comm(|| match wire {
        None => group.allreduce(&out, ReduceOp::Average),
        Some(w) => group.allreduce_16(&out, ReduceOp::Average, w),
    })?;
    m.stats.sent_values = n;
    m.stats.message_bytes = if wire.is_some() { 2 * n } else { 4 * n };
    Ok(m.tensor_update(out, UpdateKind::Gradient))
}

/// The second half of a sparse exchange on tensors: every rank's `sel` summed by index in
/// rank order (TopKAllReduce: the group's own on TCP, the composed one on NCCL), made
/// dense and divided by the world size, as [`allgather_average`] does with the decoded
/// messages; shaped `dims`, on `sel`'s device.
pub(crate) fn sparse_average_tensor(
    group: &mut dyn ProcessGroup,
    m: &mut Meter,
    sel: &Selected,
    dims: &[usize],
) -> Result<Tensor> {
    let summed = m.comm(|| group.topk_allreduce(sel))?;
    let n = sel.source_len;
    let inv = 1.0 / group.world_size() as f32;
    m.decompress(|| -> Result<Tensor> {
        let dense = if summed.is_empty() {
            Tensor::zeros(n, DType::F32, summed.values.device())?
        } else {
            summed
                .values
                .index_add_into(&summed.indices, 0, &n.into())?
        };
        // The host multiplies by the f32 1/P; so does this (affine in f32).
        Ok(dense.scale(inv as f64)?.reshape(dims)?)
    })
}

/// `values` replaced by their average over ranks (dense f32 ring allreduce): gradients of
/// small tensors, and the parameter averaging of `local` and `fedavg`.
pub(crate) fn average_in_place(comm: &mut Communicator, values: &mut [f32]) -> Result<WireStats> {
    let mut m = Meter::new(values.len());
    m.comm(|| comm.allreduce(values, ReduceOp::Average))?;
    m.stats.sent_values = values.len();
    m.stats.message_bytes = 4 * values.len();
    Ok(m.stats)
}

/// [`average_in_place`] on tensors: `t` (the weights of `local` and `fedavg`) replaced by
/// its average over the group's ranks, in place on its device.
pub(crate) fn average_tensor_in_place(
    group: &mut dyn ProcessGroup,
    t: &Tensor,
) -> Result<WireStats> {
    let n = t.elem_count();
    let mut m = Meter::new(n);
    m.comm(|| group.allreduce(t, ReduceOp::Average))?;
    m.stats.sent_values = n;
    m.stats.message_bytes = 4 * n;
    Ok(m.stats)
}

/// A local step of a method with communication delay, on tensors: the optimizer applies
/// this rank's own gradient (handed back as it came; nothing is sent).
pub(crate) fn local_step_tensor(grad: &Tensor) -> TensorUpdate {
    Meter::new(grad.elem_count()).tensor_update(grad.clone(), UpdateKind::Gradient)
}

/// [`allgather_decode`] over a group: this rank's encoded `message` travels as U32 words
/// on the group's device — its byte length, then the bytes, zero-padded to a whole word
/// (on the wire, not in the message measure) — and every rank's message, this one's
/// included and in rank order, is handed to `decode` on the host.
pub(crate) fn allgather_decode_group(
    group: &mut dyn ProcessGroup,
    m: &mut Meter,
    method: &'static str,
    param: usize,
    message: &[u8],
    mut decode: impl FnMut(usize, &[u8]) -> std::result::Result<(), CodecError>,
) -> Result<()> {
    m.stats.message_bytes += message.len();
    let len = u32::try_from(message.len()).map_err(|_| {
        CompressError::Usage(format!(
            "{method}: parameter {param}'s message of {} bytes exceeds 4 GiB",
            message.len()
        ))
    })?;
    let mut words = Vec::with_capacity(1 + message.len().div_ceil(4));
    words.push(len);
    words.extend(message.chunks(4).map(|c| {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        u32::from_le_bytes(w)
    }));
    let n = words.len();
    let mine = Tensor::from_vec(words, n, group.device())?;
    let all = m.comm(|| group.allgather_v(&mine))?;
    m.decompress(|| {
        for (peer, t) in all.iter().enumerate() {
            let malformed = |source| CompressError::Decode {
                method,
                peer,
                param,
                source,
            };
            let words = t.to_vec::<u32>()?;
            let len = *words
                .first()
                .ok_or_else(|| malformed(CodecError::Truncated("the message's length word")))?
                as usize;
            let bytes: Vec<u8> = words[1..].iter().flat_map(|w| w.to_le_bytes()).collect();
            if len > bytes.len() || bytes.len() - len >= 4 {
                return Err(malformed(CodecError::Invalid(format!(
                    "a message of {len} bytes in {} words",
                    words.len() - 1
                ))));
            }
            decode(peer, &bytes[..len]).map_err(malformed)?;
        }
        Ok(())
    })
}

/// The slices' exchange of a method written on tensors alone: `grad` as a CPU tensor, the
/// TCP communicator as the group (its device must be the CPU: the method was not
/// placed), the update read back.
pub(crate) fn on_cpu_tensors(
    method: &str,
    comm: &mut Communicator,
    grad: &[f32],
    f: impl FnOnce(&mut dyn ProcessGroup, &Tensor) -> Result<TensorUpdate>,
) -> Result<Update> {
    if ProcessGroup::device(comm) != tensor::Device::Cpu {
        return Err(CompressError::Usage(format!(
            "{method}: slices exchanged over a communicator set to the GPU (exchange tensors)"
        )));
    }
    let n = grad.len();
    let u = f(
        comm,
        &Tensor::from_vec(grad.to_vec(), n, tensor::Device::Cpu)?,
    )?;
    Ok(Update {
        values: u.values.flatten_all()?.to_vec::<f32>()?,
        kind: u.kind,
        stats: u.stats,
    })
}

/// Every rank's 1-bit codes of `codes` (U32 0/1, `[n]`), packed (the codecs' bit order)
/// and allgathered with `head` words before them: per rank, its head words (on the host)
/// and its codes unpacked (U32 `[n]`, on the group's device). The message measure is the
/// caller's.
pub(crate) fn allgather_bits(
    group: &mut dyn ProcessGroup,
    m: &mut Meter,
    head: &[u32],
    codes: &Tensor,
) -> Result<Vec<(Vec<u32>, Tensor)>> {
    let n = codes.elem_count();
    let device = codes.device();
    let words = tensor::quantize::packed_words(n, 1);
    let message = m.compress(|| -> Result<Tensor> {
        let packed = tensor::quantize::pack_codes(codes, 1)?;
        if head.is_empty() {
            return Ok(packed);
        }
        let h = Tensor::from_vec(head.to_vec(), head.len(), device)?;
        Ok(Tensor::cat(&[h, packed], 0)?)
    })?;
    let all = m.comm(|| group.allgather(&message))?;
    m.decompress(|| {
        let h = head.len();
        let heads = if h == 0 {
            Vec::new()
        } else {
            all.narrow(1, 0, h)?.contiguous()?.to_vec::<u32>()?
        };
        (0..all.dims()[0])
            .map(|peer| -> Result<(Vec<u32>, Tensor)> {
                let bits = all.narrow(0, peer, 1)?.narrow(1, h, words)?;
                Ok((
                    heads[h * peer..h * (peer + 1)].to_vec(),
                    tensor::quantize::unpack_codes(&bits, 1, n)?,
                ))
            })
            .collect()
    })
}

/// Whether a method that communicates every `every` steps does so after `step` (from 0).
pub(crate) fn due(every: Option<u64>, step: u64) -> bool {
    every.is_some_and(|e| e > 0 && (step + 1).is_multiple_of(e))
}

/// The allgather-based exchange's second half: every rank's `message` decoded into one
/// dense vector of `n` values (added in rank order, so identical everywhere), then
/// divided by the world size.
pub(crate) fn allgather_average(
    comm: &mut Communicator,
    m: &mut Meter,
    method: &'static str,
    param: usize,
    n: usize,
    message: &[u8],
    mut decode_add: impl FnMut(&[u8], &mut [f32]) -> std::result::Result<(), CodecError>,
) -> Result<Vec<f32>> {
    let mut out = vec![0f32; n];
    allgather_decode(comm, m, method, param, message, |b| decode_add(b, &mut out))?;
    let inv = 1.0 / comm.world_size() as f32;
    m.decompress(|| scale(&mut out, inv));
    Ok(out)
}

/// How many entries a density keeps of `n`: ⌈density·n⌉, at least one of a non-empty tensor.
/// The product's rounding error (half an ulp) is taken off before the ceiling, with
/// room to spare: 0.07 · 100 is 7.000000000000001 in binary floating point, and a bare
/// ceiling kept 8.
pub(crate) fn keep_count(density: f64, n: usize) -> usize {
    if n == 0 {
        0
    } else {
        let x = density * n as f64;
        ((x - x * 4.0 * f64::EPSILON).ceil() as usize).clamp(1, n)
    }
}

/// The density of a staged warm-up at a (fractional) epoch: `densities` spread evenly
/// over the first `warmup_epochs`, then `density`; a stage never sends less than
/// `density`. DGC's warm-up and gTop-k's (paper 002 §V) are both this schedule.
pub(crate) fn warmup_density(
    density: f64,
    warmup_epochs: f64,
    densities: &[f64],
    epoch: f64,
) -> f64 {
    if warmup_epochs <= 0.0 || epoch >= warmup_epochs || densities.is_empty() {
        return density;
    }
    let stages = densities.len();
    let stage = ((epoch.max(0.0) / warmup_epochs) * stages as f64).floor() as usize;
    densities[stage.min(stages - 1)].max(density)
}

/// Checks a staged warm-up's options: `epochs` finite and ≥ 0, each density in (0, 1],
/// and some densities where `epochs` > 0.
pub(crate) fn check_warmup(method: &str, epochs: f64, densities: &[f64]) -> Result<()> {
    if !(epochs >= 0.0 && epochs.is_finite()) {
        return Err(CompressError::Config(format!(
            "{method}: warmup_epochs must be a finite number ≥ 0, got {epochs}"
        )));
    }
    if epochs > 0.0 && densities.is_empty() {
        return Err(CompressError::Config(format!(
            "{method}: warmup_epochs > 0 needs warmup_densities"
        )));
    }
    for &d in densities {
        crate::options::check_density(&format!("{method} warm-up"), d)?;
    }
    Ok(())
}

/// Allgathers this rank's encoded `message` and hands every rank's message (this one's
/// included, in rank order so that sums are identical everywhere) to `decode_add`.
pub(crate) fn allgather_decode(
    comm: &mut Communicator,
    m: &mut Meter,
    method: &'static str,
    param: usize,
    message: &[u8],
    mut decode_add: impl FnMut(&[u8]) -> std::result::Result<(), CodecError>,
) -> Result<()> {
    m.stats.message_bytes += message.len();
    let all = m.comm(|| comm.allgather_v(message))?;
    m.decompress(|| {
        for (peer, bytes) in all.iter().enumerate() {
            decode_add(bytes).map_err(|source| CompressError::Decode {
                method,
                peer,
                param,
                source,
            })?;
        }
        Ok(())
    })
}

/// `values` scaled by `s` in place.
/// A diverged gradient fails where it is encoded, saying so: `selected` are the values a
/// rank is about to send (for top-k selections enough, since inf and NaN rank above every
/// finite magnitude), `what` says what they are ("the gradient", "the accumulated
/// update").
pub(crate) fn refuse_non_finite(
    label: &str,
    index: usize,
    what: &str,
    selected: &[f32],
) -> Result<()> {
    match selected.iter().find(|v| !v.is_finite()) {
        Some(v) => Err(CompressError::Usage(format!(
            "{label}: parameter {index}: {what} holds {v} (the training diverged? lower --lr)"
        ))),
        None => Ok(()),
    }
}

pub(crate) fn scale(values: &mut [f32], s: f32) {
    values.iter_mut().for_each(|v| *v *= s);
}

/// Checks that a gradient and the weights have the size [`crate::Method::init`] gave.
pub(crate) fn check_len(
    method: &str,
    index: usize,
    expected: Option<usize>,
    got: &[&[f32]],
) -> Result<usize> {
    let n = expected.ok_or_else(|| {
        CompressError::Usage(format!(
            "{method}: parameter {index} was not declared to init (call init with every parameter first)"
        ))
    })?;
    for g in got {
        if g.len() != n {
            return Err(CompressError::Usage(format!(
                "{method}: parameter {index} has {n} elements, but a buffer of {} was passed",
                g.len()
            )));
        }
    }
    Ok(n)
}

/// [`check_len`] for a tensor: parameter `index` declared to init, with `t`'s element count.
pub(crate) fn check_numel(
    method: &str,
    index: usize,
    expected: Option<usize>,
    t: &Tensor,
) -> Result<usize> {
    let n = check_len(method, index, expected, &[])?;
    if t.elem_count() != n {
        return Err(CompressError::Usage(format!(
            "{method}: parameter {index} has {n} elements, but a tensor of shape {:?} was passed",
            t.dims()
        )));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::keep_count;

    #[test]
    fn keep_count_is_the_ceiling_of_the_exact_product() {
        assert_eq!(keep_count(0.07, 100), 7);
        assert_eq!(keep_count(0.001, 1_000_000_000_000), 1_000_000_000);
        assert_eq!(keep_count(0.001, 1_000_001), 1001);
        assert_eq!(keep_count(0.0725, 10_000), 725);
        assert_eq!(keep_count(1e-9, 10), 1);
        assert_eq!(keep_count(1.0, 10), 10);
        assert_eq!(keep_count(0.5, 0), 0);
        // Every density of two decimals on every n below 1,000 that is a multiple of 100.
        for d in 1..100u32 {
            for n in (100..1000).step_by(100) {
                let want = (d as usize * n).div_ceil(100);
                assert_eq!(keep_count(d as f64 / 100.0, n), want, "{d}% of {n}");
            }
        }
    }
}
