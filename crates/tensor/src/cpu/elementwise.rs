//! Elementwise kernels: unary maps, broadcasting binary ops, `where`, strided copies.
//! Contiguous inputs take a slice fast path (parallel above `PAR_THRESHOLD` elements);
//! strided ones walk their layout.

use crate::storage::{BinaryOp, UnaryOp};
use crate::{Float, Layout};
use rayon::prelude::*;

/// Below this many elements the rayon fork-join costs more than it saves.
pub(crate) const PAR_THRESHOLD: usize = 1 << 15;

/// The elements of `layout` in row-major order: borrowed where they already lie so in
/// `src`, gathered otherwise (for readers, so a contiguous input is not copied).
pub(crate) fn dense<'a, T: Copy + Send + Sync>(
    src: &'a [T],
    layout: &Layout,
) -> std::borrow::Cow<'a, [T]> {
    match layout.contiguous_range() {
        Some(r) => std::borrow::Cow::Borrowed(&src[r]),
        None => std::borrow::Cow::Owned(gather(src, layout)),
    }
}

/// Gathers the elements of `layout` into a new contiguous vector.
pub(crate) fn gather<T: Copy + Send + Sync>(src: &[T], layout: &Layout) -> Vec<T> {
    match layout.contiguous_range() {
        Some(r) => src[r].to_vec(),
        None => {
            // Copy whole inner rows when the last dimension is dense.
            let dims = layout.dims();
            if let (Some(&last), Some(&1)) = (dims.last(), layout.strides().last()) {
                if last > 1 {
                    let outer = Layout::new(
                        crate::Shape::new(&dims[..dims.len() - 1]),
                        layout.strides()[..dims.len() - 1].to_vec(),
                        layout.offset(),
                    );
                    let mut out = Vec::with_capacity(layout.elem_count());
                    for start in outer.strided_index() {
                        out.extend_from_slice(&src[start..start + last]);
                    }
                    return out;
                }
            }
            layout.strided_index().map(|i| src[i]).collect()
        }
    }
}

/// Applies `f` to every element of `layout`. Monomorphised per op: the op is matched once
/// per call, never per element.
fn map<T: Float>(src: &[T], layout: &Layout, f: impl Fn(T) -> T + Sync + Send) -> Vec<T> {
    match layout.contiguous_range() {
        Some(r) => {
            let s = &src[r];
            if s.len() >= PAR_THRESHOLD {
                s.par_iter().map(|&x| f(x)).collect()
            } else {
                s.iter().map(|&x| f(x)).collect()
            }
        }
        None => layout.strided_index().map(|i| f(src[i])).collect(),
    }
}

pub(crate) fn unary<T: Float>(src: &[T], l: &Layout, op: UnaryOp) -> Vec<T> {
    let (zero, one) = (T::zero(), T::one());
    match op {
        UnaryOp::Neg => map(src, l, |x| -x),
        UnaryOp::Abs => map(src, l, |x| x.abs()),
        // Two selects and a subtraction instead of an if-chain: branch-free, so random
        // signs do not mispredict (the chain cost 6x a ReLU on Gaussian input).
        UnaryOp::Sign => map(src, l, move |x| {
            (if x > zero { one } else { zero }) - (if x < zero { one } else { zero })
        }),
        UnaryOp::Sqrt => map(src, l, |x| x.sqrt()),
        UnaryOp::Exp => map(src, l, |x| x.kernel_exp()),
        UnaryOp::Log => map(src, l, |x| x.ln()),
        UnaryOp::Tanh => map(src, l, |x| x.kernel_tanh()),
        UnaryOp::Sigmoid => map(src, l, |x| x.kernel_sigmoid()),
        // NaN passes through, as in PyTorch: a diverged value
        // must not turn into a number on its way to the loss.
        UnaryOp::Relu => map(
            src,
            l,
            move |x| {
                if x > zero || x.is_nan() {
                    x
                } else {
                    zero
                }
            },
        ),
        UnaryOp::Step => map(src, l, move |x| if x > zero { one } else { zero }),
        UnaryOp::Sqr => map(src, l, |x| x * x),
        UnaryOp::Recip => map(src, l, move |x| one / x),
        UnaryOp::Affine { mul, add } => {
            let (m, a) = (T::from_f64(mul), T::from_f64(add));
            map(src, l, move |x| x * m + a)
        }
        UnaryOp::Powf(e) => {
            let e = T::from_f64(e);
            map(src, l, move |x| x.powf(e))
        }
        UnaryOp::Clamp { min, max } => {
            let (lo, hi) = (T::from_f64(min), T::from_f64(max));
            // Comparisons rather than max/min, which ignore NaN: NaN stays NaN.
            map(src, l, move |x| {
                if x < lo {
                    lo
                } else if x > hi {
                    hi
                } else {
                    x
                }
            })
        }
        UnaryOp::InRange { min, max } => {
            let (lo, hi) = (T::from_f64(min), T::from_f64(max));
            map(src, l, move |x| if x >= lo && x <= hi { one } else { zero })
        }
    }
}

/// Applies `f` pairwise over two layouts of the same (broadcast) shape.
fn zip_map<T: Float>(
    lhs: &[T],
    ll: &Layout,
    rhs: &[T],
    rl: &Layout,
    f: impl Fn(T, T) -> T + Sync + Send,
) -> Vec<T> {
    match (ll.contiguous_range(), rl.contiguous_range()) {
        (Some(a), Some(b)) => {
            let (a, b) = (&lhs[a], &rhs[b]);
            if a.len() >= PAR_THRESHOLD {
                a.par_iter()
                    .zip(b.par_iter())
                    .map(|(&x, &y)| f(x, y))
                    .collect()
            } else {
                a.iter().zip(b.iter()).map(|(&x, &y)| f(x, y)).collect()
            }
        }
        // A contiguous tensor against a broadcast one (a bias row, a per-channel column):
        // walk the broadcast side by rows of its innermost dense run.
        (Some(a), None) => broadcast_rows(&lhs[a], rhs, rl, &f),
        (None, Some(b)) => broadcast_rows(&rhs[b], lhs, ll, |y, x| f(x, y)),
        (None, None) => ll
            .strided_index()
            .zip(rl.strided_index())
            .map(|(i, j)| f(lhs[i], rhs[j]))
            .collect(),
    }
}

/// `dense` (contiguous) combined with the strided `other`. The last dimension of `other`
/// has stride 0 (a broadcast scalar per row) or 1 (a dense row), the two cases that
/// batch norm, biases and reductions' gradients produce; other layouts walk every index.
fn broadcast_rows<T: Float>(
    dense: &[T],
    other: &[T],
    ol: &Layout,
    f: impl Fn(T, T) -> T + Sync + Send,
) -> Vec<T> {
    let dims = ol.dims();
    let (Some(&last), Some(&stride)) = (dims.last(), ol.strides().last()) else {
        return dense.iter().map(|&x| f(x, other[ol.offset()])).collect();
    };
    if last == 0 || (stride != 0 && stride != 1) {
        return dense
            .iter()
            .zip(ol.strided_index())
            .map(|(&x, j)| f(x, other[j]))
            .collect();
    }
    let rows = Layout::new(
        crate::Shape::new(&dims[..dims.len() - 1]),
        ol.strides()[..dims.len() - 1].to_vec(),
        ol.offset(),
    );
    let starts: Vec<usize> = rows.strided_index().collect();
    let mut out = vec![T::zero(); dense.len()];
    let row = |(r, (o, d)): (usize, (&mut [T], &[T]))| {
        let start = starts[r];
        if stride == 0 {
            let y = other[start];
            for (oi, &x) in o.iter_mut().zip(d) {
                *oi = f(x, y);
            }
        } else {
            for ((oi, &x), &y) in o.iter_mut().zip(d).zip(&other[start..start + last]) {
                *oi = f(x, y);
            }
        }
    };
    if dense.len() >= PAR_THRESHOLD {
        out.par_chunks_mut(last)
            .zip(dense.par_chunks(last))
            .enumerate()
            .for_each(row);
    } else {
        out.chunks_mut(last)
            .zip(dense.chunks(last))
            .enumerate()
            .for_each(row);
    }
    out
}

pub(crate) fn binary<T: Float>(
    lhs: &[T],
    ll: &Layout,
    rhs: &[T],
    rl: &Layout,
    op: BinaryOp,
) -> Vec<T> {
    let b = |c: bool| if c { T::one() } else { T::zero() };
    match op {
        BinaryOp::Add => zip_map(lhs, ll, rhs, rl, |x, y| x + y),
        BinaryOp::Sub => zip_map(lhs, ll, rhs, rl, |x, y| x - y),
        BinaryOp::Mul => zip_map(lhs, ll, rhs, rl, |x, y| x * y),
        BinaryOp::Div => zip_map(lhs, ll, rhs, rl, |x, y| x / y),
        // NaN in either operand gives NaN, as in PyTorch (Float::max/min ignore it).
        BinaryOp::Maximum => zip_map(
            lhs,
            ll,
            rhs,
            rl,
            |x, y| if x > y || x.is_nan() { x } else { y },
        ),
        BinaryOp::Minimum => zip_map(
            lhs,
            ll,
            rhs,
            rl,
            |x, y| if x < y || x.is_nan() { x } else { y },
        ),
        BinaryOp::Eq => zip_map(lhs, ll, rhs, rl, move |x, y| b(x == y)),
        BinaryOp::Ne => zip_map(lhs, ll, rhs, rl, move |x, y| b(x != y)),
        BinaryOp::Lt => zip_map(lhs, ll, rhs, rl, move |x, y| b(x < y)),
        BinaryOp::Le => zip_map(lhs, ll, rhs, rl, move |x, y| b(x <= y)),
        BinaryOp::Gt => zip_map(lhs, ll, rhs, rl, move |x, y| b(x > y)),
        BinaryOp::Ge => zip_map(lhs, ll, rhs, rl, move |x, y| b(x >= y)),
    }
}

pub(crate) fn where_cond<T: Float>(
    c: &[T],
    cl: &Layout,
    t: &[T],
    tl: &Layout,
    f: &[T],
    fl: &Layout,
) -> Vec<T> {
    cl.strided_index()
        .zip(tl.strided_index())
        .zip(fl.strided_index())
        .map(|((ci, ti), fi)| if c[ci] != T::zero() { t[ti] } else { f[fi] })
        .collect()
}

/// Writes contiguous `src` into the strided view `dst_layout` of `dst`.
pub(crate) fn copy_into<T: Copy>(dst: &mut [T], dst_layout: &Layout, src: &[T]) {
    match dst_layout.contiguous_range() {
        Some(r) => dst[r].copy_from_slice(src),
        None => {
            for (i, &v) in dst_layout.strided_index().zip(src.iter()) {
                dst[i] = v;
            }
        }
    }
}
