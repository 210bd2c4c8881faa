//! One SGD-with-momentum step in place on the CPU, the same operation order as
//! kernels/optim.cu and the composed tensor ops it replaces.

use super::{mismatch, CpuStorage};
use crate::storage::SgdStep;
use crate::{Float, Result};
use rayon::prelude::*;

pub(crate) fn sgd<T: Float>(p: &mut [T], g: &[T], b: &mut [T], h: SgdStep) {
    let (lr, m, wd) = (
        <T as Float>::from_f64(h.lr),
        <T as Float>::from_f64(h.momentum),
        <T as Float>::from_f64(h.weight_decay),
    );
    p.par_iter_mut()
        .zip(g.par_iter())
        .zip(b.par_iter_mut())
        .with_min_len(1 << 14)
        .for_each(|((p, &g), b)| {
            let mut d = g;
            if wd != T::zero() {
                d += *p * wd;
            }
            let nb = if h.first { d } else { *b * m + d };
            *b = nb;
            let step = if h.nesterov { d + nb * m } else { nb };
            *p -= step * lr;
        });
}

/// [`sgd`] on storages of one float dtype: parameter and momentum buffer in place.
pub(crate) fn run(
    p: &mut CpuStorage,
    g: &CpuStorage,
    b: &mut CpuStorage,
    h: SgdStep,
) -> Result<()> {
    match (&mut *p, g, &mut *b) {
        (CpuStorage::F32(p), CpuStorage::F32(g), CpuStorage::F32(b)) => sgd(p, g, b, h),
        (CpuStorage::F64(p), CpuStorage::F64(g), CpuStorage::F64(b)) => sgd(p, g, b, h),
        _ => return Err(mismatch("sgd_momentum", p, g)),
    }
    Ok(())
}
