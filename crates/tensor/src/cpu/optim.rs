//! One SGD-with-momentum step in place on the CPU, the same operation order as
//! kernels/optim.cu and the composed tensor ops it replaces.

use crate::storage::SgdStep;
use crate::Float;
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
