//! Top-k along the last dimension by selection (`select_nth_unstable_by`, O(n) per row),
//! sorting only the k selected values. NaNs order as the largest values.

use super::{unsupported, CpuStorage};
use crate::{DType, Float, Result};
use rayon::prelude::*;
use std::cmp::Ordering;

fn cmp<T: Float>(a: T, b: T) -> Ordering {
    a.partial_cmp(&b)
        .unwrap_or_else(|| a.is_nan().cmp(&b.is_nan()))
}

pub(crate) fn topk<T: Float>(x: &[T], cols: usize, k: usize, largest: bool) -> (Vec<T>, Vec<u32>) {
    let rows = x.len().checked_div(cols).unwrap_or(0);
    let per_row: Vec<(Vec<T>, Vec<u32>)> = (0..rows)
        .into_par_iter()
        .map(|r| {
            let row = &x[r * cols..(r + 1) * cols];
            let mut idx: Vec<u32> = (0..cols as u32).collect();
            let order = |a: &u32, b: &u32| {
                let o = cmp(row[*a as usize], row[*b as usize]);
                // Ties resolve to the lower index first, for determinism.
                let o = if largest { o.reverse() } else { o };
                o.then(a.cmp(b))
            };
            if k < cols && k > 0 {
                idx.select_nth_unstable_by(k - 1, order);
            }
            idx.truncate(k);
            idx.sort_unstable_by(order);
            (idx.iter().map(|&i| row[i as usize]).collect(), idx)
        })
        .collect();
    let mut values = Vec::with_capacity(rows * k);
    let mut indices = Vec::with_capacity(rows * k);
    for (v, i) in per_row {
        values.extend(v);
        indices.extend(i);
    }
    (values, indices)
}

/// [`topk`] on a storage: the values in its dtype and U32 indices.
pub(crate) fn run(
    x: &CpuStorage,
    cols: usize,
    k: usize,
    largest: bool,
) -> Result<(CpuStorage, CpuStorage)> {
    match x {
        CpuStorage::F32(v) => {
            let (a, b) = topk(v, cols, k, largest);
            Ok((CpuStorage::F32(a), CpuStorage::U32(b)))
        }
        CpuStorage::F64(v) => {
            let (a, b) = topk(v, cols, k, largest);
            Ok((CpuStorage::F64(a), CpuStorage::U32(b)))
        }
        CpuStorage::U32(_) => Err(unsupported("topk", DType::U32)),
    }
}
