//! Top-k, k-th value and sort along a dimension, by selection (O(n) per row, then a sort
//! of the k selected). Results are not recorded by autograd: these feed gradient
//! compression, which works on gradients, not inside the graph.

use crate::cpu::CpuStorage;
use crate::cuda::CudaStorage;
use crate::storage::fused::Fused;
use crate::storage::Storage;
use crate::{Error, Result, Tensor};

impl Tensor {
    /// The `k` largest (or smallest) entries along `dim`, sorted, and their U32 indices.
    /// Ties keep the lower index first; NaN sorts as the largest value.
    pub fn topk(&self, k: usize, dim: usize, largest: bool) -> Result<(Tensor, Tensor)> {
        self.check_float("topk")?;
        self.shape().check_dim(dim, "topk")?;
        let last = self.rank() - 1;
        if dim != last {
            let (v, i) = self.transpose(dim, last)?.topk(k, last, largest)?;
            return Ok((
                v.transpose(dim, last)?.contiguous()?,
                i.transpose(dim, last)?.contiguous()?,
            ));
        }
        let cols = self.dims()[last];
        if cols > u32::MAX as usize {
            return Err(Error::BadShape {
                op: "topk",
                msg: format!("{cols} entries in a row: indices are u32, at most 2^32 − 1"),
                shape: self.shape().clone(),
            });
        }
        if k > cols {
            return Err(Error::BadShape {
                op: "topk",
                msg: format!("k = {k} exceeds dimension {dim} of size {cols}"),
                shape: self.shape().clone(),
            });
        }
        let rows = self.elem_count() / cols.max(1);
        let x = self.contiguous()?.detach();
        let kernel = Topk {
            rows,
            cols,
            k,
            largest,
        };
        let [v, i] = Storage::run(&kernel, &[&x.storage()])?;
        let mut out = self.dims().to_vec();
        out[last] = k;
        Ok((
            Tensor::from_storage(v, out.clone(), None),
            Tensor::from_storage(i, out, None),
        ))
    }
    /// The k-th smallest value along `dim` (k counts from 1, as `torch.kthvalue`) and its index.
    pub fn kthvalue(&self, k: usize, dim: usize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        self.shape().check_dim(dim, "kthvalue")?;
        if k == 0 || k > self.dims()[dim] {
            return Err(Error::BadShape {
                op: "kthvalue",
                msg: format!("k = {k} is not in 1..={}", self.dims()[dim]),
                shape: self.shape().clone(),
            });
        }
        let (v, i) = self.topk(k, dim, false)?;
        let (v, i) = (
            v.narrow(dim, k - 1, 1)?.contiguous()?,
            i.narrow(dim, k - 1, 1)?.contiguous()?,
        );
        if keepdim {
            Ok((v, i))
        } else {
            Ok((v.squeeze(dim)?, i.squeeze(dim)?))
        }
    }
    /// Sorted values along `dim` and the U32 permutation that sorts them.
    pub fn sort(&self, dim: usize, descending: bool) -> Result<(Tensor, Tensor)> {
        self.shape().check_dim(dim, "sort")?;
        self.topk(self.dims()[dim], dim, descending)
    }
}

/// Top-k along the last dimension of a contiguous `[rows, cols]` float input: values
/// (sorted, largest first when `largest`) and U32 indices, `[rows, k]` each.
struct Topk {
    rows: usize,
    cols: usize,
    k: usize,
    largest: bool,
}
impl Fused for Topk {
    const NAME: &'static str = "topk";
    fn cpu(&self, inputs: &[&CpuStorage]) -> Result<Vec<CpuStorage>> {
        let (v, i) = crate::cpu::select::run(inputs[0], self.cols, self.k, self.largest)?;
        Ok(vec![v, i])
    }
    fn cuda(&self, inputs: &[&CudaStorage]) -> Result<Vec<CudaStorage>> {
        let (v, i) =
            crate::cuda::select::run(inputs[0], self.rows, self.cols, self.k, self.largest)?;
        Ok(vec![v, i])
    }
}
