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
use crate::exchange::{allgather_average, check_len, dense_average, Meter};
use crate::method::{Method, ParamSpec, StateTensors, Update, UpdateKind};
use crate::Result;
use comm::Communicator;
use tensor::Rng;

/// The message of `g`; an error if `g` holds inf or NaN (the scale would be inf, or a
/// NaN would silently become 0: `f32::max` skips NaN).
pub fn encode(g: &[f32], rng: &mut Rng) -> Result<(Vec<u8>, usize)> {
    let diverged = || {
        crate::CompressError::Usage(
            "terngrad: the gradient holds inf or NaN (the training diverged? lower --lr)".into(),
        )
    };
    // max|g| over the bit patterns of |g|: for non-negative floats they order as the
    // values do, and inf and every NaN lie above all finite ones, so one integer max
    // (which vectorizes, where a finiteness flag beside a float max cost 41 % of the
    // encoding) gives the scale and catches both.
    let top = g.iter().fold(0u32, |m, x| m.max(x.to_bits() & 0x7fff_ffff));
    if top >= f32::INFINITY.to_bits() {
        return Err(diverged());
    }
    let s = f32::from_bits(top);
    let mut w = BitWriter::new();
    w.bits(s.to_bits() as u64, 32);
    let mut nonzeros = 0;
    for &x in g {
        let keep = s > 0.0 && rng.uniform() < (x.abs() / s) as f64;
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

pub struct TernGrad {
    rng: Rng,
    sizes: Vec<usize>,
    /// How many of the last parameter tensors travel as f32.
    float_last: usize,
}

impl TernGrad {
    pub fn new(rng: Rng, float_last: usize) -> Self {
        TernGrad {
            rng,
            sizes: Vec::new(),
            float_last,
        }
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
            return Err(crate::CompressError::Config(format!(
                "terngrad float_last={}: the model has only {} parameter tensors",
                self.float_last,
                params.len()
            )));
        }
        self.sizes = params.iter().map(|p| p.numel()).collect();
        Ok(())
    }
    fn exchange(
        &mut self,
        comm: &mut Communicator,
        index: usize,
        _weights: &[f32],
        grad: &[f32],
    ) -> Result<Update> {
        let n = check_len("terngrad", index, self.sizes.get(index).copied(), &[grad])?;
        if index >= self.sizes.len() - self.float_last {
            return dense_average(comm, grad);
        }
        let rng = &mut self.rng;
        let mut m = Meter::new(n);
        let (message, nonzeros) = m.compress(|| encode(grad, rng))?;
        m.stats.sent_values = nonzeros;
        let out = allgather_average(comm, &mut m, "terngrad", index, n, &message, |b, out| {
            decode_add(b, out)
        })?;
        Ok(m.update(out, UpdateKind::Gradient))
    }
    fn state(&self) -> Result<StateTensors> {
        Ok(vec![(
            "rng".into(),
            crate::methods::rng_to_state(&self.rng),
        )])
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        let (rng, rest) = crate::methods::split_rng("terngrad", state)?;
        self.rng = rng;
        crate::methods::load_named("terngrad", &rest, &mut [])
    }
}
