//! `Storage`: a tensor's data on whichever device holds it, delegating every kernel to
//! that device's backend, so that nothing above it looks at devices.

use super::backend::BackendStorage;
use super::params::{BinaryOp, Conv2dParams, Pool2dParams, ReduceOp, UnaryOp};
use crate::cpu::CpuStorage;
use crate::cuda::CudaStorage;
use crate::{DType, Device, Layout, Result, Shape};

/// A tensor's storage, on whichever device holds it.
#[derive(Debug)]
pub enum Storage {
    Cpu(CpuStorage),
    Cuda(CudaStorage),
}

impl Storage {
    pub fn dtype(&self) -> DType {
        match self {
            Storage::Cpu(s) => s.dtype(),
            Storage::Cuda(s) => s.dtype(),
        }
    }
    pub fn device(&self) -> Device {
        match self {
            Storage::Cpu(s) => s.device(),
            Storage::Cuda(s) => s.device(),
        }
    }
    /// Number of elements held.
    pub fn len(&self) -> usize {
        match self {
            Storage::Cpu(s) => s.len(),
            Storage::Cuda(s) => s.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Host data placed on `device` (a copy to the GPU for CUDA).
    pub fn from_cpu(cpu: CpuStorage, device: Device) -> Result<Storage> {
        match device {
            Device::Cpu => Ok(Storage::Cpu(cpu)),
            Device::Cuda(i) => Ok(Storage::Cuda(CudaStorage::from_cpu(
                &cpu,
                &crate::cuda::device(i)?,
            )?)),
        }
    }
    /// `n` elements equal to `value`, created on the device itself.
    pub fn full(n: usize, value: f64, dtype: DType, device: Device) -> Result<Storage> {
        match device {
            Device::Cpu => Ok(Storage::Cpu(CpuStorage::full(n, value, dtype))),
            Device::Cuda(i) => Ok(Storage::Cuda(CudaStorage::full(
                n,
                value,
                dtype,
                &crate::cuda::device(i)?,
            )?)),
        }
    }
    /// An inverted-dropout mask: 0 with probability `p`, else `1 / (1 - p)`, element `i`
    /// decided by `rng::counter_uniform(seed, i)` on every device.
    pub fn dropout_mask(
        n: usize,
        p: f64,
        seed: u64,
        dtype: DType,
        device: Device,
    ) -> Result<Storage> {
        match device {
            Device::Cpu => CpuStorage::dropout_mask(n, p, seed, dtype).map(Storage::Cpu),
            Device::Cuda(i) => Ok(Storage::Cuda(CudaStorage::dropout_mask(
                n,
                p,
                seed,
                dtype,
                &crate::cuda::device(i)?,
            )?)),
        }
    }
}

/// Two storages of the same backend, or which devices differ.
enum Pair<'a> {
    Cpu(&'a CpuStorage, &'a CpuStorage),
    Cuda(&'a CudaStorage, &'a CudaStorage),
}

fn pair<'a>(op: &'static str, a: &'a Storage, b: &'a Storage) -> Result<Pair<'a>> {
    match (a, b) {
        (Storage::Cpu(a), Storage::Cpu(b)) => Ok(Pair::Cpu(a, b)),
        (Storage::Cuda(x), Storage::Cuda(y)) if x.ordinal() == y.ordinal() => Ok(Pair::Cuda(x, y)),
        _ => Err(crate::Error::DeviceMismatch {
            op,
            lhs: a.device(),
            rhs: b.device(),
        }),
    }
}

pub(super) fn cpu_of<'a>(
    op: &'static str,
    s: &'a Storage,
    like: &Storage,
) -> Result<&'a CpuStorage> {
    match s {
        Storage::Cpu(c) => Ok(c),
        _ => Err(crate::Error::DeviceMismatch {
            op,
            lhs: like.device(),
            rhs: s.device(),
        }),
    }
}
pub(super) fn cuda_of<'a>(
    op: &'static str,
    s: &'a Storage,
    like: &Storage,
) -> Result<&'a CudaStorage> {
    match s {
        Storage::Cuda(c) if like.device() == s.device() => Ok(c),
        _ => Err(crate::Error::DeviceMismatch {
            op,
            lhs: like.device(),
            rhs: s.device(),
        }),
    }
}

// Delegation to the backend that holds the data; nothing above this layer looks at devices.
impl BackendStorage for Storage {
    fn dtype(&self) -> DType {
        Storage::dtype(self)
    }
    fn device(&self) -> Device {
        Storage::device(self)
    }
    fn to_cpu(&self) -> Result<CpuStorage> {
        match self {
            Storage::Cpu(s) => s.to_cpu(),
            Storage::Cuda(s) => s.to_cpu(),
        }
    }
    fn copy_strided(&self, l: &Layout) -> Result<Self> {
        match self {
            Storage::Cpu(s) => s.copy_strided(l).map(Storage::Cpu),
            Storage::Cuda(s) => s.copy_strided(l).map(Storage::Cuda),
        }
    }
    fn copy_into(&mut self, dst_l: &Layout, src: &Self) -> Result<()> {
        match (self, src) {
            (Storage::Cpu(d), Storage::Cpu(s)) => d.copy_into(dst_l, s),
            (Storage::Cuda(d), Storage::Cuda(s)) if d.ordinal() == s.ordinal() => {
                d.copy_into(dst_l, s)
            }
            (d, s) => Err(crate::Error::DeviceMismatch {
                op: "copy_into",
                lhs: d.device(),
                rhs: s.device(),
            }),
        }
    }
    fn to_dtype(&self, l: &Layout, dtype: DType) -> Result<Self> {
        match self {
            Storage::Cpu(s) => s.to_dtype(l, dtype).map(Storage::Cpu),
            Storage::Cuda(s) => s.to_dtype(l, dtype).map(Storage::Cuda),
        }
    }
    fn unary(&self, l: &Layout, op: UnaryOp) -> Result<Self> {
        match self {
            Storage::Cpu(s) => s.unary(l, op).map(Storage::Cpu),
            Storage::Cuda(s) => s.unary(l, op).map(Storage::Cuda),
        }
    }
    fn binary(&self, ll: &Layout, rhs: &Self, rl: &Layout, op: BinaryOp) -> Result<Self> {
        match pair("binary op", self, rhs)? {
            Pair::Cpu(a, b) => a.binary(ll, b, rl, op).map(Storage::Cpu),
            Pair::Cuda(a, b) => a.binary(ll, b, rl, op).map(Storage::Cuda),
        }
    }
    fn where_cond(
        &self,
        cl: &Layout,
        t: &Self,
        tl: &Layout,
        f: &Self,
        fl: &Layout,
    ) -> Result<Self> {
        match pair("where_cond", self, t)? {
            Pair::Cpu(c, t) => c
                .where_cond(cl, t, tl, cpu_of("where_cond", f, self)?, fl)
                .map(Storage::Cpu),
            Pair::Cuda(c, t) => c
                .where_cond(cl, t, tl, cuda_of("where_cond", f, self)?, fl)
                .map(Storage::Cuda),
        }
    }
    fn reduce(&self, l: &Layout, dims: &[usize], op: ReduceOp) -> Result<Self> {
        match self {
            Storage::Cpu(s) => s.reduce(l, dims, op).map(Storage::Cpu),
            Storage::Cuda(s) => s.reduce(l, dims, op).map(Storage::Cuda),
        }
    }
    fn matmul(
        &self,
        ll: &Layout,
        rhs: &Self,
        rl: &Layout,
        bmnk: (usize, usize, usize, usize),
    ) -> Result<Self> {
        match pair("matmul", self, rhs)? {
            Pair::Cpu(a, b) => a.matmul(ll, b, rl, bmnk).map(Storage::Cpu),
            Pair::Cuda(a, b) => a.matmul(ll, b, rl, bmnk).map(Storage::Cuda),
        }
    }
    fn conv2d(&self, w: &Self, p: &Conv2dParams) -> Result<Self> {
        match pair("conv2d", self, w)? {
            Pair::Cpu(x, w) => x.conv2d(w, p).map(Storage::Cpu),
            Pair::Cuda(x, w) => x.conv2d(w, p).map(Storage::Cuda),
        }
    }
    fn conv2d_backward_input(&self, w: &Self, p: &Conv2dParams) -> Result<Self> {
        match pair("conv2d backward", self, w)? {
            Pair::Cpu(g, w) => g.conv2d_backward_input(w, p).map(Storage::Cpu),
            Pair::Cuda(g, w) => g.conv2d_backward_input(w, p).map(Storage::Cuda),
        }
    }
    fn conv2d_backward_weight(&self, gy: &Self, p: &Conv2dParams) -> Result<Self> {
        match pair("conv2d backward", self, gy)? {
            Pair::Cpu(x, g) => x.conv2d_backward_weight(g, p).map(Storage::Cpu),
            Pair::Cuda(x, g) => x.conv2d_backward_weight(g, p).map(Storage::Cuda),
        }
    }
    fn pool2d(&self, p: &Pool2dParams) -> Result<Self> {
        match self {
            Storage::Cpu(s) => s.pool2d(p).map(Storage::Cpu),
            Storage::Cuda(s) => s.pool2d(p).map(Storage::Cuda),
        }
    }
    fn pool2d_backward(&self, gy: &Self, p: &Pool2dParams) -> Result<Self> {
        match pair("pool2d backward", self, gy)? {
            Pair::Cpu(x, g) => x.pool2d_backward(g, p).map(Storage::Cpu),
            Pair::Cuda(x, g) => x.pool2d_backward(g, p).map(Storage::Cuda),
        }
    }
    fn index_select(&self, shape: &Shape, ids: &Self, dim: usize) -> Result<Self> {
        match pair("index_select", self, ids)? {
            Pair::Cpu(x, i) => x.index_select(shape, i, dim).map(Storage::Cpu),
            Pair::Cuda(x, i) => x.index_select(shape, i, dim).map(Storage::Cuda),
        }
    }
    fn index_add(
        &self,
        src_shape: &Shape,
        ids: &Self,
        dim: usize,
        out_shape: &Shape,
    ) -> Result<Self> {
        match pair("index_add", self, ids)? {
            Pair::Cpu(x, i) => x.index_add(src_shape, i, dim, out_shape).map(Storage::Cpu),
            Pair::Cuda(x, i) => x.index_add(src_shape, i, dim, out_shape).map(Storage::Cuda),
        }
    }
}
