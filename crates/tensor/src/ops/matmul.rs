//! Matrix products: `[..., m, k] @ [..., k, n]` with equal batch dimensions, or with a
//! shared 2-d right operand (`[..., m, k] @ [k, n]`, a Linear layer over a sequence).

use crate::op::Op;
use crate::storage::BackendStorage;
use crate::{Error, Layout, Result, Shape, Tensor};

/// A 3-d `[b, rows, cols]` layout of `t` (batch stride 0 for a shared 2-d matrix).
fn as_batched(t: &Tensor, b: usize) -> Result<(Tensor, Layout)> {
    let d = t.dims();
    let r = d.len();
    let (rows, cols) = (d[r - 2], d[r - 1]);
    let s = t.layout().strides();
    match r {
        2 => Ok((
            t.clone(),
            Layout::new(
                Shape::new([b, rows, cols]),
                vec![0, s[0], s[1]],
                t.layout().offset(),
            ),
        )),
        3 => Ok((t.clone(), t.layout().clone())),
        _ => {
            let c = t.contiguous()?;
            let l = Layout::new(
                Shape::new([b, rows, cols]),
                vec![rows * cols, cols, 1],
                c.layout().offset(),
            );
            Ok((c, l))
        }
    }
}

impl Tensor {
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.check_float("matmul")?;
        self.check_same_dtype(rhs, "matmul")?;
        let bad = || Error::ShapeMismatch {
            op: "matmul",
            lhs: self.shape().clone(),
            rhs: rhs.shape().clone(),
        };
        let (ra, rb) = (self.rank(), rhs.rank());
        if ra < 2 || rb < 2 {
            return Err(bad());
        }
        let (m, k) = (self.dims()[ra - 2], self.dims()[ra - 1]);
        let (k2, n) = (rhs.dims()[rb - 2], rhs.dims()[rb - 1]);
        let batch_dims = &self.dims()[..ra - 2];
        if k != k2 || (rb > 2 && rhs.dims()[..rb - 2] != *batch_dims) {
            return Err(bad());
        }
        let b: usize = batch_dims.iter().product();
        if rb == 2 && ra > 2 && self.is_contiguous() {
            // A shared right operand (a Linear layer over a sequence): one [b·m, k] @ [k, n]
            // product instead of b products of m rows (35 GEMMs of 20 rows for the LSTM
            // language model's decoder). Reshape records its own gradient.
            let mut out = batch_dims.to_vec();
            out.extend([m, n]);
            return self.reshape(vec![b * m, k])?.matmul(rhs)?.reshape(out);
        }
        let (lt, ll) = as_batched(self, b)?;
        let (rt, rl) = as_batched(rhs, b)?;
        let s = lt.storage().matmul(&ll, &rt.storage(), &rl, (b, m, n, k))?;
        let mut out = batch_dims.to_vec();
        out.extend([m, n]);
        Ok(Tensor::from_storage(
            s,
            out,
            Some(Op::Matmul(self.clone(), rhs.clone())),
        ))
    }
}
