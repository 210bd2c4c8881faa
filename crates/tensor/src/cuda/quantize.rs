//! Launch code for the quantizing compressors' kernels (kernels/quantize.cu): TernGrad's
//! codes, QSGD's bucket scales and levels, and the packing of small codes. The
//! tensor-level side, with the CPU reference, is `crate::quantize`. Nothing here reads
//! back: every launch stays queued on the compute stream.

use super::device::CudaDevice;
use super::dtype::launched;
use crate::Result;
use cudarc::driver::{CudaSlice, CudaView, PushKernelArg};

pub(crate) fn terngrad_codes(
    d: &CudaDevice,
    x: &CudaView<'_, f32>,
    n: usize,
    s: f32,
    key: u64,
) -> Result<CudaSlice<u32>> {
    let mut out = d.alloc::<u32>(n)?;
    if n == 0 {
        return Ok(out);
    }
    let n64 = n as u64;
    let f = d.func("terngrad_codes")?;
    let mut b = d.stream.launch_builder(&f);
    b.arg(x).arg(&n64).arg(&s).arg(&key).arg(&mut out);
    // SAFETY: x holds n values, out n codes.
    launched("terngrad_codes", unsafe { b.launch(CudaDevice::cfg(n)) })?;
    Ok(out)
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
    let mut out = d.alloc::<f64>(buckets)?;
    if n == 0 {
        return Ok(out);
    }
    let (n64, d64) = (n as u64, bucket as u64);
    let f = d.func("bucket_scales")?;
    let mut b = d.stream.launch_builder(&f);
    b.arg(x).arg(&n64).arg(&d64).arg(&mode).arg(&mut out);
    // SAFETY: x holds n values; out one per bucket of ⌈n / bucket⌉.
    launched("bucket_scales", unsafe {
        b.launch(CudaDevice::cfg(buckets))
    })?;
    Ok(out)
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
    let mut out = d.alloc::<f32>(n)?;
    if n == 0 {
        return Ok(out);
    }
    let (n64, d64) = (n as u64, bucket as u64);
    let f = d.func("qsgd_levels")?;
    let mut b = d.stream.launch_builder(&f);
    b.arg(x)
        .arg(&n64)
        .arg(&d64)
        .arg(&s)
        .arg(scales)
        .arg(&key)
        .arg(&mut out);
    // SAFETY: x holds n values, scales one per bucket (checked by the caller), out n.
    launched("qsgd_levels", unsafe { b.launch(CudaDevice::cfg(n)) })?;
    Ok(out)
}

pub(crate) fn pack_codes(
    d: &CudaDevice,
    codes: &CudaView<'_, u32>,
    n: usize,
    bits: u32,
    words: usize,
) -> Result<CudaSlice<u32>> {
    let mut out = d.alloc::<u32>(words)?;
    if words == 0 {
        return Ok(out);
    }
    let (n64, w64) = (n as u64, words as u64);
    let f = d.func("pack_codes")?;
    let mut b = d.stream.launch_builder(&f);
    b.arg(codes).arg(&n64).arg(&bits).arg(&w64).arg(&mut out);
    // SAFETY: codes holds n values; words = ⌈n·bits / 32⌉ (the caller's arithmetic).
    launched("pack_codes", unsafe { b.launch(CudaDevice::cfg(words)) })?;
    Ok(out)
}

pub(crate) fn unpack_codes(
    d: &CudaDevice,
    words: &CudaView<'_, u32>,
    n: usize,
    bits: u32,
) -> Result<CudaSlice<u32>> {
    let mut out = d.alloc::<u32>(n)?;
    if n == 0 {
        return Ok(out);
    }
    let n64 = n as u64;
    let f = d.func("unpack_codes")?;
    let mut b = d.stream.launch_builder(&f);
    b.arg(words).arg(&n64).arg(&bits).arg(&mut out);
    // SAFETY: words holds ⌈n·bits / 32⌉ words (checked by the caller), out n codes.
    launched("unpack_codes", unsafe { b.launch(CudaDevice::cfg(n)) })?;
    Ok(out)
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
    let mut out = d.alloc::<f64>(4 * buckets)?;
    if n == 0 {
        return Ok(out);
    }
    let (n64, d64, c64, b64) = (n as u64, bucket as u64, chunks as u64, buckets as u64);
    let f = d.func("sign_sums_partial")?;
    let mut b = d.stream.launch_builder(&f);
    b.arg(x)
        .arg(&n64)
        .arg(&d64)
        .arg(&c64)
        .arg(&b64)
        .arg(&mut partial);
    // SAFETY: x holds n values; partial 4 per (bucket, chunk).
    launched("sign_sums_partial", unsafe {
        b.launch(CudaDevice::cfg(buckets * chunks))
    })?;
    let f = d.func("sign_sums_final")?;
    let mut b = d.stream.launch_builder(&f);
    b.arg(&partial).arg(&c64).arg(&b64).arg(&mut out);
    // SAFETY: partial holds 4·buckets·chunks values, out 4 per bucket.
    launched("sign_sums_final", unsafe {
        b.launch(CudaDevice::cfg(buckets))
    })?;
    Ok(out)
}

pub(crate) fn two_level_values(
    d: &CudaDevice,
    codes: &CudaView<'_, u32>,
    means: &CudaView<'_, f32>,
    n: usize,
    bucket: usize,
) -> Result<CudaSlice<f32>> {
    let mut out = d.alloc::<f32>(n)?;
    if n == 0 {
        return Ok(out);
    }
    let (n64, d64) = (n as u64, bucket as u64);
    let f = d.func("two_level_values")?;
    let mut b = d.stream.launch_builder(&f);
    b.arg(codes).arg(means).arg(&n64).arg(&d64).arg(&mut out);
    // SAFETY: codes holds n values, means 2 per bucket (checked by the caller).
    launched("two_level_values", unsafe { b.launch(CudaDevice::cfg(n)) })?;
    Ok(out)
}
