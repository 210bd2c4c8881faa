//! TernGrad (Wen et al., a baseline of papers 000 and 004): each value becomes
//! `s · sgn(gᵢ) · bᵢ` with `s = max|g|` and `bᵢ ~ Bernoulli(|gᵢ|/s)`, unbiased. The wire
//! is `s` (f32) and two bits per value (00 zero, 01 plus, 10 minus). Messages are
//! allgathered, decoded and averaged. (TernGrad's optional gradient clipping and layer-
//! wise scalar sharing are not part of this baseline.)
//!
//! `float_last = N` sends the model's last N parameter tensors as plain f32 through the
//! dense ring allreduce instead: Wen et al. keep AlexNet's last fully-connected layer
//! (its weight and bias, N = 2) in 32 bits, which is why the DGC paper's Table 3 gives
//! TernGrad 8x on AlexNet rather than the 16x of two bits everywhere.

use crate::codec::{BitWriter, CodecError};
use crate::exchange::{
    allgather_average, check_len, check_numel, dense_average, dense_average_tensor, Meter,
};
use crate::method::{
    HostExchange, Method, ParamSpec, StateTensors, StepInfo, TensorExchange, TensorUpdate, Update,
    UpdateKind,
};
use crate::methods::draws::{method_key, Counter, Draws};
use crate::{CompressError, Result};
use comm::ProcessGroup;
use tensor::quantize;
use tensor::{sparsify, DType, Device, Tensor};

/// The message of `g`; an error if `g` holds inf or NaN (the scale would be inf, or a
/// NaN would silently become 0: `f32::max` skips NaN).
pub fn encode(g: &[f32], draws: &mut impl Draws) -> Result<(Vec<u8>, usize)> {
    let top = g.iter().fold(0u32, |m, x| m.max(x.to_bits() & 0x7fff_ffff));
    if top >= f32::INFINITY.to_bits() {
        return Err(diverged());
    }
    let s = f32::from_bits(top);
    let mut w = BitWriter::new();
    w.bits(s.to_bits() as u64, 32);
    let mut nonzeros = 0;
    for &x in g {
        // `tensor::quantize::terngrad_code`'s rule, for draws of any source.
        let keep = s > 0.0 && draws.uniform() < (x.abs() / s) as f64;
        let code = match (keep, x < 0.0) {
            (false, _) => 0b00,
            (true, false) => 0b01,
            (true, true) => 0b10,
        };
        nonzeros += keep as usize;
        w.bits(code, 2);
    }
    Ok((w.finish(), nonzeros))
}

fn diverged() -> CompressError {
    CompressError::Usage(
        "terngrad: the gradient holds inf or NaN (the training diverged? lower --lr)".into(),
    )
}

pub fn decode_add(bytes: &[u8], out: &mut [f32]) -> std::result::Result<(), CodecError> {
    if bytes.len() != 4 + (2 * out.len()).div_ceil(8) {
        return Err(CodecError::Invalid(format!(
            "{} bytes for a ternary tensor of {}",
            bytes.len(),
            out.len()
        )));
    }
    let s = f32::from_bits(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]));
    if !s.is_finite() || s < 0.0 {
        return Err(CodecError::Invalid(format!("scale {s}")));
    }
    // After the 32-bit scale the codes are byte-aligned, four to a byte, the first in the
    // top two bits: read a byte at a time rather than through the general bit reader.
    let mut bad = false;
    for (codes, chunk) in bytes[4..].iter().zip(out.chunks_mut(4)) {
        for (k, o) in chunk.iter_mut().enumerate() {
            match (codes >> (6 - 2 * k)) & 0b11 {
                0b00 => {}
                0b01 => *o += s,
                0b10 => *o -= s,
                _ => bad = true,
            }
        }
    }
    if bad {
        return Err(CodecError::Invalid("ternary code 11".into()));
    }
    Ok(())
}

/// The U32 words of a scale `s` that carry its bytes as [`encode`] writes them
/// (big-endian) when the words' bytes are read little-endian.
fn scale_word(s: f32) -> u32 {
    u32::from_le_bytes(s.to_bits().to_be_bytes())
}

/// TernGrad's exchange on tensors (see the module comment): the averaged update, shaped
/// as `grad`, on its device.
fn exchange_on_tensors(
    group: &mut dyn ProcessGroup,
    m: &mut Meter,
    index: usize,
    grad: &Tensor,
    key: u64,
) -> Result<Tensor> {
    let n = grad.elem_count();
    let device = grad.device();
    let g = grad.flatten_all()?.contiguous()?;
    let codes_per_rank = quantize::packed_words(n, 2);
    let (message, nonzeros) = m.compress(|| -> Result<_> {
        if sparsify::count_at_least(&g, f32::INFINITY)? > 0 {
            return Err(diverged());
        }
        let s = if n == 0 {
            0.0
        } else {
            g.abs()?.max(&[0], false)?.to_vec::<f32>()?[0]
        };
        let codes = quantize::terngrad_codes(&g, s, key)?;
        let nonzeros = sparsify::count_at_least(&codes.to_dtype(DType::F32)?, 0.5)?;
        let head = Tensor::from_vec(vec![scale_word(s)], 1, device)?;
        let message = Tensor::cat(&[head, quantize::pack_codes(&codes, 2)?], 0)?;
        Ok((message, nonzeros))
    })?;
    m.stats.sent_values = nonzeros;
    m.stats.message_bytes = 4 + (2 * n).div_ceil(8);
    let all = m.comm(|| group.allgather(&message))?;
    let world = all.dims()[0];
    m.decompress(|| -> Result<Tensor> {
        let malformed = |peer: usize, what: String| CompressError::Decode {
            method: "terngrad",
            peer,
            param: index,
            source: CodecError::Invalid(what),
        };
        let scales = all.narrow(1, 0, 1)?.contiguous()?.to_vec::<u32>()?;
        let mut out = Tensor::zeros(n, DType::F32, device)?;
        for (peer, &w) in scales.iter().enumerate() {
            let s = f32::from_bits(u32::from_be_bytes(w.to_le_bytes()));
            if !s.is_finite() || s < 0.0 {
                return Err(malformed(peer, format!("scale {s}")));
            }
            let words = all.narrow(0, peer, 1)?.narrow(1, 1, codes_per_rank)?;
            let c = quantize::unpack_codes(&words, 2, n)?.to_dtype(DType::F32)?;
            if sparsify::count_at_least(&c, 2.5)? > 0 {
                return Err(malformed(peer, "ternary code 11".into()));
            }
            // The host's `out += s` or `out -= s` (out + (−s): the same bits), out + 0
            // elsewhere: codes 1 and 2 as (c == 1) − (c == 2) = +1 and −1, times s.
            let one = Tensor::ones(n, DType::F32, device)?;
            let signs = c.eq(&one)?.sub(&c.eq(&one.scale(2.0)?)?)?;
            out = out.add(&signs.scale(s as f64)?)?;
        }
        let inv = 1.0 / world as f32;
        Ok(out.scale(inv as f64)?.reshape(grad.dims())?)
    })
}

pub struct TernGrad {
    /// The key of this rank's draws (`methods::draws::method_key`).
    key: u64,
    step: u64,
    sizes: Vec<usize>,
    float_last: usize,
}

impl TernGrad {
    pub fn new(seed: u64, rank: usize, float_last: usize) -> Self {
        TernGrad {
            key: method_key(seed, 3, rank),
            step: 0,
            sizes: Vec::new(),
            float_last,
        }
    }
    fn sent_dense(&self, index: usize) -> bool {
        index >= self.sizes.len() - self.float_last
    }
}

impl Method for TernGrad {
    fn name(&self) -> &'static str {
        "terngrad"
    }
    fn describe(&self) -> String {
        format!("terngrad(float_last={})", self.float_last)
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        if self.float_last > params.len() {
            return Err(CompressError::Config(format!(
                "terngrad float_last={}: the model has only {} parameter tensors",
                self.float_last,
                params.len()
            )));
        }
        self.sizes = params.iter().map(|p| p.numel()).collect();
        Ok(())
    }
    fn begin_step(&mut self, info: StepInfo) {
        self.step = info.step;
    }
    fn exchange(&mut self, x: HostExchange<'_>) -> Result<Update> {
        let (comm, index, grad) = (x.comm, x.index, x.grad);
        let n = check_len("terngrad", index, self.sizes.get(index).copied(), &[grad])?;
        if self.sent_dense(index) {
            return dense_average(comm, grad);
        }
        let mut draws = Counter::for_exchange(self.key, self.step, index);
        let mut m = Meter::new(n);
        let (message, nonzeros) = m.compress(|| encode(grad, &mut draws))?;
        m.stats.sent_values = nonzeros;
        let out = allgather_average(comm, &mut m, "terngrad", index, n, &message, |b, out| {
            decode_add(b, out)
        })?;
        Ok(m.update(out, UpdateKind::Gradient))
    }
    /// Nothing to move: the draws are counter-based, and TernGrad keeps no other state.
    fn place(&mut self, _device: Device) -> Result<()> {
        Ok(())
    }
    fn exchange_tensor(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        let (group, index, grad) = (x.comm, x.index, x.grad);
        let n = check_numel("terngrad", index, self.sizes.get(index).copied(), grad)?;
        if self.sent_dense(index) {
            return dense_average_tensor(group, grad);
        }
        let key = Counter::for_exchange(self.key, self.step, index).key;
        let mut m = Meter::new(n);
        let values = tensor::no_grad(|| exchange_on_tensors(group, &mut m, index, grad, key))?;
        Ok(m.tensor_update(values, UpdateKind::Gradient))
    }
    // Counter-based draws: nothing to save (the default `state`).
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        crate::methods::load_drawing_state("terngrad", state)
    }
}
