//! Matrix products through cuBLAS. Our tensors are row-major; cuBLAS is column-major, so
//! a row-major `C = A·B` is computed as the column-major `Cᵀ = Bᵀ·Aᵀ`, which reads the
//! same memory without any copy. Transposed views (column-major storage) become cuBLAS's
//! `T` operations, also without a copy.
//!
//! TF32 tensor-core math is off by default, so f32 results compare with the CPU's; turn
//! it on with [`set_allow_tf32`] or `GRADEX_CUDA_TF32=1` for speed (about 10 mantissa
//! bits of product precision).

use super::device::{cuda_err, CudaDevice};
use crate::{Error, Result};
use cudarc::cublas::sys::{cublasMath_t, cublasOperation_t};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{CudaSlice, DeviceRepr};
use std::sync::atomic::{AtomicU8, Ordering};

/// 0: not decided yet (read the environment), 1: off, 2: on.
static TF32: AtomicU8 = AtomicU8::new(0);

/// Allows (or forbids) TF32 tensor-core math in f32 matrix products and convolutions,
/// for every device, from the next product on.
pub fn set_allow_tf32(on: bool) {
    TF32.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

/// Whether f32 products may use TF32 (default: off unless `GRADEX_CUDA_TF32=1`).
pub fn tf32_allowed() -> bool {
    match TF32.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var("GRADEX_CUDA_TF32")
                .map(|v| v == "1")
                .unwrap_or(false);
            set_allow_tf32(on);
            on
        }
        v => v == 2,
    }
}

/// One operand of a (batched) row-major product: where its first matrix starts, how far
/// apart the matrices are (0: shared by every batch), its leading dimension and whether
/// it is stored transposed (element (i, j) at `i + j * ld` rather than `i * ld + j`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Operand {
    pub offset: usize,
    pub batch_stride: usize,
    pub ld: usize,
    pub trans: bool,
}

impl Operand {
    /// A row-major matrix with row stride `ld`.
    pub fn rows(offset: usize, batch_stride: usize, ld: usize) -> Operand {
        Operand {
            offset,
            batch_stride,
            ld,
            trans: false,
        }
    }
    /// The transpose of a row-major matrix with row stride `ld`.
    pub fn transposed(offset: usize, batch_stride: usize, ld: usize) -> Operand {
        Operand {
            offset,
            batch_stride,
            ld,
            trans: true,
        }
    }
    /// How a logical `[r, c]` matrix with strides `(sr, sc)` maps onto cuBLAS, if it does
    /// (`None`: the view needs a contiguous copy first).
    pub fn from_strides(
        offset: usize,
        batch_stride: usize,
        r: usize,
        c: usize,
        sr: usize,
        sc: usize,
    ) -> Option<Operand> {
        if (c <= 1 || sc == 1) && (r <= 1 || sr >= c) {
            return Some(Operand::rows(
                offset,
                batch_stride,
                if r <= 1 { c.max(1) } else { sr },
            ));
        }
        if (r <= 1 || sr == 1) && (c <= 1 || sc >= r) {
            return Some(Operand::transposed(
                offset,
                batch_stride,
                if c <= 1 { r.max(1) } else { sc },
            ));
        }
        None
    }
}

/// Element types cuBLAS multiplies for us.
pub(crate) trait BlasScalar: DeviceRepr + Copy {
    const ONE: Self;
    const ZERO: Self;
    const IS_F32: bool;
}
impl BlasScalar for f32 {
    const ONE: f32 = 1.0;
    const ZERO: f32 = 0.0;
    const IS_F32: bool = true;
}
impl BlasScalar for f64 {
    const ONE: f64 = 1.0;
    const ZERO: f64 = 0.0;
    const IS_F32: bool = false;
}

fn int(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v)
        .map_err(|_| Error::msg(format!("cuBLAS: {what} = {v} does not fit a 32-bit int")))
}

/// `C[b] = A[b] · B[b] + beta · C[b]` for `b < batch`, all row-major `[m, k] · [k, n]`;
/// `c` is row-major with row stride `c_ld`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm<T: BlasScalar>(
    dev: &CudaDevice,
    (batch, m, n, k): (usize, usize, usize, usize),
    a: &CudaSlice<T>,
    ao: Operand,
    b: &CudaSlice<T>,
    bo: Operand,
    c: &mut CudaSlice<T>,
    (c_offset, c_batch_stride, c_ld): (usize, usize, usize),
    beta: T,
) -> Result<()>
where
    CudaBlas: Gemm<T>,
{
    // k == 0 leaves C as it is (callers start from zeros), as the definition says.
    if batch == 0 || m == 0 || n == 0 || k == 0 {
        return Ok(());
    }
    // Column-major view: Cᵀ (n × m) = Bᵀ (n × k) · Aᵀ (k × m). A row-major operand read
    // column-major is already its transpose, so it enters with op N.
    let op = |t: bool| {
        if t {
            cublasOperation_t::CUBLAS_OP_T
        } else {
            cublasOperation_t::CUBLAS_OP_N
        }
    };
    // cuBLAS insists on ld >= rows of the stored column-major matrix even where a
    // dimension of 1 makes it irrelevant.
    let lda = if bo.trans { bo.ld.max(k) } else { bo.ld.max(n) };
    let ldb = if ao.trans { ao.ld.max(m) } else { ao.ld.max(k) };
    let cfg = StridedBatchedConfig {
        gemm: GemmConfig {
            transa: op(bo.trans),
            transb: op(ao.trans),
            m: int(n, "n")?,
            n: int(m, "m")?,
            k: int(k, "k")?,
            alpha: T::ONE,
            lda: int(lda, "lda")?,
            ldb: int(ldb, "ldb")?,
            beta,
            ldc: int(c_ld.max(n), "ldc")?,
        },
        batch_size: int(batch, "batch")?,
        stride_a: bo.batch_stride as i64,
        stride_b: ao.batch_stride as i64,
        stride_c: c_batch_stride as i64,
    };
    let view_err = || Error::msg("cuBLAS: operand offset past the end of its buffer");
    let av = b.try_slice(bo.offset..).ok_or_else(view_err)?;
    let bv = a.try_slice(ao.offset..).ok_or_else(view_err)?;
    let mut cv = c.try_slice_mut(c_offset..).ok_or_else(view_err)?;
    dev.ctx.bind_to_thread().map_err(cuda_err("bind context"))?;
    let blas = dev.blas.lock().unwrap_or_else(|e| e.into_inner());
    let mode = if T::IS_F32 && tf32_allowed() {
        cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
    } else {
        cublasMath_t::CUBLAS_DEFAULT_MATH
    };
    // SAFETY: a valid handle; the mode only changes how later products compute.
    unsafe { cudarc::cublas::sys::cublasSetMathMode(*blas.handle(), mode) }
        .result()
        .map_err(cuda_err("cublasSetMathMode"))?;
    // SAFETY: the operands' extents were derived from valid layouts (or buffers we sized),
    // so every matrix cuBLAS touches lies inside its buffer.
    unsafe { blas.gemm_strided_batched(cfg, &av, &bv, &mut cv) }.map_err(cuda_err("gemm"))
}
