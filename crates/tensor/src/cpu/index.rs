//! Gathers and scatters along one dimension: `index_select` (embedding lookup is
//! `index_select` on dimension 0) and its transpose `index_add` (the embedding gradient).

use crate::{Error, Result, Shape};

/// Splits `shape` around `dim` into (outer, size, inner).
fn split(shape: &Shape, dim: usize) -> (usize, usize, usize) {
    let d = shape.dims();
    (
        d[..dim].iter().product(),
        d[dim],
        d[dim + 1..].iter().product(),
    )
}

fn check_ids(ids: &[u32], size: usize, op: &'static str) -> Result<()> {
    match ids.iter().find(|&&i| i as usize >= size) {
        Some(&i) => Err(Error::IndexOutOfRange {
            op,
            index: i as usize,
            size,
        }),
        None => Ok(()),
    }
}

pub(crate) fn index_select<T: Copy + Default + Send + Sync>(
    src: &[T],
    shape: &Shape,
    ids: &[u32],
    dim: usize,
) -> Result<Vec<T>> {
    let (outer, size, inner) = split(shape, dim);
    check_ids(ids, size, "index_select")?;
    let mut out = Vec::with_capacity(outer * ids.len() * inner);
    for o in 0..outer {
        for &i in ids {
            let base = (o * size + i as usize) * inner;
            out.extend_from_slice(&src[base..base + inner]);
        }
    }
    Ok(out)
}

pub(crate) fn index_add<T: crate::Float>(
    src: &[T],
    src_shape: &Shape,
    ids: &[u32],
    dim: usize,
    out_shape: &Shape,
) -> Result<Vec<T>> {
    let (outer, n_ids, inner) = split(src_shape, dim);
    let size = out_shape.dims()[dim];
    check_ids(ids, size, "index_add")?;
    let mut out = vec![T::zero(); out_shape.elem_count()];
    for o in 0..outer {
        for (j, &i) in ids.iter().enumerate() {
            let s = (o * n_ids + j) * inner;
            let d = (o * size + i as usize) * inner;
            for (a, &b) in out[d..d + inner].iter_mut().zip(&src[s..s + inner]) {
                *a += b;
            }
        }
    }
    Ok(out)
}
