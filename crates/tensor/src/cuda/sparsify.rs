//! Launch code for gradient compression's kernels (kernels/sparsify.cu): radix select of
//! the k-th largest magnitude, ordered compaction of the entries above a threshold, the
//! strided sample, the sum of squares and DGC's fused accumulation. `crate::sparsify` is
//! the tensor-level side and holds the CPU reference.
//!
//! Host round trips: the radix select reads back 12 bytes (the threshold and how many of
//! its ties to take) and the compaction 8 (how many entries it selected, to size its
//! output); everything else stays queued on the compute stream.

use super::device::{cuda_err, CudaDevice};
use super::launch::{launch, launched};
use crate::Result;
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, LaunchConfig, PushKernelArg};

/// The radix select's bins (kernels/sparsify.cu `RADIX_BINS`) and its passes' shifts:
/// bits 30–20, 19–9 and 10–0 of the magnitude (bit 31, the sign, is cleared; the last
/// pass's top two bits are already decided).
const RADIX_BINS: usize = 2048;
const RADIX_SHIFTS: [i32; 3] = [20, 9, 0];
/// Entries per compaction tile (`TILE` in the kernels: 256 threads × 16).
const TILE: usize = 4096;
const TILE_THREADS: u32 = 256;

/// The histogram's grid: at most 1024 blocks looping over the input. Each block clears and
/// flushes all 2048 bins, so one block per 256 entries (the usual launch) spent most of
/// its time there and in global atomics on the few bins gradients crowd into (measured on
/// an H200: 291 µs a pass over 25.5 M values, against 30 µs for reading them).
fn hist_cfg(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256).clamp(1, 1024) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn one_block(threads: u32, shared: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: shared,
    }
}

/// The bit pattern of the `kth` largest magnitude in `x` (1 ≤ kth ≤ n) and how many
/// entries equal to it are among the `kth` largest.
pub(crate) fn kth_largest_bits(
    d: &CudaDevice,
    x: &CudaView<'_, f32>,
    n: usize,
    kth: usize,
) -> Result<(u32, u64)> {
    let mut state = d
        .stream
        .clone_htod(&[0u32, 0, kth as u32])
        .map_err(cuda_err("upload"))?;
    let mut hist = d.alloc_zeros::<u32>(RADIX_BINS)?;
    let n64 = n as u64;
    let (fh, fp) = (d.func("mag_hist")?, d.func("mag_pick")?);
    for shift in RADIX_SHIFTS {
        let mut b = d.stream.launch_builder(&fh);
        b.arg(x).arg(&n64).arg(&state).arg(&shift).arg(&mut hist);
        // SAFETY: x holds n values; hist RADIX_BINS counters; state 3 words.
        launched("mag_hist", unsafe { b.launch(hist_cfg(n)) })?;
        let mut b = d.stream.launch_builder(&fp);
        b.arg(&mut hist).arg(&mut state).arg(&shift);
        // SAFETY: one block of 1024 threads, two bins each (RADIX_BINS = 2048).
        launched("mag_pick", unsafe { b.launch(one_block(1024, 0)) })?;
    }
    let s = d.download(&state, 3)?;
    Ok((s[0], s[2] as u64))
}

/// A compaction counted and scanned, ready to write: `total` entries are selected.
pub(crate) struct Plan {
    tiles: usize,
    tbits: u32,
    take_eq: u64,
    out_off: CudaSlice<u64>,
    eq_off: CudaSlice<u64>,
    pub(crate) total: usize,
}

/// Counts the entries of magnitude above `tbits`, and the first `take_eq` equal to it
/// (none when `tbits` is 0: zeros are never selected), tile by tile.
pub(crate) fn plan(
    d: &CudaDevice,
    x: &CudaView<'_, f32>,
    n: usize,
    tbits: u32,
    take_eq: u64,
) -> Result<Plan> {
    let tiles = n.div_ceil(TILE).max(1);
    let mut gt = d.alloc::<u32>(tiles)?;
    let mut eq = d.alloc::<u32>(tiles)?;
    let n64 = n as u64;
    let cfg = LaunchConfig {
        grid_dim: (tiles as u32, 1, 1),
        block_dim: (TILE_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: one block per tile of TILE entries; gt and eq hold `tiles` counters.
    unsafe { launch!(d, "mag_tile_count", cfg; x, &n64, &tbits, &mut gt, &mut eq) }?;
    let mut out_off = d.alloc::<u64>(tiles)?;
    let mut eq_off = d.alloc::<u64>(tiles)?;
    let mut total = d.alloc::<u64>(1)?;
    let t64 = tiles as u64;
    // SAFETY: one block of 1024 threads loops over the `tiles` counters.
    unsafe {
        launch!(d, "mag_tile_scan", one_block(1024, 0); &gt, &eq, &t64, &take_eq, &mut out_off,
            &mut eq_off, &mut total)
    }?;
    let total = d.download(&total, 1)?[0] as usize;
    Ok(Plan {
        tiles,
        tbits,
        take_eq,
        out_off,
        eq_off,
        total,
    })
}

/// Writes what `p` selected from `x` (the same `x`), in index order.
pub(crate) fn write(
    d: &CudaDevice,
    x: &CudaView<'_, f32>,
    n: usize,
    p: &Plan,
) -> Result<(CudaSlice<u32>, CudaSlice<f32>)> {
    // Zeroed, so that a tensor changed since its count (a misuse take_counted cannot see)
    // gives wrong entries, never uninitialised indices.
    let mut idx = d.alloc_zeros::<u32>(p.total)?;
    let mut val = d.alloc_zeros::<f32>(p.total)?;
    if p.total == 0 {
        return Ok((idx, val));
    }
    let (n64, total) = (n as u64, p.total as u64);
    let cfg = LaunchConfig {
        grid_dim: (p.tiles as u32, 1, 1),
        block_dim: (TILE_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the plan counted `total` selected entries of this x; each tile writes its own
    // range [out_off, out_off + its count).
    unsafe {
        launch!(d, "mag_tile_write", cfg; x, &n64, &p.tbits, &p.take_eq, &p.out_off, &p.eq_off,
            &total, &mut idx, &mut val)
    }?;
    Ok((idx, val))
}

/// x[idx[j]] = 0 for j < k, skipping indices past x's `n` elements. With `check`, first
/// counts the indices past `n` (waiting for the device) and, if any are, returns their
/// count having written nothing; without, queues the clearing and returns 0.
pub(crate) fn zero_at(
    d: &CudaDevice,
    x: &mut CudaViewMut<'_, f32>,
    n: usize,
    idx: &CudaView<'_, u32>,
    k: usize,
    check: bool,
) -> Result<u32> {
    if k == 0 {
        return Ok(0);
    }
    let mut bad = d.alloc_zeros::<u32>(1)?;
    if check {
        zero_at_pass(d, x, n, idx, k, &mut bad, 1)?;
        let skipped = d.download(&bad, 1)?[0];
        if skipped > 0 {
            return Ok(skipped);
        }
    }
    zero_at_pass(d, x, n, idx, k, &mut bad, 0)?;
    Ok(0)
}

fn zero_at_pass(
    d: &CudaDevice,
    x: &mut CudaViewMut<'_, f32>,
    n: usize,
    idx: &CudaView<'_, u32>,
    k: usize,
    bad: &mut cudarc::driver::CudaSlice<u32>,
    count_only: i32,
) -> Result<()> {
    let (n64, k64) = (n as u64, k as u64);
    // SAFETY: x holds n values and idx k; indices past n are skipped by the kernel.
    unsafe { launch!(d, "zero_at", CudaDevice::cfg(k); x, &n64, idx, &k64, bad, &count_only) }
}

/// x[start + j·stride] for j < count.
pub(crate) fn gather_strided(
    d: &CudaDevice,
    x: &CudaView<'_, f32>,
    start: usize,
    stride: usize,
    count: usize,
) -> Result<CudaSlice<f32>> {
    d.output::<f32>(count, |out| {
        let (s64, st64, c64) = (start as u64, stride as u64, count as u64);
        // SAFETY: start + (count − 1)·stride < x's length (checked by the caller).
        unsafe { launch!(d, "gather_strided", CudaDevice::cfg(count); x, &s64, &st64, &c64, out) }
    })
}

/// Σ x² in double, in the order `crate::sparsify::sum_of_squares_slice` follows on the CPU
/// (a fixed grid of 1024 × 256, partials added in order): the same result bit for bit.
pub(crate) fn sum_of_squares(d: &CudaDevice, x: &CudaView<'_, f32>, n: usize) -> Result<f64> {
    const BLOCKS: u32 = 1024;
    let mut partial = d.alloc::<f64>(BLOCKS as usize)?;
    let mut out = d.alloc::<f64>(1)?;
    let n64 = n as u64;
    let cfg = LaunchConfig {
        grid_dim: (BLOCKS, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: a grid-stride loop over n values; one partial per block.
    unsafe { launch!(d, "sum_sq_partial", cfg; x, &n64, &mut partial) }?;
    // SAFETY: one block of 256 threads over BLOCKS partials.
    unsafe { launch!(d, "sum_sq_final", one_block(256, 0); &partial, &BLOCKS, &mut out) }?;
    Ok(d.download(&out, 1)?[0])
}

/// DGC's accumulation in place (kernels/sparsify.cu `dgc_accumulate`): `rule` 0 plain,
/// 1 momentum, 2 Nesterov; `u` is read and written for rules 1 and 2 only (pass `v`'s
/// length of anything otherwise: it is not touched).
#[allow(clippy::too_many_arguments)]
pub(crate) fn dgc_accumulate(
    d: &CudaDevice,
    u: Option<&mut CudaViewMut<'_, f32>>,
    v: &mut CudaViewMut<'_, f32>,
    g: &CudaView<'_, f32>,
    w: Option<&CudaView<'_, f32>>,
    n: usize,
    (gs, mo, wd): (f32, f32, f32),
    rule: i32,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let n64 = n as u64;
    let has_w = w.is_some() as i32;
    let f = d.func("dgc_accumulate")?;
    let mut b = d.stream.launch_builder(&f);
    // Absent buffers are passed as a buffer the kernel will not read through them: g for
    // w (has_w 0), and for u only under rule 0, which never touches u.
    let mut dummy_u;
    match u {
        Some(u) => {
            b.arg(u);
        }
        None => {
            dummy_u = d.alloc::<f32>(1)?;
            b.arg(&mut dummy_u);
        }
    }
    b.arg(v);
    b.arg(g);
    match w {
        Some(w) => b.arg(w),
        None => b.arg(g),
    };
    b.arg(&has_w)
        .arg(&n64)
        .arg(&gs)
        .arg(&mo)
        .arg(&wd)
        .arg(&rule);
    // SAFETY: u (for rules 1 and 2), v, g and w (when has_w) hold n values each.
    launched("dgc_accumulate", unsafe { b.launch(CudaDevice::cfg(n)) })
}
