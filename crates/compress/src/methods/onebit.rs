//! 1-bit SGD with error feedback (Seide et al., a baseline of papers 000 and 004). Per
//! bucket of values (the whole tensor by default), `a = g + e` is sent as one bit per
//! value (non-negative or not) and two reconstruction values, the means of the
//! non-negative and of the negative entries; `e = a − q` carries the quantization error
//! into the next step. Wire: the 2 means per bucket as f32, then the sign bits.
//! Messages are allgathered, decoded and averaged. (Seide et al. share means per matrix
//! column; a bucket of the column length gives that for row-major [out, in] weights.)

use crate::codec::{BitReader, BitWriter, CodecError};
use crate::exchange::{allgather_average, check_len, Meter};
use crate::method::{Method, ParamSpec, StateTensors, Update, UpdateKind};
use crate::{CompressError, Result};
use comm::Communicator;

fn bucket_len(bucket: usize, n: usize) -> usize {
    if bucket == 0 {
        n.max(1)
    } else {
        bucket
    }
}

/// Quantizes `a` in place into its reconstruction (so the caller's `a − q` is the error)
/// and returns the message.
pub fn encode(a: &[f32], bucket: usize) -> (Vec<u8>, Vec<f32>) {
    let d = bucket_len(bucket, a.len());
    let mut means = Vec::new();
    let mut q = vec![0f32; a.len()];
    let mut w = BitWriter::new();
    for (chunk, qc) in a.chunks(d).zip(q.chunks_mut(d)) {
        let (mut sp, mut np, mut sn, mut nn) = (0f64, 0usize, 0f64, 0usize);
        for &x in chunk {
            if x >= 0.0 {
                sp += x as f64;
                np += 1;
            } else {
                sn += x as f64;
                nn += 1;
            }
        }
        let mp = if np > 0 { (sp / np as f64) as f32 } else { 0.0 };
        let mn = if nn > 0 { (sn / nn as f64) as f32 } else { 0.0 };
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
    error: Vec<Vec<f32>>,
}

impl OneBit {
    pub fn new(bucket: usize) -> Self {
        OneBit {
            bucket,
            error: Vec::new(),
        }
    }
}

impl Method for OneBit {
    fn name(&self) -> &'static str {
        "onebit"
    }
    fn describe(&self) -> String {
        format!("onebit(bucket={})", self.bucket)
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.error = params.iter().map(|p| vec![0.0; p.numel()]).collect();
        Ok(())
    }
    fn exchange(
        &mut self,
        comm: &mut Communicator,
        index: usize,
        _weights: &[f32],
        grad: &[f32],
    ) -> Result<Update> {
        let n = check_len(
            "onebit",
            index,
            self.error.get(index).map(Vec::len),
            &[grad],
        )?;
        let bucket = self.bucket;
        let e = &mut self.error[index];
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
                return Err(CompressError::Usage(format!(
                    "onebit: parameter {index}: the gradient holds inf or NaN (a bucket's mean is {}; the training diverged? lower --lr)",
                    f32::from_le_bytes([c[0], c[1], c[2], c[3]])
                )));
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
        Ok(crate::methods::named_state("error", &self.error))
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        crate::methods::load_named("onebit", state, &mut [("error", &mut self.error)])
    }
}
