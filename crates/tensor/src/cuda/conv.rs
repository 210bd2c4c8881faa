//! 2-d convolution on the GPU: through cuDNN where it is loaded and has a suitable
//! algorithm for the shape (cudnn.rs), otherwise as im2col + cuBLAS, this file's path
//! (kernels/conv.cu for the lowering):
//! forward and both gradients, with groups, stride, padding and dilation. The column
//! buffer is built for a chunk of images at a time so its size stays bounded.
//!
//! - forward: per group, `out[b] = W_g · col[b]` as one strided-batched product;
//! - input gradient: `dcol[b] = W_gᵀ · dy[b]`, then col2im gathers it back to pixels;
//! - weight gradient: the chunk's columns laid out `[C·kh·kw, nb·L]` and `dy` permuted
//!   to `[O, nb·L]`, so each group is a single product accumulated over chunks.
//!
//! A 1×1 convolution with stride 1 and no padding (most of ResNet-50's) is a plain
//! product: each image's input `[C, H·W]` already is its column matrix, so the forward and
//! the input gradient skip the im2col/col2im passes and the column buffer.

use super::blas::{gemm, BlasScalar, Operand};
use super::cudnn;
use super::device::CudaDevice;
use super::dtype::GpuFloat;
use super::kernels::Strided;
use super::launch::launch;
use crate::storage::Conv2dParams;
use crate::Result;
use cudarc::cublas::{CudaBlas, Gemm};
use cudarc::driver::{CudaSlice, DeviceRepr};

/// `ConvGeom` in kernels/conv.cu, field for field.
#[repr(C)]
#[derive(Clone, Copy)]
struct ConvGeom {
    c: i64,
    h: i64,
    w: i64,
    kh: i64,
    kw: i64,
    sh: i64,
    sw: i64,
    ph: i64,
    pw: i64,
    dh: i64,
    dw: i64,
    oh: i64,
    ow: i64,
}
// SAFETY: plain old data with the C layout the kernel declares.
unsafe impl DeviceRepr for ConvGeom {}

/// Column buffers stay under this many bytes (more images per chunk, fewer launches,
/// up to here).
const COL_BUDGET_BYTES: usize = 256 << 20;

struct Dims {
    n: usize,
    c: usize,
    o: usize,
    g: usize,
    cg: usize,
    og: usize,
    kk: usize,
    l: usize,
    rows: usize,
    geom: ConvGeom,
}

fn dims(p: &Conv2dParams) -> Dims {
    let (oh, ow) = (p.out_h(), p.out_w());
    let kk = p.k_h * p.k_w;
    Dims {
        n: p.batch,
        c: p.in_channels,
        o: p.out_channels,
        g: p.groups,
        cg: p.in_channels / p.groups,
        og: p.out_channels / p.groups,
        kk,
        l: oh * ow,
        rows: p.in_channels * kk,
        geom: ConvGeom {
            c: p.in_channels as i64,
            h: p.in_h as i64,
            w: p.in_w as i64,
            kh: p.k_h as i64,
            kw: p.k_w as i64,
            sh: p.stride.0 as i64,
            sw: p.stride.1 as i64,
            ph: p.padding.0 as i64,
            pw: p.padding.1 as i64,
            dh: p.dilation.0 as i64,
            dw: p.dilation.1 as i64,
            oh: oh as i64,
            ow: ow as i64,
        },
    }
}

/// Whether the input itself is the column matrix (see the module comment).
fn pointwise(p: &Conv2dParams) -> bool {
    p.k_h == 1 && p.k_w == 1 && p.stride == (1, 1) && p.padding == (0, 0)
}

fn chunk<T>(d: &Dims) -> usize {
    let per_image = (d.rows * d.l * std::mem::size_of::<T>()).max(1);
    (COL_BUDGET_BYTES / per_image).clamp(1, d.n.max(1))
}

fn im2col<T: GpuFloat>(
    dev: &CudaDevice,
    x: &CudaSlice<T>,
    col: &mut CudaSlice<T>,
    d: &Dims,
    b0: usize,
    nb: usize,
    batch_inner: bool,
) -> Result<()> {
    let name = format!("im2col_{}", T::SUFFIX);
    let (b0, nb64, bi) = (b0 as i64, nb as i64, batch_inner as i32);
    // SAFETY: col holds at least nb*rows*L elements; x is the contiguous NCHW input.
    unsafe {
        launch!(dev, &name, CudaDevice::cfg(nb * d.rows * d.l); x, col, &d.geom, &b0, &nb64,
            &bi)
    }
}

pub(crate) fn forward<T: GpuFloat>(
    dev: &CudaDevice,
    x: &CudaSlice<T>,
    w: &CudaSlice<T>,
    p: &Conv2dParams,
) -> Result<CudaSlice<T>>
where
    CudaBlas: Gemm<T>,
{
    if let Some(y) = cudnn::run(dev, p, cudnn::Pass::Forward, x, w)? {
        return Ok(y);
    }
    let d = dims(p);
    let mut out = dev.alloc_zeros::<T>(d.n * d.o * d.l)?;
    if d.n * d.o * d.l == 0 {
        return Ok(out);
    }
    if pointwise(p) {
        // out[b, group g] = W_g [og, cg] · x[b, group g] [cg, L], all images in one call.
        for g in 0..d.g {
            gemm(
                dev,
                (d.n, d.og, d.l, d.cg),
                w,
                Operand::rows(g * d.og * d.cg, 0, d.cg),
                x,
                Operand::rows(g * d.cg * d.l, d.c * d.l, d.l),
                &mut out,
                (g * d.og * d.l, d.o * d.l, d.l),
                T::ZERO,
            )?;
        }
        return Ok(out);
    }
    let nb = chunk::<T>(&d);
    let mut col = dev.alloc::<T>(nb * d.rows * d.l)?;
    let q = d.cg * d.kk;
    for b0 in (0..d.n).step_by(nb) {
        let cur = nb.min(d.n - b0);
        im2col(dev, x, &mut col, &d, b0, cur, false)?;
        for g in 0..d.g {
            gemm(
                dev,
                (cur, d.og, d.l, q),
                w,
                Operand::rows(g * d.og * q, 0, q),
                &col,
                Operand::rows(g * q * d.l, d.rows * d.l, d.l),
                &mut out,
                ((b0 * d.o + g * d.og) * d.l, d.o * d.l, d.l),
                T::ZERO,
            )?;
        }
    }
    Ok(out)
}

pub(crate) fn backward_input<T: GpuFloat>(
    dev: &CudaDevice,
    gy: &CudaSlice<T>,
    w: &CudaSlice<T>,
    p: &Conv2dParams,
) -> Result<CudaSlice<T>>
where
    CudaBlas: Gemm<T>,
{
    if let Some(dx) = cudnn::run(dev, p, cudnn::Pass::Data, w, gy)? {
        return Ok(dx);
    }
    let d = dims(p);
    let n_in = d.n * d.c * p.in_h * p.in_w;
    let mut dx = dev.alloc_zeros::<T>(n_in)?;
    if n_in == 0 || d.l == 0 {
        return Ok(dx);
    }
    if pointwise(p) {
        // dx[b, group g] = W_gᵀ [cg, og] · dy[b, group g] [og, L], straight into dx.
        for g in 0..d.g {
            gemm(
                dev,
                (d.n, d.cg, d.l, d.og),
                w,
                Operand::transposed(g * d.og * d.cg, 0, d.cg),
                gy,
                Operand::rows(g * d.og * d.l, d.o * d.l, d.l),
                &mut dx,
                (g * d.cg * d.l, d.c * d.l, d.l),
                T::ZERO,
            )?;
        }
        return Ok(dx);
    }
    let nb = chunk::<T>(&d);
    let mut dcol = dev.alloc::<T>(nb * d.rows * d.l)?;
    let q = d.cg * d.kk;
    let name = format!("col2im_{}", T::SUFFIX);
    for b0 in (0..d.n).step_by(nb) {
        let cur = nb.min(d.n - b0);
        for g in 0..d.g {
            gemm(
                dev,
                (cur, q, d.l, d.og),
                w,
                Operand::transposed(g * d.og * q, 0, q),
                gy,
                Operand::rows((b0 * d.o + g * d.og) * d.l, d.o * d.l, d.l),
                &mut dcol,
                (g * q * d.l, d.rows * d.l, d.l),
                T::ZERO,
            )?;
        }
        let (b0i, nbi) = (b0 as i64, cur as i64);
        // SAFETY: dcol holds cur*rows*L elements; dx is the full NCHW gradient.
        unsafe {
            launch!(dev, &name, CudaDevice::cfg(cur * d.c * p.in_h * p.in_w); &dcol, &mut dx,
                &d.geom, &b0i, &nbi)
        }?;
    }
    Ok(dx)
}

pub(crate) fn backward_weight<T: GpuFloat>(
    dev: &CudaDevice,
    x: &CudaSlice<T>,
    gy: &CudaSlice<T>,
    p: &Conv2dParams,
) -> Result<CudaSlice<T>>
where
    CudaBlas: Gemm<T>,
{
    if let Some(dw) = cudnn::run(dev, p, cudnn::Pass::Filter, x, gy)? {
        return Ok(dw);
    }
    let d = dims(p);
    let q = d.cg * d.kk;
    let mut dw = dev.alloc_zeros::<T>(d.o * q)?;
    if d.n * d.l == 0 || d.o * q == 0 {
        return Ok(dw);
    }
    let nb = chunk::<T>(&d);
    let mut col = dev.alloc::<T>(nb * d.rows * d.l)?;
    let mut gyp = dev.alloc::<T>(nb * d.o * d.l)?;
    let copy_name = format!("copy_{}", T::SUFFIX);
    for b0 in (0..d.n).step_by(nb) {
        let cur = nb.min(d.n - b0);
        im2col(dev, x, &mut col, &d, b0, cur, true)?;
        // dy[b0..b0+cur] as [O, cur, L]: a permuted view copied contiguous.
        let view = Strided::new(&[d.o, cur, d.l], &[d.l, d.o * d.l, 1], b0 * d.o * d.l)?;
        let n = (d.o * cur * d.l) as u64;
        // SAFETY: the view lies inside gy; gyp holds nb*O*L >= n elements.
        unsafe { launch!(dev, &copy_name, CudaDevice::cfg(n as usize); gy, &view, &mut gyp, &n) }?;
        let span = cur * d.l;
        for g in 0..d.g {
            gemm(
                dev,
                (1, d.og, q, span),
                &gyp,
                Operand::rows(g * d.og * span, 0, span),
                &col,
                Operand::transposed(g * q * span, 0, span),
                &mut dw,
                (g * d.og * q, 0, q),
                <T as BlasScalar>::ONE,
            )?;
        }
    }
    Ok(dw)
}
