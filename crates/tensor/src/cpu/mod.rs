//! The CPU backend: `CpuStorage` and its implementation of `BackendStorage`. This file only
//! dispatches on the element type; the kernels live in the sibling files, one per concept,
//! generic over `Float` (f32 and f64). U32 storage holds indices and labels and supports
//! copies and indexing, not arithmetic.

mod conv;
pub(crate) mod ctc;
mod elementwise;
pub(crate) mod fastmath;
mod index;
pub(crate) mod matmul;
pub(crate) mod norm;
pub(crate) mod optim;
mod pool;
mod reduce;
pub(crate) mod rnn;
mod scratch;
pub(crate) mod select;
pub(crate) mod softmax;
mod threads;

pub use threads::run_kernels_here;

use crate::storage::{BackendStorage, BinaryOp, Conv2dParams, Pool2dParams, ReduceOp, UnaryOp};
use crate::{DType, Device, Error, Layout, Result, Shape};

#[derive(Clone, Debug)]
pub enum CpuStorage {
    F32(Vec<f32>),
    F64(Vec<f64>),
    U32(Vec<u32>),
}

/// The slices of `inputs` as one element type, or a dtype-mismatch error naming `op`.
fn typed<'a, T>(
    inputs: &[&'a CpuStorage],
    op: &'static str,
    get: impl Fn(&'a CpuStorage) -> Option<&'a [T]>,
) -> Result<Vec<&'a [T]>> {
    inputs
        .iter()
        .map(|s| {
            get(s).ok_or_else(|| Error::DTypeMismatch {
                op,
                lhs: inputs[0].dtype(),
                rhs: s.dtype(),
            })
        })
        .collect()
}

/// One op on a float storage written once for both float dtypes (candle's `Map1`):
/// `$body` with `$x` bound to the f32 or the f64 data of `$s`, its result wrapped in the
/// same dtype; a U32 storage is an `unsupported` error naming `$op`.
macro_rules! map_float {
    ($s:expr, $op:expr, |$x:ident| $body:expr) => {
        match $s {
            CpuStorage::F32($x) => Ok(CpuStorage::F32($body)),
            CpuStorage::F64($x) => Ok(CpuStorage::F64($body)),
            CpuStorage::U32(_) => Err(unsupported($op, DType::U32)),
        }
    };
}

/// [`map_float`] over two storages of one float dtype (candle's `Map2`); two dtypes are a
/// mismatch, two U32 storages unsupported.
macro_rules! map_float2 {
    ($a:expr, $b:expr, $op:expr, |$x:ident, $y:ident| $body:expr) => {
        match ($a, $b) {
            (CpuStorage::F32($x), CpuStorage::F32($y)) => Ok(CpuStorage::F32($body)),
            (CpuStorage::F64($x), CpuStorage::F64($y)) => Ok(CpuStorage::F64($body)),
            (a, b) => Err(dtype_error($op, a, b)),
        }
    };
}

/// The error of an op given `a` and `b`: unsupported where both have the (integer) dtype,
/// else a mismatch.
fn dtype_error(op: &'static str, a: &CpuStorage, b: &CpuStorage) -> Error {
    if a.dtype() == b.dtype() {
        unsupported(op, a.dtype())
    } else {
        mismatch(op, a, b)
    }
}

fn unsupported(op: &'static str, dtype: DType) -> Error {
    Error::UnsupportedDType {
        op,
        dtype,
        expected: "f32 or f64",
    }
}

fn mismatch(op: &'static str, a: &CpuStorage, b: &CpuStorage) -> Error {
    Error::DTypeMismatch {
        op,
        lhs: a.dtype(),
        rhs: b.dtype(),
    }
}

impl CpuStorage {
    pub fn len(&self) -> usize {
        match self {
            CpuStorage::F32(v) => v.len(),
            CpuStorage::F64(v) => v.len(),
            CpuStorage::U32(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `n` copies of `value`, converted with `as` like every cast here.
    pub fn full(n: usize, value: f64, dtype: DType) -> Self {
        match dtype {
            DType::F32 => CpuStorage::F32(vec![value as f32; n]),
            DType::F64 => CpuStorage::F64(vec![value; n]),
            DType::U32 => CpuStorage::U32(vec![value as u32; n]),
        }
    }
    /// An inverted-dropout mask: element `i` is 0 when `counter_uniform(seed, i) < p`, else
    /// `1 / (1 - p)` (in the dtype); the CUDA kernel computes the same function.
    pub fn dropout_mask(n: usize, p: f64, seed: u64, dtype: DType) -> Result<Self> {
        let keep = 1.0 / (1.0 - p);
        let m = |i: usize| {
            if crate::rng::counter_uniform(seed, i as u64) < p {
                0.0
            } else {
                keep
            }
        };
        match dtype {
            DType::F32 => Ok(CpuStorage::F32((0..n).map(|i| m(i) as f32).collect())),
            DType::F64 => Ok(CpuStorage::F64((0..n).map(m).collect())),
            DType::U32 => Err(unsupported("dropout", dtype)),
        }
    }
    pub fn zeros(n: usize, dtype: DType) -> Self {
        match dtype {
            DType::F32 => CpuStorage::F32(vec![0.0; n]),
            DType::F64 => CpuStorage::F64(vec![0.0; n]),
            DType::U32 => CpuStorage::U32(vec![0; n]),
        }
    }
    /// The f32 elements, if that is the dtype (for [`typed`]).
    fn f32s(&self) -> Option<&[f32]> {
        match self {
            CpuStorage::F32(v) => Some(v),
            _ => None,
        }
    }
    fn f64s(&self) -> Option<&[f64]> {
        match self {
            CpuStorage::F64(v) => Some(v),
            _ => None,
        }
    }
    fn as_u32(&self, op: &'static str) -> Result<&[u32]> {
        match self {
            CpuStorage::U32(v) => Ok(v),
            other => Err(Error::UnsupportedDType {
                op,
                dtype: other.dtype(),
                expected: "u32 indices",
            }),
        }
    }
}

impl BackendStorage for CpuStorage {
    fn dtype(&self) -> DType {
        match self {
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F64(_) => DType::F64,
            CpuStorage::U32(_) => DType::U32,
        }
    }
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn to_cpu(&self) -> Result<CpuStorage> {
        Ok(self.clone())
    }

    fn copy_strided(&self, l: &Layout) -> Result<Self> {
        Ok(match self {
            CpuStorage::F32(v) => CpuStorage::F32(elementwise::gather(v, l)),
            CpuStorage::F64(v) => CpuStorage::F64(elementwise::gather(v, l)),
            CpuStorage::U32(v) => CpuStorage::U32(elementwise::gather(v, l)),
        })
    }

    fn copy_into(&mut self, dst_l: &Layout, src: &Self) -> Result<()> {
        match (self, src) {
            (CpuStorage::F32(d), CpuStorage::F32(s)) => elementwise::copy_into(d, dst_l, s),
            (CpuStorage::F64(d), CpuStorage::F64(s)) => elementwise::copy_into(d, dst_l, s),
            (CpuStorage::U32(d), CpuStorage::U32(s)) => elementwise::copy_into(d, dst_l, s),
            (d, s) => return Err(mismatch("copy_into", d, s)),
        }
        Ok(())
    }

    fn to_dtype(&self, l: &Layout, dtype: DType) -> Result<Self> {
        let c = self.copy_strided(l)?;
        Ok(match (c, dtype) {
            (CpuStorage::F32(v), DType::F64) => {
                CpuStorage::F64(v.iter().map(|&x| x as f64).collect())
            }
            (CpuStorage::F64(v), DType::F32) => {
                CpuStorage::F32(v.iter().map(|&x| x as f32).collect())
            }
            (CpuStorage::U32(v), DType::F32) => {
                CpuStorage::F32(v.iter().map(|&x| x as f32).collect())
            }
            (CpuStorage::U32(v), DType::F64) => {
                CpuStorage::F64(v.iter().map(|&x| x as f64).collect())
            }
            // Float to index: truncation toward zero; negatives and NaN become 0.
            (CpuStorage::F32(v), DType::U32) => {
                CpuStorage::U32(v.iter().map(|&x| x as u32).collect())
            }
            (CpuStorage::F64(v), DType::U32) => {
                CpuStorage::U32(v.iter().map(|&x| x as u32).collect())
            }
            (same, _) => same,
        })
    }

    fn unary(&self, l: &Layout, op: UnaryOp) -> Result<Self> {
        map_float!(self, "unary op", |v| elementwise::unary(v, l, op))
    }

    fn binary(&self, ll: &Layout, rhs: &Self, rl: &Layout, op: BinaryOp) -> Result<Self> {
        map_float2!(self, rhs, "binary op", |a, b| elementwise::binary(
            a, ll, b, rl, op
        ))
    }

    fn where_cond(
        &self,
        cl: &Layout,
        t: &Self,
        tl: &Layout,
        f: &Self,
        fl: &Layout,
    ) -> Result<Self> {
        match (self, t, f) {
            (CpuStorage::F32(c), CpuStorage::F32(t), CpuStorage::F32(f)) => Ok(CpuStorage::F32(
                elementwise::where_cond(c, cl, t, tl, f, fl),
            )),
            (CpuStorage::F64(c), CpuStorage::F64(t), CpuStorage::F64(f)) => Ok(CpuStorage::F64(
                elementwise::where_cond(c, cl, t, tl, f, fl),
            )),
            (c, t, _) => Err(mismatch("where_cond", c, t)),
        }
    }

    fn reduce(&self, l: &Layout, dims: &[usize], op: ReduceOp) -> Result<Self> {
        if op == ReduceOp::ArgMax {
            let [dim] = dims else {
                return Err(Error::msg(format!(
                    "argmax: reduces exactly one dimension, got {dims:?}"
                )));
            };
            return match self {
                CpuStorage::F32(v) => Ok(CpuStorage::U32(reduce::argmax(v, l, *dim))),
                CpuStorage::F64(v) => Ok(CpuStorage::U32(reduce::argmax(v, l, *dim))),
                CpuStorage::U32(_) => Err(unsupported("argmax", DType::U32)),
            };
        }
        map_float!(self, "reduce", |v| reduce::reduce(v, l, dims, op))
    }

    fn matmul(
        &self,
        ll: &Layout,
        rhs: &Self,
        rl: &Layout,
        bmnk: (usize, usize, usize, usize),
    ) -> Result<Self> {
        map_float2!(self, rhs, "matmul", |a, b| matmul::matmul(
            a, ll, b, rl, bmnk
        ))
    }

    fn conv2d(&self, w: &Self, p: &Conv2dParams) -> Result<Self> {
        map_float2!(self, w, "conv2d", |x, w| conv::conv2d(x, w, p))
    }
    fn conv2d_backward_input(&self, w: &Self, p: &Conv2dParams) -> Result<Self> {
        map_float2!(self, w, "conv2d backward", |g, w| {
            conv::conv2d_backward_input(g, w, p)
        })
    }
    fn conv2d_backward_weight(&self, gy: &Self, p: &Conv2dParams) -> Result<Self> {
        map_float2!(self, gy, "conv2d backward", |x, g| {
            conv::conv2d_backward_weight(x, g, p)
        })
    }

    fn pool2d(&self, p: &Pool2dParams) -> Result<Self> {
        map_float!(self, "pool2d", |x| pool::pool2d(x, p))
    }
    fn pool2d_backward(&self, gy: &Self, p: &Pool2dParams) -> Result<Self> {
        map_float2!(self, gy, "pool2d backward", |x, g| pool::pool2d_backward(
            x, g, p
        ))
    }

    fn index_select(&self, shape: &Shape, ids: &Self, dim: usize) -> Result<Self> {
        let ids = ids.as_u32("index_select indices")?;
        Ok(match self {
            CpuStorage::F32(v) => CpuStorage::F32(index::index_select(v, shape, ids, dim)?),
            CpuStorage::F64(v) => CpuStorage::F64(index::index_select(v, shape, ids, dim)?),
            CpuStorage::U32(v) => CpuStorage::U32(index::index_select(v, shape, ids, dim)?),
        })
    }
    fn index_add(
        &self,
        src_shape: &Shape,
        ids: &Self,
        dim: usize,
        out_shape: &Shape,
    ) -> Result<Self> {
        let ids = ids.as_u32("index_add indices")?;
        map_float!(self, "index_add", |v| index::index_add(
            v, src_shape, ids, dim, out_shape,
        )?)
    }
}
