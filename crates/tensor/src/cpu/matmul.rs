//! Batched matrix products through the `gemm` crate. `gemm` accepts arbitrary row and
//! column strides, so transposed views (a Linear layer's `x · Wᵀ`, the backward pass's
//! `Aᵀ · G`) are multiplied in place without a copy.

use crate::{Float, Layout};
use gemm::Parallelism;
use rayon::prelude::*;

/// A raw pointer that may cross into rayon tasks; each task writes a disjoint block.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub *mut T);
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

/// Work (m·n·k) above which one product is worth splitting across threads.
const GEMM_PAR_WORK: usize = 48 * 48 * 48;

pub(crate) fn parallelism_for(m: usize, n: usize, k: usize) -> Parallelism {
    let threads = rayon::current_num_threads();
    if threads > 1 && m * n * k >= GEMM_PAR_WORK {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    }
}

/// `dst[m×n] (row-major) = beta_dst·dst + lhs · rhs` with element strides given as
/// (row stride, column stride) for each operand.
///
/// # Safety
/// The pointers must address matrices of the stated sizes and strides.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_raw<T: Float>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    accumulate: bool,
    lhs: *const T,
    lhs_rs: isize,
    lhs_cs: isize,
    rhs: *const T,
    rhs_rs: isize,
    rhs_cs: isize,
    par: Parallelism,
) {
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        n as isize,
        accumulate,
        lhs,
        lhs_cs,
        lhs_rs,
        rhs,
        rhs_cs,
        rhs_rs,
        if accumulate { T::one() } else { T::zero() },
        T::one(),
        false,
        false,
        false,
        par,
    )
}

pub(crate) fn matmul<T: Float>(
    lhs: &[T],
    ll: &Layout,
    rhs: &[T],
    rl: &Layout,
    (b, m, n, k): (usize, usize, usize, usize),
) -> Vec<T> {
    let mut out = vec![T::zero(); b * m * n];
    if m == 0 || n == 0 {
        return out;
    }
    let (ls, rs) = (ll.strides(), rl.strides());
    let (lo, ro) = (ll.offset(), rl.offset());
    let run = |i: usize, dst: *mut T, par: Parallelism| unsafe {
        gemm_raw(
            m,
            n,
            k,
            dst,
            false,
            lhs.as_ptr().add(lo + i * ls[0]),
            ls[1] as isize,
            ls[2] as isize,
            rhs.as_ptr().add(ro + i * rs[0]),
            rs[1] as isize,
            rs[2] as isize,
            par,
        )
    };
    let par = parallelism_for(m, n, k);
    if b > 1 && matches!(par, Parallelism::None) {
        // Many small products: one per task.
        let ptr = SendPtr(out.as_mut_ptr());
        (0..b).into_par_iter().for_each(|i| {
            let p = ptr;
            run(i, unsafe { p.0.add(i * m * n) }, Parallelism::None)
        });
    } else {
        for i in 0..b {
            run(i, unsafe { out.as_mut_ptr().add(i * m * n) }, par);
        }
    }
    out
}
