//! Reductions over any set of axes (sum, max, min, argmax), producing the keepdim shape.
//!
//! The input is first made contiguous and viewed as `[outer, reduced..., inner]` blocks
//! when the reduced axes are adjacent (the common case: a last axis, or the batch and
//! spatial axes of batch norm run separately); otherwise we fall back to an index walk.
//!
//! Sums accumulate in f64 and round once, as the CUDA kernels do: a naive f32 running sum
//! of 1M values drifts by ~5e-5 relative where values cancel (measured against the GPU's
//! double accumulation on an H100), which is more than the 1e-5 the two backends must
//! agree to, and a loss of accuracy the reference side should not have.

use crate::storage::ReduceOp;
use crate::{Float, Layout, Shape};
use rayon::prelude::*;

/// Columns per parallel task when a single block is reduced down its rows.
const COL_BLOCK: usize = 1024;

pub(crate) fn reduce<T: Float>(src: &[T], layout: &Layout, dims: &[usize], op: ReduceOp) -> Vec<T> {
    let data = super::elementwise::dense(src, layout);
    let shape = layout.dims();
    let rank = shape.len();
    let mut out_dims = shape.to_vec();
    for &d in dims {
        out_dims[d] = 1;
    }
    let out_n: usize = out_dims.iter().product();
    if out_n == 0 {
        // A kept axis of size 0: the result is empty (and the row split below would ask
        // for chunks of length 0, which panics).
        return Vec::new();
    }
    let mut sorted = dims.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let adjacent = sorted.windows(2).all(|w| w[1] == w[0] + 1);
    if sorted.is_empty() {
        return data.into_owned();
    }
    if adjacent {
        let (first, last) = (sorted[0], *sorted.last().unwrap_or(&0));
        let outer: usize = shape[..first].iter().product();
        let red: usize = shape[first..=last].iter().product();
        let inner: usize = shape[last + 1..].iter().product();
        let mut out = vec![T::zero(); outer * inner];
        // Columns `i0..i0 + out_cols.len()` of block `o`. Each column's fold runs over its
        // rows in order whatever the split, so results do not depend on the thread count.
        let reduce_cols = |o: usize, i0: usize, out_cols: &mut [T]| {
            let base = o * red * inner;
            if inner == 1 {
                out_cols[0] = fold(&data[base..base + red], op);
                return;
            }
            let cols = i0..i0 + out_cols.len();
            match op {
                ReduceOp::Sum => {
                    let mut acc = vec![0f64; out_cols.len()];
                    for r in 0..red {
                        let row = &data[base + r * inner..base + (r + 1) * inner];
                        for (a, &b) in acc.iter_mut().zip(&row[cols.clone()]) {
                            *a += Float::to_f64(b);
                        }
                    }
                    for (o, a) in out_cols.iter_mut().zip(acc) {
                        *o = <T as Float>::from_f64(a);
                    }
                }
                ReduceOp::Max | ReduceOp::Min | ReduceOp::ArgMax => {
                    for (i, slot) in cols.zip(out_cols.iter_mut()) {
                        let col: Vec<T> = (0..red).map(|r| data[base + r * inner + i]).collect();
                        *slot = fold(&col, op);
                    }
                }
            }
        };
        let big = outer * red * inner >= super::elementwise::PAR_THRESHOLD;
        if big && outer > 1 {
            out.par_chunks_mut(inner)
                .enumerate()
                .for_each(|(o, row)| reduce_cols(o, 0, row));
        } else if big && inner >= 2 * COL_BLOCK {
            // One block (a bias gradient: the batch summed away from [rows, features]):
            // its columns in parallel.
            out.par_chunks_mut(COL_BLOCK)
                .enumerate()
                .for_each(|(b, cols)| reduce_cols(0, b * COL_BLOCK, cols));
        } else {
            out.chunks_mut(inner)
                .enumerate()
                .for_each(|(o, row)| reduce_cols(o, 0, row));
        }
        return out;
    }
    // General case: accumulate each element into its output slot.
    let out_strides = Shape::new(out_dims.clone()).contiguous_strides();
    let mut slots: Vec<Vec<T>> = vec![Vec::new(); out_n];
    let mut idx = vec![0usize; rank];
    for &v in data.iter() {
        let mut o = 0;
        for d in 0..rank {
            if out_dims[d] != 1 || !sorted.contains(&d) {
                o += idx[d] * out_strides[d];
            }
        }
        slots[o].push(v);
        for d in (0..rank).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    slots.iter().map(|s| fold(s, op)).collect()
}

#[inline]
fn fold<T: Float>(xs: &[T], op: ReduceOp) -> T {
    match op {
        ReduceOp::Sum => <T as Float>::from_f64(xs.iter().map(|&x| Float::to_f64(x)).sum::<f64>()),
        ReduceOp::Max => {
            xs.iter().copied().fold(
                T::neg_infinity(),
                |a, b| if b > a || b.is_nan() { b } else { a },
            )
        }
        ReduceOp::Min => {
            xs.iter().copied().fold(
                T::infinity(),
                |a, b| if b < a || b.is_nan() { b } else { a },
            )
        }
        // Routed to `argmax` by the caller, which returns indices rather than values.
        ReduceOp::ArgMax => T::nan(),
    }
}

/// Index of the first maximum along `dim` (NaN counts as the maximum, as in PyTorch).
pub(crate) fn argmax<T: Float>(src: &[T], layout: &Layout, dim: usize) -> Vec<u32> {
    let data = super::elementwise::dense(src, layout);
    let shape = layout.dims();
    let outer: usize = shape[..dim].iter().product();
    let red = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let mut out = vec![0u32; outer * inner];
    for o in 0..outer {
        for i in 0..inner {
            let at = |r: usize| data[(o * red + r) * inner + i];
            let mut best = 0;
            for r in 1..red {
                if at(best).is_nan() {
                    break;
                }
                if at(r) > at(best) || at(r).is_nan() {
                    best = r;
                }
            }
            out[o * inner + i] = best as u32;
        }
    }
    out
}
