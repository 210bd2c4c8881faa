//! 2-d convolution: forward, input gradient and weight gradient, with stride, padding,
//! dilation and groups, over contiguous NCHW input and OIHW weights.
//!
//! Each image is lowered to a column matrix (im2col, `[C/g·kh·kw, OH·OW]` per group) and
//! multiplied with `gemm`. Work is split across images with rayon and each product runs
//! single-threaded where there are images enough for every thread: with few cores,
//! image-level parallelism avoids gemm's per-call synchronisation. The weight gradient is
//! summed per fixed block of images and the blocks reduced in order (so the result does
//! not depend on the thread count); with fewer blocks than threads, its products use
//! several threads each.

use super::matmul::{gemm_raw, parallelism_for};
use super::scratch::Scratch;
use crate::storage::Conv2dParams;
use crate::Float;
use gemm::Parallelism;
use rayon::prelude::*;

/// Column matrix of one image's channels `c0..c0+cg`: rows (c, ky, kx), columns (oy, ox),
/// row r starting at `col[r * ld]` (`ld` = OH·OW for one image; wider when several
/// images sit side by side in one matrix).
fn im2col<T: Float>(img: &[T], p: &Conv2dParams, c0: usize, cg: usize, col: &mut [T], ld: usize) {
    let (oh, ow) = (p.out_h(), p.out_w());
    let (h, w) = (p.in_h, p.in_w);
    let mut row = 0;
    for c in c0..c0 + cg {
        let plane = &img[c * h * w..(c + 1) * h * w];
        for ky in 0..p.k_h {
            for kx in 0..p.k_w {
                let dst = &mut col[row * ld..row * ld + oh * ow];
                let x_off = (kx * p.dilation.1) as isize - p.padding.1 as isize;
                row += 1;
                if p.stride == (1, 1) && ow == w && x_off.unsigned_abs() < w {
                    let y_off = (ky * p.dilation.0) as isize - p.padding.0 as isize;
                    shifted_plane(plane, h, w, oh, y_off, x_off, dst);
                    continue;
                }
                for oy in 0..oh {
                    let iy = (oy * p.stride.0 + ky * p.dilation.0) as isize - p.padding.0 as isize;
                    let drow = &mut dst[oy * ow..(oy + 1) * ow];
                    if iy < 0 || iy >= h as isize {
                        drow.fill(T::zero());
                        continue;
                    }
                    let src = &plane[iy as usize * w..(iy as usize + 1) * w];
                    if p.stride.1 == 1 {
                        // Contiguous run: copy the valid middle, zero the padded edges.
                        let lo = (-x_off).max(0) as usize;
                        let hi = ((w as isize - x_off).max(0) as usize).min(ow);
                        drow[..lo.min(ow)].fill(T::zero());
                        if lo < hi {
                            let s = (lo as isize + x_off) as usize;
                            drow[lo..hi].copy_from_slice(&src[s..s + hi - lo]);
                        }
                        if hi < ow {
                            drow[hi.max(lo)..].fill(T::zero());
                        }
                    } else {
                        for (ox, d) in drow.iter_mut().enumerate() {
                            let ix = (ox * p.stride.1) as isize + x_off;
                            *d = if ix >= 0 && ix < w as isize {
                                src[ix as usize]
                            } else {
                                T::zero()
                            };
                        }
                    }
                }
            }
        }
    }
}

/// One im2col row of a stride-1 convolution whose output rows are as wide as the input's
/// (`ow == w`, "same" padding horizontally): `dst[oy·w + ox] = plane[(oy + y_off)·w + ox +
/// x_off]` where that is inside the plane, else 0. In flat indices that is the plane
/// shifted by `y_off·w + x_off`, so it is one copy; then the rows outside the plane and
/// the |x_off| columns per row that the shift wrapped from the neighbouring row are
/// zeroed. Against the row-by-row copy: 1.6× (16 channels of 32×32) to 2.1× (64 of 8×8)
/// faster on an AVX-512 Xeon, where per-row overhead dominated the small planes.
/// Requires |x_off| < w.
fn shifted_plane<T: Float>(
    plane: &[T],
    h: usize,
    w: usize,
    oh: usize,
    y_off: isize,
    x_off: isize,
    dst: &mut [T],
) {
    debug_assert!(x_off.unsigned_abs() < w && dst.len() == oh * w);
    // Output rows whose source row is inside the plane: 0 <= oy + y_off < h.
    let oy0 = ((-y_off).max(0) as usize).min(oh);
    let oy1 = ((h as isize - y_off).max(0) as usize).min(oh).max(oy0);
    dst[..oy0 * w].fill(T::zero());
    dst[oy1 * w..].fill(T::zero());
    if oy0 == oy1 {
        return;
    }
    // The flat range of those rows, clipped where the shift leaves the plane (the first
    // element for x_off < 0, the last for x_off > 0: both are wrapped columns anyway).
    let shift = y_off * w as isize + x_off;
    let d0 = (oy0 * w).max((-shift).max(0) as usize);
    let d1 = (oy1 * w)
        .min(((h * w) as isize - shift).max(0) as usize)
        .max(d0);
    dst[oy0 * w..d0].fill(T::zero());
    dst[d1..oy1 * w].fill(T::zero());
    let s0 = (d0 as isize + shift) as usize;
    dst[d0..d1].copy_from_slice(&plane[s0..s0 + (d1 - d0)]);
    let wrapped = x_off.unsigned_abs();
    for r in dst[oy0 * w..oy1 * w].chunks_exact_mut(w) {
        if x_off < 0 {
            r[..wrapped].fill(T::zero());
        } else if x_off > 0 {
            r[w - wrapped..].fill(T::zero());
        }
    }
}

/// The adjoint of `im2col`: adds the column matrix back into the image's channels.
fn col2im<T: Float>(col: &[T], p: &Conv2dParams, c0: usize, cg: usize, img: &mut [T]) {
    let (oh, ow) = (p.out_h(), p.out_w());
    let (h, w) = (p.in_h, p.in_w);
    let mut row = 0;
    for c in c0..c0 + cg {
        let plane = &mut img[c * h * w..(c + 1) * h * w];
        for ky in 0..p.k_h {
            for kx in 0..p.k_w {
                let src = &col[row * oh * ow..(row + 1) * oh * ow];
                let x_off = (kx * p.dilation.1) as isize - p.padding.1 as isize;
                for oy in 0..oh {
                    let iy = (oy * p.stride.0 + ky * p.dilation.0) as isize - p.padding.0 as isize;
                    if iy < 0 || iy >= h as isize {
                        continue;
                    }
                    let dst = &mut plane[iy as usize * w..(iy as usize + 1) * w];
                    let srow = &src[oy * ow..(oy + 1) * ow];
                    if p.stride.1 == 1 {
                        // The valid columns form one run: add it as a slice.
                        let lo = (-x_off).max(0) as usize;
                        let hi = ((w as isize - x_off).max(0) as usize).min(ow);
                        if lo < hi {
                            let s = (lo as isize + x_off) as usize;
                            for (d, &v) in dst[s..s + hi - lo].iter_mut().zip(&srow[lo..hi]) {
                                *d += v;
                            }
                        }
                        continue;
                    }
                    for (ox, &v) in srow.iter().enumerate() {
                        let ix = (ox * p.stride.1) as isize + x_off;
                        if ix >= 0 && ix < w as isize {
                            dst[ix as usize] += v;
                        }
                    }
                }
                row += 1;
            }
        }
    }
}

struct Dims {
    cg: usize,
    og: usize,
    kk: usize,
    hw_out: usize,
    img_in: usize,
    img_out: usize,
}

fn dims(p: &Conv2dParams) -> Dims {
    let cg = p.in_channels / p.groups;
    Dims {
        cg,
        og: p.out_channels / p.groups,
        kk: cg * p.k_h * p.k_w,
        hw_out: p.out_h() * p.out_w(),
        img_in: p.in_channels * p.in_h * p.in_w,
        img_out: p.out_channels * p.out_h() * p.out_w(),
    }
}

/// 1×1, stride 1, no padding: the image itself is the column matrix.
fn is_pointwise(p: &Conv2dParams) -> bool {
    p.k_h == 1 && p.k_w == 1 && p.stride == (1, 1) && p.padding == (0, 0)
}

pub(crate) fn conv2d<T: Float>(x: &[T], wt: &[T], p: &Conv2dParams) -> Vec<T> {
    let d = dims(p);
    let len = p.batch * d.img_out;
    if len == 0 {
        return Vec::new();
    }
    // The output is left uninitialised and written once, by the products below: zeroing
    // it first was a pass over every activation for nothing.
    let mut out: Vec<T> = Vec::with_capacity(len);
    out.spare_capacity_mut()[..len]
        .par_chunks_mut(d.img_out)
        .enumerate()
        .for_each_init(
            || Scratch::take(if is_pointwise(p) { 0 } else { d.kk * d.hw_out }),
            |col, (b, y)| {
                let y = y.as_mut_ptr().cast::<T>();
                let img = &x[b * d.img_in..(b + 1) * d.img_in];
                for g in 0..p.groups {
                    let cols: &[T] = if is_pointwise(p) {
                        &img[g * d.cg * d.hw_out..(g + 1) * d.cg * d.hw_out]
                    } else {
                        im2col(img, p, g * d.cg, d.cg, col, d.hw_out);
                        col
                    };
                    unsafe {
                        gemm_raw(
                            d.og,
                            d.hw_out,
                            d.kk,
                            y.add(g * d.og * d.hw_out),
                            false,
                            wt.as_ptr().add(g * d.og * d.kk),
                            d.kk as isize,
                            1,
                            cols.as_ptr(),
                            d.hw_out as isize,
                            1,
                            Parallelism::None,
                        )
                    }
                }
            },
        );
    // SAFETY: for every image and group, the product above (accumulate = false; with
    // kk = 0, `gemm` writes zeros) wrote the og × OH·OW block at g·og·OH·OW, and the
    // groups' blocks tile the image's out_channels · OH·OW elements.
    unsafe { out.set_len(len) };
    out
}

/// For stride 1, the input gradient is a convolution of the output gradient with the
/// flipped weight, input and output channels swapped within each group, and padding
/// `dilation·(k−1) − padding`: it then runs through the fast forward path, with no
/// scatter (col2im) at all. Returns None where that identity does not apply.
fn backward_input_as_convolution<T: Float>(gy: &[T], wt: &[T], p: &Conv2dParams) -> Option<Vec<T>> {
    let reach_h = p.dilation.0 * (p.k_h - 1);
    let reach_w = p.dilation.1 * (p.k_w - 1);
    if p.stride != (1, 1) || reach_h < p.padding.0 || reach_w < p.padding.1 {
        return None;
    }
    let d = dims(p);
    let (kh, kw) = (p.k_h, p.k_w);
    // flipped[g·cg + c, o, ky, kx] = w[g·og + o, c, kh−1−ky, kw−1−kx]
    let mut flipped = vec![T::zero(); wt.len()];
    for g in 0..p.groups {
        for o in 0..d.og {
            for c in 0..d.cg {
                for ky in 0..kh {
                    for kx in 0..kw {
                        let src = (((g * d.og + o) * d.cg + c) * kh + ky) * kw + kx;
                        let dst =
                            (((g * d.cg + c) * d.og + o) * kh + (kh - 1 - ky)) * kw + (kw - 1 - kx);
                        flipped[dst] = wt[src];
                    }
                }
            }
        }
    }
    let q = Conv2dParams {
        batch: p.batch,
        in_channels: p.out_channels,
        in_h: p.out_h(),
        in_w: p.out_w(),
        out_channels: p.in_channels,
        k_h: kh,
        k_w: kw,
        stride: (1, 1),
        padding: (reach_h - p.padding.0, reach_w - p.padding.1),
        dilation: p.dilation,
        groups: p.groups,
    };
    debug_assert_eq!((q.out_h(), q.out_w()), (p.in_h, p.in_w));
    Some(conv2d(gy, &flipped, &q))
}

pub(crate) fn conv2d_backward_input<T: Float>(gy: &[T], wt: &[T], p: &Conv2dParams) -> Vec<T> {
    if let Some(gx) = backward_input_as_convolution(gy, wt, p) {
        return gx;
    }
    let d = dims(p);
    let mut gx = vec![T::zero(); p.batch * d.img_in];
    gx.par_chunks_mut(d.img_in).enumerate().for_each_init(
        || Scratch::take(d.kk * d.hw_out),
        |col, (b, gimg)| {
            let gyb = &gy[b * d.img_out..(b + 1) * d.img_out];
            for g in 0..p.groups {
                // col = W_gᵀ [kk × og] · gy_g [og × hw]
                let (dst, direct) = if is_pointwise(p) {
                    (gimg[g * d.cg * d.hw_out..].as_mut_ptr(), true)
                } else {
                    (col.as_mut_ptr(), false)
                };
                unsafe {
                    gemm_raw(
                        d.kk,
                        d.hw_out,
                        d.og,
                        dst,
                        false,
                        wt.as_ptr().add(g * d.og * d.kk),
                        1,
                        d.kk as isize,
                        gyb.as_ptr().add(g * d.og * d.hw_out),
                        d.hw_out as isize,
                        1,
                        Parallelism::None,
                    )
                }
                if !direct {
                    col2im(col, p, g * d.cg, d.cg, gimg);
                }
            }
        },
    );
    gx
}

/// Upper bound on the elements of one task's multi-image column matrix (4 MiB of f32):
/// larger blocks fall out of cache (measured: the 64-channel 32×32 benchmark layer slowed
/// from 62 to 72 ms with 16 MiB blocks).
const MAX_COL_ELEMS: usize = 1 << 20;

/// dW = Σ_images gy · colᵀ. Images are processed in blocks laid side by side, so each
/// group needs one product with inner dimension `block · OH · OW` per block instead of
/// one small product per image: per-call packing in `gemm` dominated the per-image form.
///
/// Each block computes the transpose, dWᵀ [kk × og] = col · gyᵀ, and transposes that
/// small result into place. Both operands then keep their layouts, but `gemm` gets the
/// long side (kk) as its rows: asked for dW [og × kk] directly, it walks colᵀ with a
/// stride of a whole row per element and does not pack it when og is small. Measured
/// with gemm 0.19 on an AVX-512 Xeon, one thread, ResNet-20's three stages
/// (og × kk × block·OH·OW = 16×144×7168, 32×288×4096, 64×576×2048): 44 → 105, 71 → 167
/// and 106 → 201 GFLOP/s (57 → 100, 72 → 109, 89 → 114 with the AVX2 kernels).
///
/// The blocks depend on the batch and the cache bound only, and each block's product is
/// its own partial, summed in block order: the result is the same bits on any number of
/// threads and however rayon splits the work. (Sizing blocks by the thread count, as an
/// earlier version did, made a run's weights depend on its pool size.)
pub(crate) fn conv2d_backward_weight<T: Float>(x: &[T], gy: &[T], p: &Conv2dParams) -> Vec<T> {
    let d = dims(p);
    let wlen = p.out_channels * d.kk;
    let bound = (MAX_COL_ELEMS / (d.kk * d.hw_out).max(1)).clamp(1, p.batch.max(1));
    // As few blocks as the cache bound allows, of equal size (so two threads split
    // 32 images 16 + 16, not 28 + 4).
    let block = p.batch.max(1).div_ceil(p.batch.max(1).div_ceil(bound));
    let starts: Vec<usize> = (0..p.batch).step_by(block).collect();
    // Fewer blocks than threads (deep layers' small images): the spare threads go into
    // each product, which `gemm` splits by output tiles, leaving every sum's order as is.
    let spare = starts.len() < rayon::current_num_threads();
    let partials: Vec<Vec<T>> = starts
        .into_par_iter()
        .map_init(
            || {
                let most = block * d.hw_out;
                (
                    Scratch::take(d.kk * most),
                    Scratch::take(d.og * most),
                    Scratch::take(d.kk * d.og),
                )
            },
            |(col, gyb, gwt), start| {
                let mut gw = vec![T::zero(); wlen];
                let nb = block.min(p.batch - start);
                let ld = nb * d.hw_out;
                // Every element of col[..kk·ld] and gyb[..og·ld] is written below before
                // the product reads it.
                let (col, gyb) = (&mut col[..d.kk * ld], &mut gyb[..d.og * ld]);
                for g in 0..p.groups {
                    for i in 0..nb {
                        let b = start + i;
                        let img = &x[b * d.img_in..(b + 1) * d.img_in];
                        im2col(img, p, g * d.cg, d.cg, &mut col[i * d.hw_out..], ld);
                        for o in 0..d.og {
                            let src = (b * p.out_channels + g * d.og + o) * d.hw_out;
                            gyb[o * ld + i * d.hw_out..o * ld + (i + 1) * d.hw_out]
                                .copy_from_slice(&gy[src..src + d.hw_out]);
                        }
                    }
                    // gW_gᵀ [kk × og] = col_block [kk × ld] · gy_blockᵀ [ld × og]
                    unsafe {
                        gemm_raw(
                            d.kk,
                            d.og,
                            ld,
                            gwt.as_mut_ptr(),
                            false,
                            col.as_ptr(),
                            ld as isize,
                            1,
                            gyb.as_ptr(),
                            1,
                            ld as isize,
                            if spare {
                                parallelism_for(d.kk, d.og, ld)
                            } else {
                                Parallelism::None
                            },
                        )
                    }
                    let gw_g = &mut gw[g * d.og * d.kk..(g + 1) * d.og * d.kk];
                    for (r, row) in gwt.chunks_exact(d.og).enumerate() {
                        for (o, &v) in row.iter().enumerate() {
                            gw_g[o * d.kk + r] = v;
                        }
                    }
                }
                gw
            },
        )
        .collect();
    let mut it = partials.into_iter();
    let mut gw = it.next().unwrap_or_else(|| vec![T::zero(); wlen]);
    for part in it {
        for (a, b) in gw.iter_mut().zip(part) {
            *a += b;
        }
    }
    gw
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Direct definition of the convolution, for checking the lowered version.
    fn naive(x: &[f64], w: &[f64], p: &Conv2dParams) -> Vec<f64> {
        let (oh, ow) = (p.out_h(), p.out_w());
        let cg = p.in_channels / p.groups;
        let og = p.out_channels / p.groups;
        let mut out = vec![0.0; p.batch * p.out_channels * oh * ow];
        for b in 0..p.batch {
            for o in 0..p.out_channels {
                let g = o / og;
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut s = 0.0;
                        for c in 0..cg {
                            for ky in 0..p.k_h {
                                for kx in 0..p.k_w {
                                    let iy = (oy * p.stride.0 + ky * p.dilation.0) as isize
                                        - p.padding.0 as isize;
                                    let ix = (ox * p.stride.1 + kx * p.dilation.1) as isize
                                        - p.padding.1 as isize;
                                    if iy < 0
                                        || ix < 0
                                        || iy >= p.in_h as isize
                                        || ix >= p.in_w as isize
                                    {
                                        continue;
                                    }
                                    let xi = ((b * p.in_channels + g * cg + c) * p.in_h
                                        + iy as usize)
                                        * p.in_w
                                        + ix as usize;
                                    let wi = ((o * cg + c) * p.k_h + ky) * p.k_w + kx;
                                    s += x[xi] * w[wi];
                                }
                            }
                        }
                        out[((b * p.out_channels + o) * oh + oy) * ow + ox] = s;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn lowered_convolution_matches_the_definition() {
        let mut rng = crate::Rng::new(3);
        for &(stride, pad, dil, groups, k) in &[
            ((1, 1), (1, 1), (1, 1), 1, 3),
            ((2, 1), (0, 2), (2, 1), 2, 3),
            ((1, 1), (0, 0), (1, 1), 2, 1),
            ((2, 2), (1, 0), (1, 2), 1, 2),
        ] {
            let p = Conv2dParams {
                batch: 2,
                in_channels: 4,
                in_h: 7,
                in_w: 6,
                out_channels: 6,
                k_h: k,
                k_w: k,
                stride,
                padding: pad,
                dilation: dil,
                groups,
            };
            let x: Vec<f64> = (0..p.in_shape().elem_count())
                .map(|_| rng.normal())
                .collect();
            let w: Vec<f64> = (0..p.weight_shape().elem_count())
                .map(|_| rng.normal())
                .collect();
            let got = conv2d(&x, &w, &p);
            let want = naive(&x, &w, &p);
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() < 1e-9, "{p:?}: {a} vs {b}");
            }
        }
    }

    /// Stride-1 convolutions take `shifted_plane` wherever the output rows are as wide as
    /// the input's: "same" padding, dilations, kernels reaching past the plane (|y_off| ≥
    /// h), vertical padding other than horizontal, tiny planes. Each against the definition.
    #[test]
    fn shifted_plane_im2col_matches_the_definition() {
        let mut rng = crate::Rng::new(11);
        let mut flat_cases = 0;
        for (h, w) in [(1, 1), (2, 3), (5, 4), (7, 6)] {
            for (k_h, k_w) in [(1, 1), (3, 3), (2, 3), (3, 1)] {
                for dil in [(1, 1), (2, 2), (3, 1)] {
                    for pad_h in 0..=4 {
                        // The horizontal padding that keeps ow == w, and one that does not.
                        let same: usize = dil.1 * (k_w - 1);
                        for pad_w in [same / 2, same.div_ceil(2) + 1] {
                            let p = Conv2dParams {
                                batch: 1,
                                in_channels: 2,
                                in_h: h,
                                in_w: w,
                                out_channels: 3,
                                k_h,
                                k_w,
                                stride: (1, 1),
                                padding: (pad_h, pad_w),
                                dilation: dil,
                                groups: 1,
                            };
                            if (h + 2 * pad_h) < dil.0 * (k_h - 1) + 1
                                || (w + 2 * pad_w) < dil.1 * (k_w - 1) + 1
                            {
                                continue;
                            }
                            if p.out_w() == w && !is_pointwise(&p) {
                                flat_cases += 1;
                            }
                            let x: Vec<f64> = (0..p.in_shape().elem_count())
                                .map(|_| rng.normal())
                                .collect();
                            let wt: Vec<f64> = (0..p.weight_shape().elem_count())
                                .map(|_| rng.normal())
                                .collect();
                            let (got, want) = (conv2d(&x, &wt, &p), naive(&x, &wt, &p));
                            assert_eq!(got.len(), want.len(), "{p:?}");
                            for (a, b) in got.iter().zip(&want) {
                                assert!((a - b).abs() < 1e-9, "{p:?}: {a} vs {b}");
                            }
                        }
                    }
                }
            }
        }
        assert!(
            flat_cases > 50,
            "only {flat_cases} cases took the shifted-plane path"
        );
    }

    /// The weight gradient is the same bits on 1, 2, 3 and 8 threads, for a batch whose
    /// cache bound makes several blocks (16 channels of 24×24: 9 images per block) and
    /// for one that fits in a single block (64 channels of 6×6), where the threads go
    /// into the product instead.
    #[test]
    fn weight_gradient_does_not_depend_on_the_thread_count() {
        let conv = |batch, channels, side| Conv2dParams {
            batch,
            in_channels: channels,
            in_h: side,
            in_w: side,
            out_channels: channels,
            k_h: 3,
            k_w: 3,
            stride: (1, 1),
            padding: (1, 1),
            dilation: (1, 1),
            groups: 1,
        };
        for p in [conv(40, 16, 24), conv(8, 64, 6)] {
            check_thread_independence(&p);
        }
    }

    fn check_thread_independence(p: &Conv2dParams) {
        let mut rng = crate::Rng::new(5);
        let x: Vec<f32> = (0..p.in_shape().elem_count())
            .map(|_| rng.normal() as f32)
            .collect();
        let gy: Vec<f32> = (0..p.batch * p.out_channels * p.out_h() * p.out_w())
            .map(|_| rng.normal() as f32)
            .collect();
        let on = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| conv2d_backward_weight(&x, &gy, p))
        };
        let one = on(1);
        for threads in [2, 3, 8] {
            assert!(one == on(threads), "{p:?}: {threads} threads differ from 1");
        }
    }
}
