//! QSGD (Alistarh et al., paper 004). The gradient is cut into buckets of d consecutive
//! values; each bucket `v` is quantized as `Q_s(vᵢ) = ‖v‖₂ · sgn(vᵢ) · ξᵢ / s`, where the
//! level `ξᵢ` is `⌊s|vᵢ|/‖v‖⌋` rounded up with probability equal to the remainder, so
//! `E[Q_s(v)] = v` and `E‖Q_s(v) − v‖² ≤ min(d/s², √d/s)·‖v‖²` (Lemma 3.1).
//!
//! Wire, per bucket: the 32-bit norm, then either the Elias code (`coding=elias`: per
//! nonzero level, the Elias ω code of its gap, a sign bit and the Elias code of its
//! level, then a closing gap to one past the bucket; `codec::elias`) or fixed width (`coding=fixed`: a sign bit and
//! `bits` bits of level for every value). The b-bit variant uses s = 2^b − 1 levels, so a
//! level fits in b bits (the paper's variance arithmetic, √512/2⁴ ≈ 1.41 for 4 bits and
//! d = 512, counts 2^b; ours is one level fewer). Messages are allgathered, decoded and
//! averaged. Tensors below `min_size` (10 K in the paper) are allreduced unquantized.
//!
//! `norm=max` scales each bucket by its largest magnitude instead of ‖v‖₂, as the paper's
//! experiments do (§4, "QSGD variants": "we will scale by the maximum value of the
//! vector"); still unbiased, since |vᵢ|/max ≤ 1, with fewer values at level 0 (lower
//! variance, longer messages). The wire is the same: the bucket's 32-bit scale, then the
//! levels, so the decoder does not need to know which scale was used.
//!
//! The draws are counter-based, keyed by seed, rank, step and parameter
//! (`methods::draws`): value i of a tensor takes draw i of its stream, so the GPU draws
//! what the CPU draws and no generator state is checkpointed. On tensors: the bucket
//! scales and the levels on the device (`tensor::quantize::qsgd_quantize`, one thread per
//! bucket adding in index order, so the scales have the CPU's bits), the nonzero levels
//! compacted there (`sparsify::at_least`), and only they and the scales read to the host,
//! where the message is coded (Elias or fixed width: both are sequential bit streams, so
//! they run on the compacted levels on the host, not on the device). The messages are
//! allgathered over the group as words, decoded and averaged on the host as on slices,
//! and the average goes back to the device as one dense upload (decoding on the device
//! is not built). The same update as on slices, bit for bit (tests/exchange_tensor.rs).

use crate::codec::elias::{self, QuantizedBucket};
use crate::codec::{BitReader, BitWriter, CodecError};
use crate::exchange::{
    allgather_average, allgather_decode_group, check_len, check_numel, dense_average,
    dense_average_tensor, Meter,
};
use crate::method::{
    HostExchange, Method, ParamSpec, StateTensors, StepInfo, TensorExchange, TensorUpdate, Update,
    UpdateKind,
};
use crate::methods::draws::{method_key, Counter, Draws};
use crate::{CompressError, Result};
use tensor::quantize::{self as tq, BucketScale};
use tensor::{sparsify, Device, Tensor};

/// The paper's presets as `(bits, bucket)`.
pub fn preset(name: &str) -> Option<(u32, usize)> {
    match name {
        "2bit" => Some((2, 128)),
        "4bit" => Some((4, 512)),
        "8bit" => Some((8, 512)),
        "8bit-8192" => Some((8, 8192)),
        _ => None,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    Elias,
    Fixed,
}

/// What a bucket is scaled by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// ‖v‖₂: Lemma 3.1's analysed form.
    L2,
    /// max |vᵢ|: the paper's experiments.
    Max,
}

impl Scale {
    fn of_bucket(self) -> BucketScale {
        match self {
            Scale::L2 => BucketScale::L2,
            Scale::Max => BucketScale::Max,
        }
    }
}

/// Quantizes one bucket with `s` levels, scaled by its 2-norm.
pub fn quantize(v: &[f32], s: u32, rng: &mut impl Draws) -> QuantizedBucket {
    quantize_with(v, s, Scale::L2, rng)
}

/// Quantizes one bucket with `s` levels and the given scale (the scale as
/// `tensor::quantize::bucket_scale` computes it; the level by `qsgd_level`'s rule). A
/// non-finite value makes the scale non-finite (the max propagates NaN), which
/// [`encode_with`] reports. A bucket of scale 0 draws nothing (`Draws::skip`).
pub fn quantize_with(v: &[f32], s: u32, scale: Scale, rng: &mut impl Draws) -> QuantizedBucket {
    let norm = tq::bucket_scale(v, scale.of_bucket());
    let mut entries = Vec::new();
    if norm > 0.0 {
        for (i, &x) in v.iter().enumerate() {
            let r = (s as f64 * (x.abs() as f64) / norm).min(s as f64);
            // `floor` is a libm call on baseline x86-64; truncating instead (the same value
            // for 0 ≤ r) measured 1.15-1.31x faster at 8 bits but 0.91-0.96x at 2 and 4
            // bits (RESULTS.md, QSGD's coders), so the default 4-bit path keeps it.
            let floor = r.floor();
            let level = floor as u32 + (rng.uniform() < r - floor) as u32;
            if level > 0 {
                entries.push((i as u32, x < 0.0, level));
            }
        }
    } else {
        rng.skip(v.len() as u64);
    }
    QuantizedBucket {
        norm: norm as f32,
        entries,
    }
}

/// Adds the bucket's values into `out` (the bucket's slice).
pub fn dequantize_add(b: &QuantizedBucket, s: u32, out: &mut [f32]) {
    let unit = b.norm / s as f32;
    for &(i, neg, level) in &b.entries {
        let v = unit * level as f32;
        out[i as usize] += if neg { -v } else { v };
    }
}

fn write_fixed(w: &mut BitWriter, b: &QuantizedBucket, len: usize, bits: u32) {
    w.bits(b.norm.to_bits() as u64, 32);
    let mut e = b.entries.iter().peekable();
    for i in 0..len as u32 {
        match e.next_if(|x| x.0 == i) {
            Some(&(_, neg, level)) => {
                w.bit(neg);
                w.bits(level as u64, bits);
            }
            None => {
                w.bit(false);
                w.bits(0, bits);
            }
        }
    }
}

fn read_fixed(
    r: &mut BitReader,
    len: usize,
    bits: u32,
    s: u32,
) -> std::result::Result<QuantizedBucket, CodecError> {
    let norm = f32::from_bits(r.bits(32)? as u32);
    let mut entries = Vec::new();
    for i in 0..len as u32 {
        let neg = r.bit()?;
        let level = r.bits(bits)? as u32;
        if level > s {
            return Err(CodecError::Invalid(format!("level {level} above s = {s}")));
        }
        if level > 0 {
            entries.push((i, neg, level));
        }
    }
    Ok(QuantizedBucket { norm, entries })
}

/// Encodes a whole tensor, bucket after bucket, each scaled by its 2-norm.
pub fn encode(
    v: &[f32],
    bits: u32,
    bucket: usize,
    coding: Coding,
    rng: &mut impl Draws,
) -> Result<(Vec<u8>, usize)> {
    encode_with(v, bits, bucket, coding, Scale::L2, rng)
}

/// Encodes a whole tensor, bucket after bucket, with the given scale.
pub fn encode_with(
    v: &[f32],
    bits: u32,
    bucket: usize,
    coding: Coding,
    scale: Scale,
    rng: &mut impl Draws,
) -> Result<(Vec<u8>, usize)> {
    let s = (1u32 << bits) - 1;
    let mut w = MessageWriter::new(bits, coding);
    // Bucket by bucket: each is written and dropped before the next is quantized.
    for c in v.chunks(bucket) {
        w.push(&quantize_with(c, s, scale, rng), c.len())?;
    }
    Ok(w.finish())
}

/// A message written bucket after bucket, counting the nonzero levels.
struct MessageWriter {
    w: BitWriter,
    bits: u32,
    coding: Coding,
    buckets: usize,
    nonzeros: usize,
}

impl MessageWriter {
    fn new(bits: u32, coding: Coding) -> Self {
        MessageWriter {
            w: BitWriter::new(),
            bits,
            coding,
            buckets: 0,
            nonzeros: 0,
        }
    }
    /// Appends a bucket of `len` values; an error naming it if its scale is not finite
    /// in f32.
    fn push(&mut self, q: &QuantizedBucket, len: usize) -> Result<()> {
        if !q.norm.is_finite() {
            return Err(non_finite_bucket((self.buckets, q.norm as f64)));
        }
        self.buckets += 1;
        self.nonzeros += q.entries.len();
        match self.coding {
            Coding::Elias => elias::encode_qsgd(&mut self.w, q, len)
                .map_err(|e| CompressError::Usage(format!("qsgd encode: {e}")))?,
            Coding::Fixed => write_fixed(&mut self.w, q, len, self.bits),
        }
        Ok(())
    }
    /// The message and its nonzero count.
    fn finish(self) -> (Vec<u8>, usize) {
        (self.w.finish(), self.nonzeros)
    }
}

/// The sender's error for bucket `i` of scale `norm` (not finite in f32): receivers
/// would refuse the message as malformed; this says what happened.
fn non_finite_bucket((i, norm): (usize, f64)) -> CompressError {
    CompressError::Usage(format!(
        "qsgd: bucket {i} of the gradient has norm {}: the gradient holds inf or NaN, or \
         values beyond f32 (the training diverged? lower --lr)",
        norm as f32
    ))
}

/// Decodes a tensor's message and adds it into `out`.
pub fn decode_add(
    bytes: &[u8],
    bits: u32,
    bucket: usize,
    coding: Coding,
    out: &mut [f32],
) -> std::result::Result<(), CodecError> {
    let s = (1u32 << bits) - 1;
    let mut r = BitReader::new(bytes);
    for chunk in out.chunks_mut(bucket) {
        match coding {
            Coding::Elias => elias::decode_qsgd_add(&mut r, s, chunk)?,
            Coding::Fixed => {
                let q = read_fixed(&mut r, chunk.len(), bits, s)?;
                if !q.norm.is_finite() || q.norm < 0.0 {
                    return Err(CodecError::Invalid(format!("bucket norm {}", q.norm)));
                }
                dequantize_add(&q, s, chunk);
            }
        }
    }
    // A full byte left over means the message was longer than its buckets.
    if r.remaining() >= 8 {
        return Err(CodecError::Invalid(format!(
            "{} bits after the last bucket",
            r.remaining()
        )));
    }
    Ok(())
}

pub struct Qsgd {
    bits: u32,
    bucket: usize,
    coding: Coding,
    scale: Scale,
    min_size: usize,
    /// The key of this rank's draws (`methods::draws::method_key`).
    key: u64,
    step: u64,
    sizes: Vec<usize>,
}

impl Qsgd {
    /// QSGD for rank `rank` of a job seeded `seed`.
    pub fn new(
        bits: u32,
        bucket: usize,
        coding: Coding,
        min_size: usize,
        seed: u64,
        rank: usize,
    ) -> Result<Self> {
        if !(1..=16).contains(&bits) || bucket == 0 {
            return Err(CompressError::Config(format!(
                "qsgd: bits must be in 1..=16 and bucket ≥ 1 (got bits={bits}, bucket={bucket})"
            )));
        }
        Ok(Qsgd {
            bits,
            bucket,
            coding,
            scale: Scale::L2,
            min_size,
            key: method_key(seed, 2, rank),
            step: 0,
            sizes: Vec::new(),
        })
    }

    /// Scales buckets by `scale` (2-norm by default).
    pub fn with_scale(mut self, scale: Scale) -> Self {
        self.scale = scale;
        self
    }
}

impl Method for Qsgd {
    fn name(&self) -> &'static str {
        "qsgd"
    }
    fn describe(&self) -> String {
        format!(
            "qsgd(bits={}, s={}, bucket={}, coding={:?}, norm={}, min_size={})",
            self.bits,
            (1u32 << self.bits) - 1,
            self.bucket,
            self.coding,
            match self.scale {
                Scale::L2 => "l2",
                Scale::Max => "max",
            },
            self.min_size
        )
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.sizes = params.iter().map(|p| p.numel()).collect();
        Ok(())
    }
    fn exchange(&mut self, x: HostExchange<'_>) -> Result<Update> {
        let (comm, index, grad) = (x.comm, x.index, x.grad);
        let n = check_len("qsgd", index, self.sizes.get(index).copied(), &[grad])?;
        if n < self.min_size {
            return dense_average(comm, grad);
        }
        let (bits, bucket, coding, scale) = (self.bits, self.bucket, self.coding, self.scale);
        let mut draws = Counter::for_exchange(self.key, self.step, index);
        let mut m = Meter::new(n);
        let (message, nonzeros) =
            m.compress(|| encode_with(grad, bits, bucket, coding, scale, &mut draws))?;
        m.stats.sent_values = nonzeros;
        let out = allgather_average(comm, &mut m, "qsgd", index, n, &message, |b, out| {
            decode_add(b, bits, bucket, coding, out)
        })?;
        Ok(m.update(out, UpdateKind::Gradient))
    }
    fn begin_step(&mut self, info: StepInfo) {
        self.step = info.step;
    }
    /// Nothing to move: the draws are counter-based, and QSGD keeps no other state.
    fn place(&mut self, _device: Device) -> Result<()> {
        Ok(())
    }
    fn exchange_tensor(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        let (group, index, grad) = (x.comm, x.index, x.grad);
        let n = check_numel("qsgd", index, self.sizes.get(index).copied(), grad)?;
        if n < self.min_size {
            return dense_average_tensor(group, grad);
        }
        let key = Counter::for_exchange(self.key, self.step, index).key;
        let (bits, bucket, coding, scale) = (self.bits, self.bucket, self.coding, self.scale);
        let s = (1u32 << bits) - 1;
        let g = grad.flatten_all()?.contiguous()?;
        let mut m = Meter::new(n);
        let (message, nonzeros) = m.compress(|| -> Result<_> {
            tensor::no_grad(|| {
                if sparsify::count_at_least(&g, f32::INFINITY)? > 0 {
                    // The host's encoder names the bucket; the device's max skips NaN.
                    let v = g.to_vec::<f32>()?;
                    let scales = v
                        .chunks(bucket)
                        .map(|c| tq::bucket_scale(c, scale.of_bucket()));
                    let bad = scales.enumerate().find(|(_, x)| !(*x as f32).is_finite());
                    return Err(non_finite_bucket(bad.unwrap_or((0, f64::NAN))));
                }
                let (scales, levels) = tq::qsgd_quantize(&g, bucket, s, scale.of_bucket(), key)?;
                let (idx, lv) = sparsify::at_least(&levels, 0.5)?.to_vecs()?;
                // The compacted levels, ascending, taken bucket by bucket.
                let mut w = MessageWriter::new(bits, coding);
                let mut at = 0;
                for (b, &norm) in scales.iter().enumerate() {
                    let (start, len) = (b * bucket, bucket.min(n - b * bucket));
                    let mut q = QuantizedBucket {
                        norm: norm as f32,
                        entries: Vec::new(),
                    };
                    while at < idx.len() && (idx[at] as usize) < start + len {
                        let l = lv[at];
                        q.entries
                            .push((idx[at] - start as u32, l < 0.0, l.abs() as u32));
                        at += 1;
                    }
                    w.push(&q, len)?;
                }
                Ok(w.finish())
            })
        })?;
        m.stats.sent_values = nonzeros;
        let mut out = vec![0f32; n];
        allgather_decode_group(group, &mut m, "qsgd", index, &message, |_, b| {
            decode_add(b, bits, bucket, coding, &mut out)
        })?;
        let inv = 1.0 / group.world_size() as f32;
        let values = m.decompress(|| -> Result<Tensor> {
            out.iter_mut().for_each(|v| *v *= inv);
            Ok(Tensor::from_vec(out, grad.dims(), grad.device())?)
        })?;
        Ok(m.tensor_update(values, UpdateKind::Gradient))
    }
    // Counter-based draws: nothing to save (the default `state`).
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        crate::methods::load_drawing_state("qsgd", state)
    }
}
