//! `CudaStorage`: a tensor's elements in plain device memory on one GPU, and its
//! implementation of `BackendStorage`. This file holds the buffer, the transfers
//! and the per-dtype dispatch; the element types and their errors are `dtype.rs`, and
//! the kernels' launch code lives in the sibling files, one per concept, mirroring
//! `cpu/`. Every op runs on the device's compute stream.
//!
//! Dtypes: F32 and F64 for arithmetic, U32 for indices and labels (copies, casts and
//! index_select only, as on the CPU). Nothing falls back to the CPU silently: an op the
//! GPU cannot run returns an error.

use super::device::CudaDevice;
use super::dtype::{mismatch, unsupported, CudaData, GpuType};
use super::{conv, elementwise, index, matmul, pool, random, reduce};
use crate::cpu::CpuStorage;
use crate::storage::{BackendStorage, BinaryOp, Conv2dParams, Pool2dParams, ReduceOp, UnaryOp};
use crate::{DType, Device, Error, Layout, Result, Shape};
use cudarc::driver::CudaSlice;
use std::sync::Arc;

/// One op on a float buffer written once for both float dtypes (candle's `Map1`):
/// `$body` with `$x` bound to the f32 or the f64 slice of `$s`; a U32 buffer returns an
/// `unsupported` error naming `$op` from the calling function.
macro_rules! map_float {
    ($s:expr, $op:expr, |$x:ident| $body:expr) => {
        match &$s.data {
            CudaData::F32($x) => $body,
            CudaData::F64($x) => $body,
            CudaData::U32(_) => return Err(unsupported($op, DType::U32)),
        }
    };
}

/// [`map_float`] over two buffers of one float dtype (candle's `Map2`); two dtypes are a
/// mismatch, two U32 buffers unsupported.
macro_rules! map_float2 {
    ($a:expr, $b:expr, $op:expr, |$x:ident, $y:ident| $body:expr) => {
        match (&$a.data, &$b.data) {
            (CudaData::F32($x), CudaData::F32($y)) => $body,
            (CudaData::F64($x), CudaData::F64($y)) => $body,
            (CudaData::U32(_), CudaData::U32(_)) => return Err(unsupported($op, DType::U32)),
            _ => return Err(mismatch($op, $a, $b)),
        }
    };
}

pub struct CudaStorage {
    pub(crate) data: CudaData,
    /// Logical element count (buffers are never allocated empty, so the slice may be longer).
    len: usize,
    pub(crate) dev: Arc<CudaDevice>,
}

impl std::fmt::Debug for CudaStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaStorage({:?}, {} elements, cuda:{})",
            self.dtype(),
            self.len,
            self.dev.ordinal()
        )
    }
}

impl CudaStorage {
    pub(crate) fn new<T: GpuType>(
        s: CudaSlice<T>,
        len: usize,
        dev: &Arc<CudaDevice>,
    ) -> CudaStorage {
        CudaStorage {
            data: T::wrap(s),
            len,
            dev: dev.clone(),
        }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The f32 buffer, if that is the dtype (for `dtype::slices`).
    pub(crate) fn f32s(&self) -> Option<&CudaSlice<f32>> {
        match &self.data {
            CudaData::F32(v) => Some(v),
            _ => None,
        }
    }
    pub(crate) fn f64s(&self) -> Option<&CudaSlice<f64>> {
        match &self.data {
            CudaData::F64(v) => Some(v),
            _ => None,
        }
    }
    pub fn ordinal(&self) -> usize {
        self.dev.ordinal()
    }

    /// Copies host data to device `dev`.
    pub fn from_cpu(cpu: &CpuStorage, dev: &Arc<CudaDevice>) -> Result<CudaStorage> {
        Ok(match cpu {
            CpuStorage::F32(v) => CudaStorage::new(dev.upload(v)?, v.len(), dev),
            CpuStorage::F64(v) => CudaStorage::new(dev.upload(v)?, v.len(), dev),
            CpuStorage::U32(v) => CudaStorage::new(dev.upload(v)?, v.len(), dev),
        })
    }

    /// `n` copies of `value` (converted like `Tensor::full` does on the CPU).
    pub fn full(n: usize, value: f64, dtype: DType, dev: &Arc<CudaDevice>) -> Result<CudaStorage> {
        Ok(match dtype {
            DType::F32 => CudaStorage::new(elementwise::fill(dev, n, value as f32)?, n, dev),
            DType::F64 => CudaStorage::new(elementwise::fill(dev, n, value)?, n, dev),
            DType::U32 => CudaStorage::new(elementwise::fill(dev, n, value as u32)?, n, dev),
        })
    }

    /// An inverted-dropout mask of `n` elements (see `rng::counter_uniform`).
    pub fn dropout_mask(
        n: usize,
        p: f64,
        seed: u64,
        dtype: DType,
        dev: &Arc<CudaDevice>,
    ) -> Result<CudaStorage> {
        Ok(match dtype {
            DType::F32 => CudaStorage::new(random::dropout_mask::<f32>(dev, n, p, seed)?, n, dev),
            DType::F64 => CudaStorage::new(random::dropout_mask::<f64>(dev, n, p, seed)?, n, dev),
            DType::U32 => return Err(unsupported("dropout", dtype)),
        })
    }

    /// The first `len` elements on the host, copied on `stream` (a side stream may read
    /// while the compute stream keeps working).
    pub(crate) fn to_cpu_on(&self, stream: &Arc<cudarc::driver::CudaStream>) -> Result<CpuStorage> {
        Ok(match &self.data {
            CudaData::F32(s) => CpuStorage::F32(self.dev.download_on(s, self.len, stream)?),
            CudaData::F64(s) => CpuStorage::F64(self.dev.download_on(s, self.len, stream)?),
            CudaData::U32(s) => CpuStorage::U32(self.dev.download_on(s, self.len, stream)?),
        })
    }

    pub(crate) fn u32_slice(&self, op: &'static str) -> Result<&CudaSlice<u32>> {
        match &self.data {
            CudaData::U32(s) => Ok(s),
            _ => Err(Error::UnsupportedDType {
                op,
                dtype: self.dtype(),
                expected: "u32 indices",
            }),
        }
    }
    fn same_device(&self, other: &CudaStorage, op: &'static str) -> Result<()> {
        if Arc::ptr_eq(&self.dev, &other.dev) {
            Ok(())
        } else {
            Err(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: other.device(),
            })
        }
    }
}

impl BackendStorage for CudaStorage {
    fn dtype(&self) -> DType {
        match self.data {
            CudaData::F32(_) => DType::F32,
            CudaData::F64(_) => DType::F64,
            CudaData::U32(_) => DType::U32,
        }
    }
    fn device(&self) -> Device {
        Device::Cuda(self.dev.ordinal())
    }
    fn to_cpu(&self) -> Result<CpuStorage> {
        self.to_cpu_on(&self.dev.stream)
    }

    fn copy_strided(&self, l: &Layout) -> Result<Self> {
        let d = &self.dev;
        let n = l.elem_count();
        Ok(match &self.data {
            CudaData::F32(s) => CudaStorage::new(elementwise::copy_strided(d, s, l)?, n, d),
            CudaData::F64(s) => CudaStorage::new(elementwise::copy_strided(d, s, l)?, n, d),
            CudaData::U32(s) => CudaStorage::new(elementwise::copy_strided(d, s, l)?, n, d),
        })
    }

    fn copy_into(&mut self, dst_l: &Layout, src: &Self) -> Result<()> {
        self.same_device(src, "copy_into")?;
        let d = self.dev.clone();
        match (&mut self.data, &src.data) {
            (CudaData::F32(a), CudaData::F32(b)) => elementwise::copy_into(&d, a, dst_l, b),
            (CudaData::F64(a), CudaData::F64(b)) => elementwise::copy_into(&d, a, dst_l, b),
            (CudaData::U32(a), CudaData::U32(b)) => elementwise::copy_into(&d, a, dst_l, b),
            _ => Err(mismatch("copy_into", self, src)),
        }
    }

    fn to_dtype(&self, l: &Layout, dtype: DType) -> Result<Self> {
        let d = &self.dev;
        let n = l.elem_count();
        use elementwise::cast;
        Ok(match (&self.data, dtype) {
            (CudaData::F32(s), DType::F64) => CudaStorage::new(cast::<f32, f64>(d, s, l)?, n, d),
            (CudaData::F64(s), DType::F32) => CudaStorage::new(cast::<f64, f32>(d, s, l)?, n, d),
            (CudaData::U32(s), DType::F32) => CudaStorage::new(cast::<u32, f32>(d, s, l)?, n, d),
            (CudaData::U32(s), DType::F64) => CudaStorage::new(cast::<u32, f64>(d, s, l)?, n, d),
            (CudaData::F32(s), DType::U32) => CudaStorage::new(cast::<f32, u32>(d, s, l)?, n, d),
            (CudaData::F64(s), DType::U32) => CudaStorage::new(cast::<f64, u32>(d, s, l)?, n, d),
            _ => self.copy_strided(l)?,
        })
    }

    fn unary(&self, l: &Layout, op: UnaryOp) -> Result<Self> {
        let d = &self.dev;
        let n = l.elem_count();
        Ok(map_float!(self, "unary op", |s| CudaStorage::new(
            elementwise::unary(d, s, l, op)?,
            n,
            d
        )))
    }

    fn binary(&self, ll: &Layout, rhs: &Self, rl: &Layout, op: BinaryOp) -> Result<Self> {
        self.same_device(rhs, "binary op")?;
        let d = &self.dev;
        let n = ll.elem_count();
        Ok(map_float2!(
            self,
            rhs,
            "binary op",
            |a, b| CudaStorage::new(elementwise::binary(d, a, ll, b, rl, op)?, n, d)
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
        self.same_device(t, "where_cond")?;
        self.same_device(f, "where_cond")?;
        let d = &self.dev;
        let n = cl.elem_count();
        Ok(match (&self.data, &t.data, &f.data) {
            (CudaData::F32(c), CudaData::F32(a), CudaData::F32(b)) => {
                CudaStorage::new(elementwise::where_cond(d, c, cl, a, tl, b, fl)?, n, d)
            }
            (CudaData::F64(c), CudaData::F64(a), CudaData::F64(b)) => {
                CudaStorage::new(elementwise::where_cond(d, c, cl, a, tl, b, fl)?, n, d)
            }
            _ => return Err(mismatch("where_cond", self, t)),
        })
    }

    fn reduce(&self, l: &Layout, dims: &[usize], op: ReduceOp) -> Result<Self> {
        let d = &self.dev;
        if op == ReduceOp::ArgMax {
            let [dim] = dims else {
                return Err(Error::msg(format!(
                    "argmax: reduces exactly one dimension, got {dims:?}"
                )));
            };
            let (s, n) = map_float!(self, "argmax", |s| reduce::argmax(d, s, l, *dim)?);
            return Ok(CudaStorage::new(s, n, d));
        }
        Ok(match &self.data {
            CudaData::F32(s) => {
                let (o, n) = reduce::reduce(d, s, l, dims, op)?;
                CudaStorage::new(o, n, d)
            }
            CudaData::F64(s) => {
                let (o, n) = reduce::reduce(d, s, l, dims, op)?;
                CudaStorage::new(o, n, d)
            }
            CudaData::U32(_) => return Err(unsupported("reduce", DType::U32)),
        })
    }

    fn matmul(
        &self,
        ll: &Layout,
        rhs: &Self,
        rl: &Layout,
        bmnk: (usize, usize, usize, usize),
    ) -> Result<Self> {
        self.same_device(rhs, "matmul")?;
        let d = &self.dev;
        let (b, m, n, _) = bmnk;
        Ok(map_float2!(self, rhs, "matmul", |x, y| CudaStorage::new(
            matmul::matmul(d, x, ll, y, rl, bmnk)?,
            b * m * n,
            d
        )))
    }

    fn conv2d(&self, w: &Self, p: &Conv2dParams) -> Result<Self> {
        self.same_device(w, "conv2d")?;
        let d = &self.dev;
        let n = p.out_shape().elem_count();
        Ok(map_float2!(self, w, "conv2d", |x, w| CudaStorage::new(
            conv::forward(d, x, w, p)?,
            n,
            d
        )))
    }
    fn conv2d_backward_input(&self, w: &Self, p: &Conv2dParams) -> Result<Self> {
        self.same_device(w, "conv2d backward")?;
        let d = &self.dev;
        let n = p.in_shape().elem_count();
        Ok(map_float2!(self, w, "conv2d backward", |g, w| {
            CudaStorage::new(conv::backward_input(d, g, w, p)?, n, d)
        }))
    }
    fn conv2d_backward_weight(&self, gy: &Self, p: &Conv2dParams) -> Result<Self> {
        self.same_device(gy, "conv2d backward")?;
        let d = &self.dev;
        let n = p.weight_shape().elem_count();
        Ok(map_float2!(self, gy, "conv2d backward", |x, g| {
            CudaStorage::new(conv::backward_weight(d, x, g, p)?, n, d)
        }))
    }

    fn pool2d(&self, p: &Pool2dParams) -> Result<Self> {
        let d = &self.dev;
        let n = p.out_shape().elem_count();
        Ok(map_float!(self, "pool2d", |x| CudaStorage::new(
            pool::forward(d, x, p)?,
            n,
            d
        )))
    }
    fn pool2d_backward(&self, gy: &Self, p: &Pool2dParams) -> Result<Self> {
        self.same_device(gy, "pool2d backward")?;
        let d = &self.dev;
        let n = p.batch * p.channels * p.in_h * p.in_w;
        Ok(map_float2!(self, gy, "pool2d backward", |x, g| {
            CudaStorage::new(pool::backward(d, x, g, p)?, n, d)
        }))
    }

    fn index_select(&self, shape: &Shape, ids: &Self, dim: usize) -> Result<Self> {
        self.same_device(ids, "index_select")?;
        let i = ids.u32_slice("index_select indices")?;
        let n_ids = ids.len;
        let d = &self.dev;
        let n = shape.elem_count() / shape.dims()[dim].max(1) * n_ids;
        Ok(match &self.data {
            CudaData::F32(x) => CudaStorage::new(index::select(d, x, shape, i, n_ids, dim)?, n, d),
            CudaData::F64(x) => CudaStorage::new(index::select(d, x, shape, i, n_ids, dim)?, n, d),
            CudaData::U32(x) => CudaStorage::new(index::select(d, x, shape, i, n_ids, dim)?, n, d),
        })
    }
    fn index_add(
        &self,
        src_shape: &Shape,
        ids: &Self,
        dim: usize,
        out_shape: &Shape,
    ) -> Result<Self> {
        self.same_device(ids, "index_add")?;
        let i = ids.u32_slice("index_add indices")?;
        let d = &self.dev;
        let n = out_shape.elem_count();
        Ok(map_float!(self, "index_add", |x| CudaStorage::new(
            index::add(d, x, src_shape, i, dim, out_shape)?,
            n,
            d
        )))
    }
}
