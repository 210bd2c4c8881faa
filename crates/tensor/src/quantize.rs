//! Quantization on tensors, on the device where the gradient lives: the primitives the
//! quantizing compressors (QSGD, TernGrad, 1-bit SGD in crates/compress) are built from,
//! each with its CPU implementation beside the CUDA one (kernels/quantize.cu), which it
//! must match bit for bit.
//!
//! Random draws are counter-based: draw `i` of a stream is a hash of the stream's key and
//! `i` ([`counter_uniform`]), so the GPU's thread for element i and the CPU's loop make
//! the same draw without sharing a generator's state, and a method keys its streams by
//! seed, rank, step and parameter ([`counter_key`]) with nothing to checkpoint.
//!
//! Like `crate::sparsify`, these take contiguous F32 (codes: U32) tensors as flat vectors
//! and are not recorded by autograd; they know nothing of wire formats or collectives,
//! except the one bit order [`pack_codes`] writes, which is the codecs' (most significant
//! bit first).

use crate::cuda::{self, raw};
use crate::sparsify::{check_f32, check_u32_len, cuda_device, with_cpu};
use crate::storage::Storage;
use crate::{DType, Device, Error, Result, Tensor};

/// SplitMix64's finalizer (kernels/quantize.cu `mix64`).
#[inline]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A stream key from its parts (say seed, rank, step, parameter), each mixed in turn, so
/// that streams that differ in any part are unrelated.
pub fn counter_key(parts: &[u64]) -> u64 {
    parts
        .iter()
        .fold(0x6A09_E667_F3BC_C908, |k, &p| mix64(k ^ mix64(p)))
}

/// The step between the hash inputs of consecutive draws (2⁶⁴/φ, SplitMix64's).
pub const COUNTER_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// Draw `i` of stream `key`: 24 random bits over 2^24, exact in f32, in [0, 1). The same
/// on the CPU and in the kernels.
pub fn counter_uniform(key: u64, i: u64) -> f32 {
    uniform_of(key.wrapping_add(i.wrapping_add(1).wrapping_mul(COUNTER_GAMMA)))
}

/// The draw whose hash input is `z` (`key + (i + 1)·γ` for draw i): for generators that
/// keep the input as a running sum.
#[inline]
pub fn uniform_of(z: u64) -> f32 {
    (mix64(z) >> 40) as f32 * (1.0 / 16_777_216.0)
}

/// TernGrad's code of `x` for scale `s` (> 0) and draw `u`: 1 (+s) or 2 (−s) with
/// probability |x|/s, else 0.
pub fn terngrad_code(x: f32, s: f32, u: f32) -> u32 {
    if s > 0.0 && u < x.abs() / s {
        if x < 0.0 {
            2
        } else {
            1
        }
    } else {
        0
    }
}

/// [`terngrad_code`] of every element with draw i of stream `key`: U32 codes `[n]` on
/// `x`'s device.
pub fn terngrad_codes(x: &Tensor, s: f32, key: u64) -> Result<Tensor> {
    const OP: &str = "quantize::terngrad_codes";
    check_f32(OP, x)?;
    let n = x.elem_count();
    if x.device() == Device::Cpu {
        let codes = with_cpu(OP, x, |v| {
            v.iter()
                .enumerate()
                .map(|(i, &x)| terngrad_code(x, s, counter_uniform(key, i as u64)))
                .collect::<Vec<u32>>()
        })?;
        return Tensor::from_vec(codes, n, Device::Cpu);
    }
    let d = cuda_device(x.device())?;
    let out = raw::with_f32_view(x, |v, _| cuda::quantize::terngrad_codes(&d, v, n, s, key))??;
    Ok(cuda_tensor(out, n, &d))
}

/// What a bucket is scaled by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BucketScale {
    /// ‖v‖₂, the squares added in index order in f64.
    L2,
    /// max |vᵢ|.
    Max,
}

/// One bucket's scale, as the kernel computes it. A NaN propagates into the max
/// (on the CPU; the device's callers refuse non-finite input first).
pub fn bucket_scale(v: &[f32], scale: BucketScale) -> f64 {
    match scale {
        BucketScale::L2 => v
            .iter()
            .map(|&x| (x as f64) * (x as f64))
            .sum::<f64>()
            .sqrt(),
        BucketScale::Max => v.iter().fold(0f64, |m, &x| {
            let a = (x as f64).abs();
            if a > m || a.is_nan() {
                a
            } else {
                m
            }
        }),
    }
}

/// QSGD's level of `x` in a bucket of scale `norm` (> 0) with `s` levels and draw `u`:
/// r = min(s·|x| / norm, s), ⌊r⌋ rounded up when u < r − ⌊r⌋.
pub fn qsgd_level(x: f32, s: u32, norm: f64, u: f32) -> u32 {
    let r = (s as f64 * (x.abs() as f64) / norm).min(s as f64);
    let floor = r.floor();
    floor as u32 + ((u as f64) < r - floor) as u32
}

/// QSGD's quantization of a whole flat tensor on its device, in buckets of `bucket`
/// values (the last may be shorter): each bucket's scale (returned on the host) and every
/// element's level, signed as the element (F32 `[n]` on `x`'s device; 0 in a bucket of
/// scale 0), element i drawing draw i of stream `key`. The input must be finite (the
/// device's scales do not follow the CPU's NaN rule).
pub fn qsgd_quantize(
    x: &Tensor,
    bucket: usize,
    s: u32,
    scale: BucketScale,
    key: u64,
) -> Result<(Vec<f64>, Tensor)> {
    const OP: &str = "quantize::qsgd_quantize";
    check_f32(OP, x)?;
    if bucket == 0 {
        return Err(Error::msg(format!("{OP}: a bucket of 0 values")));
    }
    let n = x.elem_count();
    if x.device() == Device::Cpu {
        let (scales, levels) = with_cpu(OP, x, |v| {
            let scales: Vec<f64> = v.chunks(bucket).map(|c| bucket_scale(c, scale)).collect();
            let levels: Vec<f32> = v
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    let norm = scales[i / bucket];
                    let level = if norm > 0.0 {
                        qsgd_level(x, s, norm, counter_uniform(key, i as u64)) as f32
                    } else {
                        0.0
                    };
                    if x < 0.0 {
                        -level
                    } else {
                        level
                    }
                })
                .collect();
            (scales, levels)
        })?;
        return Ok((scales, Tensor::from_vec(levels, n, Device::Cpu)?));
    }
    let d = cuda_device(x.device())?;
    let mode = match scale {
        BucketScale::L2 => 0,
        BucketScale::Max => 1,
    };
    let (scales, levels) = raw::with_f32_view(x, |v, _| -> Result<_> {
        let scales = cuda::quantize::bucket_scales(&d, v, n, bucket, mode)?;
        let levels = cuda::quantize::qsgd_levels(&d, v, n, bucket, s, &scales.as_view(), key)?;
        Ok((d.download(&scales, n.div_ceil(bucket))?, levels))
    })??;
    Ok((scales, cuda_tensor(levels, n, &d)))
}

/// Values per chunk of [`sign_sums`]'s first pass (kernels/quantize.cu `SIGN_CHUNK`).
pub const SIGN_CHUNK: usize = 1024;

/// One bucket's (Σ x ≥ 0, their count, Σ x < 0, their count) in f64, added as the kernel
/// adds them: each chunk of [`SIGN_CHUNK`] values in index order from 0, then the chunks'
/// sums in order from 0. 1-bit SGD's two means come from these.
pub fn sign_sums_slice(v: &[f32]) -> [f64; 4] {
    let mut acc = [0f64; 4];
    for chunk in v.chunks(SIGN_CHUNK) {
        let mut part = [0f64; 4];
        for &x in chunk {
            if x >= 0.0 {
                part[0] += x as f64;
                part[1] += 1.0;
            } else {
                part[2] += x as f64;
                part[3] += 1.0;
            }
        }
        for k in 0..4 {
            acc[k] += part[k];
        }
    }
    acc
}

/// [`sign_sums_slice`] of every bucket of `bucket` values of a flat tensor (the last may
/// be shorter), computed on its device and returned on the host.
pub fn sign_sums(x: &Tensor, bucket: usize) -> Result<Vec<[f64; 4]>> {
    const OP: &str = "quantize::sign_sums";
    check_f32(OP, x)?;
    if bucket == 0 {
        return Err(Error::msg(format!("{OP}: a bucket of 0 values")));
    }
    if x.device() == Device::Cpu {
        return with_cpu(OP, x, |v| v.chunks(bucket).map(sign_sums_slice).collect());
    }
    let d = cuda_device(x.device())?;
    let n = x.elem_count();
    let flat = raw::with_f32_view(x, |v, _| -> Result<Vec<f64>> {
        let sums = cuda::quantize::sign_sums(&d, v, n, bucket, SIGN_CHUNK)?;
        d.download(&sums, 4 * n.div_ceil(bucket))
    })??;
    Ok(flat
        .chunks_exact(4)
        .map(|c| [c[0], c[1], c[2], c[3]])
        .collect())
}

/// A bucketed tensor rebuilt from its U32 codes and two values per bucket: element i is
/// `means[2b]` where its code is nonzero, else `means[2b + 1]`, for its bucket b = i /
/// `bucket` (`means`: F32 `[2·⌈n / bucket⌉]` on the codes' device). F32 `[n]`.
pub fn two_level_values(codes: &Tensor, means: &Tensor, bucket: usize) -> Result<Tensor> {
    const OP: &str = "quantize::two_level_values";
    let codes = u32_input(OP, codes)?;
    let means = means.flatten_all()?.contiguous()?;
    check_f32(OP, &means)?;
    let n = codes.elem_count();
    if bucket == 0 || means.elem_count() != 2 * n.div_ceil(bucket) {
        return Err(Error::msg(format!(
            "{OP}: {} means for {n} values in buckets of {bucket}",
            means.elem_count()
        )));
    }
    if codes.device() != means.device() {
        return Err(Error::msg(format!(
            "{OP}: codes on {:?}, means on {:?}",
            codes.device(),
            means.device()
        )));
    }
    if codes.device() == Device::Cpu {
        let m = means.to_vec::<f32>()?;
        let out: Vec<f32> = codes
            .to_vec::<u32>()?
            .iter()
            .enumerate()
            .map(|(i, &c)| m[2 * (i / bucket) + usize::from(c == 0)])
            .collect();
        return Tensor::from_vec(out, n, Device::Cpu);
    }
    let d = cuda_device(codes.device())?;
    let out = raw::with_u32_view(&codes, |c| {
        raw::with_f32_view(&means, |m, _| {
            cuda::quantize::two_level_values(&d, c, m, n, bucket)
        })
    })???;
    Ok(cuda_tensor(out, n, &d))
}

/// Words of 32 bits that `n` codes of `bits` bits fill.
pub fn packed_words(n: usize, bits: u32) -> usize {
    (n * bits as usize).div_ceil(32)
}

fn check_bits(op: &'static str, bits: u32) -> Result<()> {
    if matches!(bits, 1 | 2 | 4 | 8) {
        Ok(())
    } else {
        Err(Error::msg(format!(
            "{op}: codes of {bits} bits (1, 2, 4 or 8 divide a byte)"
        )))
    }
}

/// Where code `j`'s bits sit in its word (see [`pack_codes`]).
fn code_shift(j: usize, bits: u32) -> u32 {
    let at = (j % (32 / bits as usize)) as u32 * bits;
    8 * (at / 8) + (8 - bits - at % 8)
}

/// The low `bits` bits (1, 2, 4 or 8) of each U32 code as a byte stream, most significant
/// bit first (the codecs' `BitWriter` order), in U32 words on the codes' device: word w
/// holds bytes 4w to 4w + 3, the first in its low 8 bits (so the words' little-endian
/// bytes are the stream), zeros past the last code. `[packed_words(n, bits)]`.
pub fn pack_codes(codes: &Tensor, bits: u32) -> Result<Tensor> {
    const OP: &str = "quantize::pack_codes";
    check_bits(OP, bits)?;
    let codes = u32_input(OP, codes)?;
    let n = codes.elem_count();
    let words = packed_words(n, bits);
    if codes.device() == Device::Cpu {
        let mask = (1u32 << bits) - 1;
        let mut out = vec![0u32; words];
        for (j, c) in codes.to_vec::<u32>()?.into_iter().enumerate() {
            out[j / (32 / bits as usize)] |= (c & mask) << code_shift(j, bits);
        }
        return Tensor::from_vec(out, words, Device::Cpu);
    }
    let d = cuda_device(codes.device())?;
    let out = raw::with_u32_view(&codes, |v| {
        cuda::quantize::pack_codes(&d, v, n, bits, words)
    })??;
    Ok(cuda_tensor(out, words, &d))
}

/// The `n` codes of `bits` bits that [`pack_codes`] packed into `words` (which must hold
/// exactly `packed_words(n, bits)` words): U32 `[n]` on their device.
pub fn unpack_codes(words: &Tensor, bits: u32, n: usize) -> Result<Tensor> {
    const OP: &str = "quantize::unpack_codes";
    check_bits(OP, bits)?;
    let words = u32_input(OP, words)?;
    if words.elem_count() != packed_words(n, bits) {
        return Err(Error::msg(format!(
            "{OP}: {} words for {n} codes of {bits} bits (want {})",
            words.elem_count(),
            packed_words(n, bits)
        )));
    }
    if words.device() == Device::Cpu {
        let w = words.to_vec::<u32>()?;
        let mask = (1u32 << bits) - 1;
        let out: Vec<u32> = (0..n)
            .map(|j| (w[j / (32 / bits as usize)] >> code_shift(j, bits)) & mask)
            .collect();
        return Tensor::from_vec(out, n, Device::Cpu);
    }
    let d = cuda_device(words.device())?;
    let out = raw::with_u32_view(&words, |v| cuda::quantize::unpack_codes(&d, v, n, bits))??;
    Ok(cuda_tensor(out, n, &d))
}

/// `t` as a contiguous U32 tensor of at most 2^32 − 1 elements.
fn u32_input(op: &'static str, t: &Tensor) -> Result<Tensor> {
    if t.dtype() != DType::U32 {
        return Err(Error::msg(format!(
            "{op}: expected U32, got {:?}",
            t.dtype()
        )));
    }
    check_u32_len(op, t.elem_count())?;
    t.flatten_all()?.contiguous()
}

fn cuda_tensor<T: cuda::GpuType>(
    s: cudarc::driver::CudaSlice<T>,
    n: usize,
    d: &std::sync::Arc<cuda::CudaDevice>,
) -> Tensor {
    Tensor::from_storage(Storage::Cuda(cuda::CudaStorage::new(s, n, d)), n, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_uniform_and_keyed() {
        let key = counter_key(&[1, 0, 5, 3]);
        let n = 100_000;
        let mean = (0..n).map(|i| counter_uniform(key, i) as f64).sum::<f64>() / n as f64;
        // The mean of n uniforms has standard error 1/√(12n) ≈ 0.0009.
        assert!((mean - 0.5).abs() < 0.005, "mean {mean}");
        assert!((0..n).all(|i| (0.0..1.0).contains(&counter_uniform(key, i))));
        assert_ne!(
            counter_uniform(key, 0),
            counter_uniform(counter_key(&[1, 0, 5, 4]), 0)
        );
        assert_ne!(counter_key(&[1, 2]), counter_key(&[2, 1]));
    }

    #[test]
    fn codes_pack_most_significant_bit_first() {
        // 2-bit codes 1, 2, 3, 0 | 1: byte 0 = 01 10 11 00, byte 1 = 01 000000.
        let codes = Tensor::from_vec(vec![1u32, 2, 3, 0, 1], 5, Device::Cpu).unwrap();
        let w = pack_codes(&codes, 2).unwrap().to_vec::<u32>().unwrap();
        assert_eq!(w, vec![0b0110_1100 | (0b0100_0000 << 8)]);
        for bits in [1u32, 2, 4, 8] {
            let n = 77;
            let c: Vec<u32> = (0..n as u32).map(|i| (i * 7 + 3) % (1 << bits)).collect();
            let t = Tensor::from_vec(c.clone(), n, Device::Cpu).unwrap();
            let packed = pack_codes(&t, bits).unwrap();
            assert_eq!(packed.elem_count(), packed_words(n, bits));
            let back = unpack_codes(&packed, bits, n)
                .unwrap()
                .to_vec::<u32>()
                .unwrap();
            assert_eq!(back, c, "{bits} bits");
        }
        assert!(pack_codes(&codes, 3).is_err());
        assert!(unpack_codes(
            &Tensor::from_vec(vec![0u32; 2], 2, Device::Cpu).unwrap(),
            2,
            5
        )
        .is_err());
    }
}
