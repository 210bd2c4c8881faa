//! The caching device allocator: the driver's stream-ordered memory pool, configured to
//! keep what is freed. cudarc allocates every buffer with `cuMemAllocAsync` and frees it
//! with `cuMemFreeAsync` on its stream when the device supports memory pools (every GPU we
//! target does), so freed blocks already return to the device's default pool, are reused
//! by later allocations on the same stream at once and by other streams once their events
//! say the block is free: the per-stream reuse PyTorch's caching allocator implements by
//! hand. What the driver does not do by default is keep them: the pool's release threshold
//! is 0, so at each synchronisation it unmaps every unused byte, and the next step maps it
//! again. [`configure`] raises the threshold (`GRADEX_CUDA_CACHE`), and [`stats`] reads
//! the pool's current and high-water use, which `gpu_step_bench` reports.
//!
//! Why not a hand-written allocator: the driver's pool already does size-class reuse,
//! stream ordering and cross-stream safety (the part a hand-written one gets wrong), and
//! cudarc's `CudaSlice` frees through it; one more layer would only add bookkeeping.

use super::device::cuda_err;
use crate::{Error, Result};
use cudarc::driver::sys;

/// How much freed memory the pool keeps, from `GRADEX_CUDA_CACHE`: unset, empty or `on`
/// keeps everything (a training step's buffers are reused step after step); `off` or `0`
/// returns freed memory at every synchronisation (the driver's default, for measuring
/// what caching buys); a size (`512M`, `16G`, or bytes) keeps at most that much.
pub(crate) fn cache_bytes_from_env() -> Result<u64> {
    match std::env::var("GRADEX_CUDA_CACHE") {
        Ok(v) => parse_cache(&v),
        Err(std::env::VarError::NotPresent) => Ok(u64::MAX),
        Err(e) => Err(Error::msg(format!("GRADEX_CUDA_CACHE: {e}"))),
    }
}

pub(crate) fn parse_cache(v: &str) -> Result<u64> {
    let t = v.trim();
    let bad = || {
        Error::msg(format!(
            "GRADEX_CUDA_CACHE={v:?}: expected on, off, or a size such as 512M or 16G"
        ))
    };
    match t.to_ascii_lowercase().as_str() {
        "" | "on" => return Ok(u64::MAX),
        "off" => return Ok(0),
        _ => {}
    }
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&t[..i], &t[i..]),
        None => (t, ""),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => return Err(bad()),
    };
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

/// The device's default memory pool, or `None` where the device has no pools (then every
/// allocation is a plain `cuMemAlloc` and nothing is cached).
pub(crate) fn default_pool(device: sys::CUdevice) -> Option<sys::CUmemoryPool> {
    let mut supported = 0;
    // SAFETY: plain attribute query of a valid device handle.
    let ok = unsafe {
        sys::cuDeviceGetAttribute(
            &mut supported,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
            device,
        )
    }
    .result()
    .is_ok();
    if !ok || supported == 0 {
        return None;
    }
    let mut pool = std::ptr::null_mut();
    // SAFETY: writes the default pool's handle of a valid device.
    unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, device) }
        .result()
        .ok()
        .map(|_| pool)
}

fn set(pool: sys::CUmemoryPool, attr: sys::CUmemPool_attribute, mut v: u64) -> Result<()> {
    // SAFETY: every attribute set here takes a cuuint64_t.
    unsafe { sys::cuMemPoolSetAttribute(pool, attr, (&mut v as *mut u64).cast()) }
        .result()
        .map_err(cuda_err("set memory pool attribute"))
}

fn get(pool: sys::CUmemoryPool, attr: sys::CUmemPool_attribute) -> Result<u64> {
    let mut v = 0u64;
    // SAFETY: every attribute read here is a cuuint64_t.
    unsafe { sys::cuMemPoolGetAttribute(pool, attr, (&mut v as *mut u64).cast()) }
        .result()
        .map_err(cuda_err("read memory pool attribute"))?;
    Ok(v)
}

/// Keeps up to `keep` freed bytes in `pool` across synchronisations.
pub(crate) fn configure(pool: sys::CUmemoryPool, keep: u64) -> Result<()> {
    set(
        pool,
        sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
        keep,
    )
}

/// The pool's memory in bytes: `used` is held by live buffers, `reserved` is mapped by
/// the pool (used plus cached); `*_peak` are high-water marks since the last [`reset_peaks`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    pub used: u64,
    pub used_peak: u64,
    pub reserved: u64,
    pub reserved_peak: u64,
}

pub(crate) fn stats(pool: sys::CUmemoryPool) -> Result<MemoryStats> {
    use sys::CUmemPool_attribute::*;
    Ok(MemoryStats {
        used: get(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
        used_peak: get(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
        reserved: get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
        reserved_peak: get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
    })
}

/// Releases every cached (unused) byte of `pool` to the driver, for allocators outside
/// the pool (cudaMalloc inside cuDNN's measuring calls).
pub(crate) fn trim(pool: sys::CUmemoryPool) -> Result<()> {
    // SAFETY: a valid pool; trimming frees only memory no allocation holds.
    unsafe { sys::cuMemPoolTrimTo(pool, 0) }
        .result()
        .map_err(cuda_err("trim the memory pool"))
}

/// Restarts both high-water marks from the current use (the driver's rule for a 0 write).
pub(crate) fn reset_peaks(pool: sys::CUmemoryPool) -> Result<()> {
    use sys::CUmemPool_attribute::*;
    set(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)?;
    set(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0)
}

#[cfg(test)]
mod tests {
    use super::parse_cache;

    #[test]
    fn cache_sizes_parse_and_bad_ones_are_named() {
        assert_eq!(parse_cache("").unwrap(), u64::MAX);
        assert_eq!(parse_cache("ON").unwrap(), u64::MAX);
        assert_eq!(parse_cache("off").unwrap(), 0);
        assert_eq!(parse_cache("0").unwrap(), 0);
        assert_eq!(parse_cache("4096").unwrap(), 4096);
        assert_eq!(parse_cache("512M").unwrap(), 512 << 20);
        assert_eq!(parse_cache(" 16G ").unwrap(), 16 << 30);
        assert_eq!(parse_cache("2kb").unwrap(), 2048);
        for bad in ["lots", "12T", "-1", "G", "99999999999999999999G"] {
            let e = parse_cache(bad).unwrap_err().to_string();
            assert!(e.contains("GRADEX_CUDA_CACHE"), "{bad}: {e}");
        }
    }
}
