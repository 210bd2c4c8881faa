//! Max and average 2-d pooling over contiguous NCHW input, forward and backward.
//! Max pooling's backward recomputes the arg-max of each window (first maximum wins, as
//! in PyTorch) instead of storing indices, which keeps the op's saved state to its input.

use crate::storage::{Pool2dParams, PoolKind};
use crate::Float;
use rayon::prelude::*;

/// Visits the in-bounds input offsets of output position (oy, ox) within one plane.
#[inline]
fn window(p: &Pool2dParams, oy: usize, ox: usize, mut f: impl FnMut(usize)) {
    let y0 = (oy * p.stride.0) as isize - p.padding.0 as isize;
    let x0 = (ox * p.stride.1) as isize - p.padding.1 as isize;
    for ky in 0..p.kernel.0 as isize {
        let iy = y0 + ky;
        if iy < 0 || iy >= p.in_h as isize {
            continue;
        }
        for kx in 0..p.kernel.1 as isize {
            let ix = x0 + kx;
            if ix >= 0 && ix < p.in_w as isize {
                f(iy as usize * p.in_w + ix as usize);
            }
        }
    }
}

fn argmax_in_window<T: Float>(
    plane: &[T],
    p: &Pool2dParams,
    oy: usize,
    ox: usize,
) -> Option<usize> {
    let mut best: Option<usize> = None;
    window(p, oy, ox, |i| {
        if best.is_none_or(|b| plane[i] > plane[b] || plane[i].is_nan()) {
            best = Some(i);
        }
    });
    best
}

pub(crate) fn pool2d<T: Float>(x: &[T], p: &Pool2dParams) -> Vec<T> {
    let (oh, ow) = (p.out_h(), p.out_w());
    let plane_in = p.in_h * p.in_w;
    let divisor = T::from_f64((p.kernel.0 * p.kernel.1) as f64);
    let mut out = vec![T::zero(); p.batch * p.channels * oh * ow];
    out.par_chunks_mut(oh * ow).enumerate().for_each(|(pi, y)| {
        let plane = &x[pi * plane_in..(pi + 1) * plane_in];
        for oy in 0..oh {
            for ox in 0..ow {
                y[oy * ow + ox] = match p.kind {
                    PoolKind::Max => {
                        argmax_in_window(plane, p, oy, ox).map_or(T::neg_infinity(), |i| plane[i])
                    }
                    PoolKind::Avg => {
                        let mut s = T::zero();
                        window(p, oy, ox, |i| s += plane[i]);
                        s / divisor
                    }
                };
            }
        }
    });
    out
}

pub(crate) fn pool2d_backward<T: Float>(x: &[T], gy: &[T], p: &Pool2dParams) -> Vec<T> {
    let (oh, ow) = (p.out_h(), p.out_w());
    let plane_in = p.in_h * p.in_w;
    let divisor = T::from_f64((p.kernel.0 * p.kernel.1) as f64);
    let mut gx = vec![T::zero(); p.batch * p.channels * plane_in];
    gx.par_chunks_mut(plane_in).enumerate().for_each(|(pi, g)| {
        let plane = &x[pi * plane_in..(pi + 1) * plane_in];
        let gplane = &gy[pi * oh * ow..(pi + 1) * oh * ow];
        for oy in 0..oh {
            for ox in 0..ow {
                let v = gplane[oy * ow + ox];
                match p.kind {
                    PoolKind::Max => {
                        if let Some(i) = argmax_in_window(plane, p, oy, ox) {
                            g[i] += v;
                        }
                    }
                    PoolKind::Avg => {
                        let share = v / divisor;
                        window(p, oy, ox, |i| g[i] += share);
                    }
                }
            }
        }
    });
    gx
}
