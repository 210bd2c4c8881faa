//! Launch code for the quantizing compressors' kernels (kernels/quantize.cu): TernGrad's
//! codes, QSGD's bucket scales and levels, and the packing of small codes. The
//! tensor-level side, with the CPU reference, is `crate::quantize`. Nothing here reads
//! back: every launch stays queued on the compute stream.

use super::device::CudaDevice;
use super::launch::launch;
use crate::Result;
use cudarc::driver::{CudaSlice, CudaView};

pub(crate) fn terngrad_codes(
    d: &CudaDevice,
    x: &CudaView<'_, f32>,
    n: usize,
    s: f32,
    key: u64,
) -> Result<CudaSlice<u32>> {
    d.output::<u32>(n, |out| {
        let n64 = n as u64;
        // SAFETY: x holds n values, out n codes.
        unsafe { launch!(d, "terngrad_codes", CudaDevice::cfg(n); x, &n64, &s, &key, out) }
    })
}

/// One scale per bucket of `bucket` values (mode 0: 2-norm, 1: largest magnitude).
pub(crate) fn bucket_scales(
    d: &CudaDevice,
    x: &CudaView<'_, f32>,
    n: usize,
    bucket: usize,
    mode: i32,
) -> Result<CudaSlice<f64>> {
    let buckets = n.div_ceil(bucket);
    d.output::<f64>(buckets, |out| {
        let (n64, d64) = (n as u64, bucket as u64);
        // SAFETY: x holds n values; out one per bucket of ⌈n / bucket⌉.
        unsafe { launch!(d, "bucket_scales", CudaDevice::cfg(buckets); x, &n64, &d64, &mode, out) }
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn qsgd_levels(
    d: &CudaDevice,
    x: &CudaView<'_, f32>,
    n: usize,
    bucket: usize,
    s: u32,
    scales: &CudaView<'_, f64>,
    key: u64,
) -> Result<CudaSlice<f32>> {
    d.output::<f32>(n, |out| {
        let (n64, d64) = (n as u64, bucket as u64);
        // SAFETY: x holds n values, scales one per bucket (checked by the caller), out n.
        unsafe {
            launch!(d, "qsgd_levels", CudaDevice::cfg(n); x, &n64, &d64, &s, scales, &key, out)
        }
    })
}

pub(crate) fn pack_codes(
    d: &CudaDevice,
    codes: &CudaView<'_, u32>,
    n: usize,
    bits: u32,
    words: usize,
) -> Result<CudaSlice<u32>> {
    d.output::<u32>(words, |out| {
        let (n64, w64) = (n as u64, words as u64);
        // SAFETY: codes holds n values; words = ⌈n·bits / 32⌉ (the caller's arithmetic).
        unsafe { launch!(d, "pack_codes", CudaDevice::cfg(words); codes, &n64, &bits, &w64, out) }
    })
}

pub(crate) fn unpack_codes(
    d: &CudaDevice,
    words: &CudaView<'_, u32>,
    n: usize,
    bits: u32,
) -> Result<CudaSlice<u32>> {
    d.output::<u32>(n, |out| {
        let n64 = n as u64;
        // SAFETY: words holds ⌈n·bits / 32⌉ words (checked by the caller), out n codes.
        unsafe { launch!(d, "unpack_codes", CudaDevice::cfg(n); words, &n64, &bits, out) }
    })
}

/// Per bucket of `bucket` values: (Σ x ≥ 0, count, Σ x < 0, count), 4 doubles a bucket.
pub(crate) fn sign_sums(
    d: &CudaDevice,
    x: &CudaView<'_, f32>,
    n: usize,
    bucket: usize,
    chunk: usize,
) -> Result<CudaSlice<f64>> {
    let buckets = n.div_ceil(bucket);
    let chunks = bucket.div_ceil(chunk);
    let mut partial = d.alloc::<f64>(4 * buckets * chunks)?;
    d.output::<f64>(4 * buckets, |out| {
        let (n64, d64, c64, b64) = (n as u64, bucket as u64, chunks as u64, buckets as u64);
        // SAFETY: x holds n values; partial 4 per (bucket, chunk).
        unsafe {
            launch!(d, "sign_sums_partial", CudaDevice::cfg(buckets * chunks); x, &n64, &d64, &c64,
                &b64, &mut partial)
        }?;
        // SAFETY: partial holds 4·buckets·chunks values, out 4 per bucket.
        unsafe {
            launch!(d, "sign_sums_final", CudaDevice::cfg(buckets); &partial, &c64, &b64, out)
        }
    })
}

pub(crate) fn two_level_values(
    d: &CudaDevice,
    codes: &CudaView<'_, u32>,
    means: &CudaView<'_, f32>,
    n: usize,
    bucket: usize,
) -> Result<CudaSlice<f32>> {
    d.output::<f32>(n, |out| {
        let (n64, d64) = (n as u64, bucket as u64);
        // SAFETY: codes holds n values, means 2 per bucket (checked by the caller).
        unsafe { launch!(d, "two_level_values", CudaDevice::cfg(n); codes, means, &n64, &d64, out) }
    })
}
