//! 1-bit SGD with error feedback (Seide et al., a baseline of papers 000 and 004). Per
//! bucket of values (the whole tensor by default), `a = g + e` is sent as one bit per
//! value (non-negative or not) and two reconstruction values, the means of the
//! non-negative and of the negative entries; `e = a − q` carries the quantization error
//! into the next step. Wire: the 2 means per bucket as f32, then the sign bits.
//! Messages are allgathered, decoded and averaged. (Seide et al. share means per matrix
//! column; a bucket of the column length gives that for row-major [out, in] weights.)
//!
//! The means' sums are taken in a fixed order that a GPU can share: per chunk of 1,024
//! values, then across chunks (`tensor::quantize::sign_sums_slice`). On tensors: the
//! error feedback on the device, the sums there (`quantize::sign_sums`: only 4 doubles a
//! bucket are read back, to form the means as on slices), the sign bits packed there, the
//! messages allgathered as equal-size U32 words (the means' bits, then the signs) and
//! decoded rank by rank on the device. The same update and error as on slices, bit for
//! bit (tests/exchange_tensor.rs).

use crate::codec::{BitReader, BitWriter, CodecError};
use crate::exchange::{allgather_average, Meter};
use crate::method::{
    HostExchange, Method, ParamSpec, StateTensors, TensorExchange, TensorUpdate, Update, UpdateKind,
};
use crate::methods::PerParam;
use crate::{CompressError, Result};
use comm::ProcessGroup;
use tensor::quantize;
use tensor::{DType, Device, Tensor};

fn bucket_len(bucket: usize, n: usize) -> usize {
    if bucket == 0 {
        n.max(1)
    } else {
        bucket
    }
}

/// A bucket's two reconstruction values from its (Σ x ≥ 0, count, Σ x < 0, count): the
/// mean of each side, 0 for an empty side.
fn means_of([sp, np, sn, nn]: [f64; 4]) -> [f32; 2] {
    let mean = |s: f64, c: f64| if c > 0.0 { (s / c) as f32 } else { 0.0 };
    [mean(sp, np), mean(sn, nn)]
}

/// The sender's error for a mean that is not finite.
fn diverged(index: usize, mean: f32) -> CompressError {
    CompressError::Usage(format!(
        "onebit: parameter {index}: the gradient holds inf or NaN (a bucket's mean is {mean}; the training diverged? lower --lr)"
    ))
}

/// Quantizes `a` in place into its reconstruction (so the caller's `a − q` is the error)
/// and returns the message.
pub fn encode(a: &[f32], bucket: usize) -> (Vec<u8>, Vec<f32>) {
    let d = bucket_len(bucket, a.len());
    let mut means = Vec::new();
    let mut q = vec![0f32; a.len()];
    let mut w = BitWriter::new();
    for (chunk, qc) in a.chunks(d).zip(q.chunks_mut(d)) {
        let [mp, mn] = means_of(quantize::sign_sums_slice(chunk));
        means.extend(mp.to_le_bytes());
        means.extend(mn.to_le_bytes());
        for (&x, qv) in chunk.iter().zip(qc.iter_mut()) {
            w.bit(x >= 0.0);
            *qv = if x >= 0.0 { mp } else { mn };
        }
    }
    means.extend(w.finish());
    (means, q)
}

pub fn decode_add(
    bytes: &[u8],
    bucket: usize,
    out: &mut [f32],
) -> std::result::Result<(), CodecError> {
    let n = out.len();
    let d = bucket_len(bucket, n);
    let buckets = n.div_ceil(d);
    if bytes.len() != 8 * buckets + n.div_ceil(8) {
        return Err(CodecError::Invalid(format!(
            "{} bytes for a 1-bit tensor of {n}",
            bytes.len()
        )));
    }
    let mean = |k: usize| {
        f32::from_le_bytes([
            bytes[4 * k],
            bytes[4 * k + 1],
            bytes[4 * k + 2],
            bytes[4 * k + 3],
        ])
    };
    let mut r = BitReader::new(&bytes[8 * buckets..]);
    for (b, chunk) in out.chunks_mut(d).enumerate() {
        let (mp, mn) = (mean(2 * b), mean(2 * b + 1));
        if !mp.is_finite() || !mn.is_finite() {
            return Err(CodecError::Invalid(
                "a reconstruction value is not finite".into(),
            ));
        }
        for o in chunk.iter_mut() {
            *o += if r.bit()? { mp } else { mn };
        }
    }
    Ok(())
}

pub struct OneBit {
    bucket: usize,
    /// The error feedback per parameter, on the host or (once placed) on the device.
    error: PerParam,
}

impl OneBit {
    pub fn new(bucket: usize) -> Self {
        OneBit {
            bucket,
            error: PerParam::new("error"),
        }
    }
}

/// 1-bit SGD's exchange on tensors (see the module comment) with the error `e` of the
/// parameter: the averaged update, flat, on `e`'s device.
fn exchange_on_tensors(
    group: &mut dyn ProcessGroup,
    m: &mut Meter,
    index: usize,
    e: &Tensor,
    grad: &Tensor,
    bucket: usize,
) -> Result<Tensor> {
    let n = e.elem_count();
    let device = e.device();
    let d = bucket_len(bucket, n);
    let nb = n.div_ceil(d);
    let words = quantize::packed_words(n, 1);
    let message = m.compress(|| -> Result<Tensor> {
        e.assign(&e.add(&grad.flatten_all()?)?)?;
        let means: Vec<f32> = quantize::sign_sums(e, d)?
            .into_iter()
            .flat_map(means_of)
            .collect();
        if let Some(&bad) = means.iter().find(|v| !v.is_finite()) {
            return Err(diverged(index, bad));
        }
        let zeros = Tensor::zeros(n, DType::F32, device)?;
        let codes = e.ge(&zeros)?.to_dtype(DType::U32)?;
        let means_t = Tensor::from_vec(means.clone(), 2 * nb, device)?;
        e.assign(&e.sub(&quantize::two_level_values(&codes, &means_t, d)?)?)?;
        let bits: Vec<u32> = means.iter().map(|v| v.to_bits()).collect();
        let head = Tensor::from_vec(bits, 2 * nb, device)?;
        Ok(Tensor::cat(&[head, quantize::pack_codes(&codes, 1)?], 0)?)
    })?;
    m.stats.sent_values = n;
    m.stats.message_bytes = 8 * nb + n.div_ceil(8);
    let all = m.comm(|| group.allgather(&message))?;
    let world = all.dims()[0];
    m.decompress(|| -> Result<Tensor> {
        let heads = all.narrow(1, 0, 2 * nb)?.contiguous()?.to_vec::<u32>()?;
        let mut out = Tensor::zeros(n, DType::F32, device)?;
        for peer in 0..world {
            let means: Vec<f32> = heads[2 * nb * peer..2 * nb * (peer + 1)]
                .iter()
                .map(|&w| f32::from_bits(w))
                .collect();
            if means.iter().any(|v| !v.is_finite()) {
                return Err(CompressError::Decode {
                    method: "onebit",
                    peer,
                    param: index,
                    source: CodecError::Invalid("a reconstruction value is not finite".into()),
                });
            }
            let signs = all.narrow(0, peer, 1)?.narrow(1, 2 * nb, words)?;
            let codes = quantize::unpack_codes(&signs, 1, n)?;
            let means = Tensor::from_vec(means, 2 * nb, device)?;
            // The host's `out += mp` or `out += mn`, value by value.
            out = out.add(&quantize::two_level_values(&codes, &means, d)?)?;
        }
        let inv = 1.0 / world as f32;
        Ok(out.scale(inv as f64)?)
    })
}

impl Method for OneBit {
    fn name(&self) -> &'static str {
        "onebit"
    }
    fn describe(&self) -> String {
        format!("onebit(bucket={})", self.bucket)
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.error.init(params);
        Ok(())
    }
    fn place(&mut self, device: Device) -> Result<()> {
        self.error.place(device)
    }
    fn exchange_tensor(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        let (group, index, grad) = (x.comm, x.index, x.grad);
        let (e, n) = self
            .error
            .on_device("onebit")?
            .for_grad("onebit", index, grad)?;
        let mut m = Meter::new(n);
        let out =
            tensor::no_grad(|| exchange_on_tensors(group, &mut m, index, e, grad, self.bucket))?;
        Ok(m.tensor_update(out.reshape(grad.dims())?, UpdateKind::Gradient))
    }
    fn exchange(&mut self, x: HostExchange<'_>) -> Result<Update> {
        let (comm, index, grad) = (x.comm, x.index, x.grad);
        let bucket = self.bucket;
        let (e, n) = self.error.host_for("onebit", index, grad)?;
        let mut m = Meter::new(n);
        let message = m.compress(|| {
            e.iter_mut().zip(grad).for_each(|(e, g)| *e += g);
            let (message, q) = encode(e, bucket);
            // A bucket's mean is inf or NaN exactly when one of its values is: the sender
            // says so (every peer would otherwise reject its message as malformed).
            let buckets = n.div_ceil(bucket_len(bucket, n));
            if let Some(c) = message[..8 * buckets]
                .chunks_exact(4)
                .find(|c| !f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite())
            {
                return Err(diverged(
                    index,
                    f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                ));
            }
            e.iter_mut().zip(&q).for_each(|(e, q)| *e -= q);
            Ok(message)
        })?;
        m.stats.sent_values = n;
        let out = allgather_average(comm, &mut m, "onebit", index, n, &message, |b, out| {
            decode_add(b, bucket, out)
        })?;
        Ok(m.update(out, UpdateKind::Gradient))
    }
    fn state(&self) -> Result<StateTensors> {
        self.error.state()
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        self.error.load("onebit", state)
    }
}
