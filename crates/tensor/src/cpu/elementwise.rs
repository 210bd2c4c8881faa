//! Elementwise kernels: unary maps, broadcasting binary ops, `where`, strided copies.
//! Contiguous inputs take a slice fast path (parallel above `PAR_THRESHOLD` elements);
//! strided ones walk their layout.

use crate::storage::{BinaryOp, UnaryOp};
use crate::{Float, Layout};
use rayon::prelude::*;

/// Below this many elements the rayon fork-join costs more than it saves.
pub(crate) const PAR_THRESHOLD: usize = 1 << 15;

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

#[inline]
fn unary_fn<T: Float>(op: UnaryOp) -> impl Fn(T) -> T + Sync {
    let zero = T::zero();
    let one = T::one();
    move |x: T| match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sign => {
            if x > zero {
                one
            } else if x < zero {
                -one
            } else {
                zero
            }
        }
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => one / (one + (-x).exp()),
        UnaryOp::Relu => {
            if x > zero {
                x
            } else {
                zero
            }
        }
        UnaryOp::Sqr => x * x,
        UnaryOp::Recip => one / x,
        UnaryOp::Affine { mul, add } => x * T::from_f64(mul) + T::from_f64(add),
        UnaryOp::Powf(e) => x.powf(T::from_f64(e)),
        UnaryOp::Clamp { min, max } => x.max(T::from_f64(min)).min(T::from_f64(max)),
        UnaryOp::InRange { min, max } => {
            if x >= T::from_f64(min) && x <= T::from_f64(max) {
                one
            } else {
                zero
            }
        }
    }
}

pub(crate) fn unary<T: Float>(src: &[T], layout: &Layout, op: UnaryOp) -> Vec<T> {
    let f = unary_fn::<T>(op);
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

#[inline]
fn binary_fn<T: Float>(op: BinaryOp) -> impl Fn(T, T) -> T + Sync {
    let b = |c: bool| if c { T::one() } else { T::zero() };
    move |a: T, c: T| match op {
        BinaryOp::Add => a + c,
        BinaryOp::Sub => a - c,
        BinaryOp::Mul => a * c,
        BinaryOp::Div => a / c,
        BinaryOp::Maximum => a.max(c),
        BinaryOp::Minimum => a.min(c),
        BinaryOp::Eq => b(a == c),
        BinaryOp::Ne => b(a != c),
        BinaryOp::Lt => b(a < c),
        BinaryOp::Le => b(a <= c),
        BinaryOp::Gt => b(a > c),
        BinaryOp::Ge => b(a >= c),
    }
}

pub(crate) fn binary<T: Float>(
    lhs: &[T],
    ll: &Layout,
    rhs: &[T],
    rl: &Layout,
    op: BinaryOp,
) -> Vec<T> {
    let f = binary_fn::<T>(op);
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
        // The common broadcast: a contiguous tensor against a bias-like row/column; a
        // general strided walk on the right side is still linear in the element count.
        (Some(a), None) => lhs[a]
            .iter()
            .zip(rl.strided_index())
            .map(|(&x, j)| f(x, rhs[j]))
            .collect(),
        (None, Some(b)) => ll
            .strided_index()
            .zip(rhs[b].iter())
            .map(|(i, &y)| f(lhs[i], y))
            .collect(),
        (None, None) => ll
            .strided_index()
            .zip(rl.strided_index())
            .map(|(i, j)| f(lhs[i], rhs[j]))
            .collect(),
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
