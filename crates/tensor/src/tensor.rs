//! `Tensor`: a cheaply clonable handle to a strided view of shared storage, plus the op
//! that produced it (for autograd). Creation, data access, views and in-place assignment
//! live here; the differentiable ops live in `ops/`, their gradients in `backprop.rs`.

use crate::backprop::GradHook;
use crate::cpu::CpuStorage;
use crate::op::Op;
use crate::storage::{BackendStorage, Storage};
use crate::{DType, Device, Error, Layout, Result, Rng, Shape};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

/// Unique identity of a tensor node (views get their own id; they share storage).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(u64);

impl TensorId {
    fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        TensorId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

pub(crate) struct Inner {
    id: TensorId,
    storage: Arc<RwLock<Storage>>,
    layout: Layout,
    dtype: DType,
    device: Device,
    op: Option<Op>,
    is_variable: bool,
    pub(crate) hooks: Mutex<Vec<GradHook>>,
    /// Bumped by `clear_grad_hooks`, so that hooks taken out of `hooks` to be called (the
    /// lock is not held while they run) are not put back after a hook cleared them.
    pub(crate) hooks_cleared: std::sync::atomic::AtomicU64,
}

/// Releases a graph without recursion. Each node's op holds its inputs, so the default
/// drop of the last handle to a chain of a million ops (an unrolled recurrence, a long
/// loop of in-graph updates) recursed a million frames deep and overflowed the stack,
/// though forward and backward (iterative) had run. Here the inputs this node held last
/// are unlinked from their own ops before they drop, one node at a time, from a list.
impl Drop for Inner {
    fn drop(&mut self) {
        let Some(op) = self.op.take() else {
            return;
        };
        // Only inputs the op holds the last handle to are taken out (a shared one, such as
        // a weight, just loses a count when the op drops), so a step's graph mostly
        // releases without filling the list at all.
        let sole = |op: &Op| -> Vec<Tensor> {
            op.inputs()
                .into_iter()
                .filter(|t| Arc::strong_count(&t.0) == 1)
                .cloned()
                .collect()
        };
        let mut pending = sole(&op);
        drop(op);
        while let Some(t) = pending.pop() {
            // A handle another thread took meanwhile keeps its node alive; that is fine.
            if let Ok(mut inner) = Arc::try_unwrap(t.0) {
                if let Some(op) = inner.op.take() {
                    pending.extend(sole(&op));
                }
            }
        }
    }
}

#[derive(Clone)]
pub struct Tensor(pub(crate) Arc<Inner>);

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
    static HOST_READS: Cell<u64> = const { Cell::new(0) };
}

/// How many times this thread has read a tensor's elements to the host (`to_vec` and
/// everything built on it: `to_scalar`, `to_vec_f64`, ...) or moved one between devices.
/// On a GPU each such read waits for every queued kernel, so a training step's forward,
/// backward and update make none; tests check that on any device by comparing this count
/// before and after a step.
pub fn host_reads() -> u64 {
    HOST_READS.with(|n| n.get())
}

/// Whether ops on this thread record the graph.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Runs `f` without recording the graph (evaluation, optimizer updates). Nests safely.
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let previous = GRAD_ENABLED.with(|g| g.replace(false));
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            GRAD_ENABLED.with(|g| g.set(self.0));
        }
    }
    let _restore = Restore(previous);
    f()
}

/// Element types that can be moved in and out of tensors.
pub trait WithDType: Copy + Send + Sync + 'static {
    const DTYPE: DType;
    fn into_storage(v: Vec<Self>) -> CpuStorage;
    fn slice(s: &CpuStorage) -> Option<&[Self]>;
    fn to_f64(self) -> f64;
}
macro_rules! with_dtype {
    ($t:ty, $variant:ident, $dtype:expr) => {
        impl WithDType for $t {
            const DTYPE: DType = $dtype;
            fn into_storage(v: Vec<Self>) -> CpuStorage {
                CpuStorage::$variant(v)
            }
            fn slice(s: &CpuStorage) -> Option<&[Self]> {
                match s {
                    CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}
with_dtype!(f32, F32, DType::F32);
with_dtype!(f64, F64, DType::F64);
with_dtype!(u32, U32, DType::U32);

impl Tensor {
    // ---------------------------------------------------------------- construction

    fn build(
        storage: Arc<RwLock<Storage>>,
        layout: Layout,
        dtype: DType,
        device: Device,
        op: Option<Op>,
        is_variable: bool,
    ) -> Tensor {
        Tensor(Arc::new(Inner {
            id: TensorId::new(),
            storage,
            layout,
            dtype,
            device,
            op,
            is_variable,
            hooks: Mutex::new(Vec::new()),
            hooks_cleared: std::sync::atomic::AtomicU64::new(0),
        }))
    }

    /// A new contiguous tensor over fresh storage; `op` is recorded only when grad mode is
    /// on and some input of the op takes part in autograd.
    pub(crate) fn from_storage(
        storage: Storage,
        shape: impl Into<Shape>,
        op: Option<Op>,
    ) -> Tensor {
        let (dtype, device) = (storage.dtype(), storage.device());
        let op = op.filter(|op| is_grad_enabled() && op.inputs().iter().any(|t| t.tracks_grad()));
        Tensor::build(
            Arc::new(RwLock::new(storage)),
            Layout::contiguous(shape),
            dtype,
            device,
            op,
            false,
        )
    }

    /// A view sharing this tensor's storage with a new layout.
    pub(crate) fn view(&self, layout: Layout, op: Option<Op>) -> Tensor {
        let op = op.filter(|op| is_grad_enabled() && op.inputs().iter().any(|t| t.tracks_grad()));
        Tensor::build(
            self.0.storage.clone(),
            layout,
            self.0.dtype,
            self.0.device,
            op,
            false,
        )
    }

    pub fn from_vec<T: WithDType>(
        data: Vec<T>,
        shape: impl Into<Shape>,
        device: Device,
    ) -> Result<Tensor> {
        let shape = shape.into();
        if data.len() != shape.checked_elem_count("from_vec")? {
            return Err(Error::ElementCount {
                op: "from_vec",
                len: data.len(),
                expected: shape.elem_count(),
                shape,
            });
        }
        Ok(Tensor::from_storage(
            Storage::from_cpu(T::into_storage(data), device)?,
            shape,
            None,
        ))
    }

    pub fn from_slice<T: WithDType>(
        data: &[T],
        shape: impl Into<Shape>,
        device: Device,
    ) -> Result<Tensor> {
        Tensor::from_vec(data.to_vec(), shape, device)
    }

    pub fn full(
        value: f64,
        shape: impl Into<Shape>,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        let shape = shape.into();
        let s = Storage::full(shape.checked_elem_count("full")?, value, dtype, device)?;
        Ok(Tensor::from_storage(s, shape, None))
    }
    pub fn zeros(shape: impl Into<Shape>, dtype: DType, device: Device) -> Result<Tensor> {
        Tensor::full(0.0, shape, dtype, device)
    }
    pub fn ones(shape: impl Into<Shape>, dtype: DType, device: Device) -> Result<Tensor> {
        Tensor::full(1.0, shape, dtype, device)
    }
    pub fn zeros_like(&self) -> Result<Tensor> {
        Tensor::zeros(self.shape().clone(), self.dtype(), self.device())
    }
    pub fn ones_like(&self) -> Result<Tensor> {
        Tensor::ones(self.shape().clone(), self.dtype(), self.device())
    }
    /// A 0-d tensor.
    pub fn scalar(value: f64, dtype: DType, device: Device) -> Result<Tensor> {
        Tensor::full(value, (), dtype, device)
    }
    /// `0, 1, …, n-1` as U32 (indices).
    pub fn arange_u32(n: usize, device: Device) -> Result<Tensor> {
        Tensor::from_vec((0..n as u32).collect::<Vec<_>>(), n, device)
    }

    fn from_f64_fn(
        shape: Shape,
        dtype: DType,
        device: Device,
        mut f: impl FnMut() -> f64,
    ) -> Result<Tensor> {
        // Samples come from the host Rng on every device, so a seed gives the same
        // tensor on the CPU and on a GPU.
        let n = shape.checked_elem_count("random init")?;
        let s = match dtype {
            DType::F32 => CpuStorage::F32((0..n).map(|_| f() as f32).collect()),
            DType::F64 => CpuStorage::F64((0..n).map(|_| f()).collect()),
            DType::U32 => {
                return Err(Error::UnsupportedDType {
                    op: "random init",
                    dtype,
                    expected: "f32 or f64",
                })
            }
        };
        Ok(Tensor::from_storage(
            Storage::from_cpu(s, device)?,
            shape,
            None,
        ))
    }
    /// Normal samples with the given mean and standard deviation, from a seeded `Rng`.
    pub fn randn(
        shape: impl Into<Shape>,
        mean: f64,
        std: f64,
        dtype: DType,
        device: Device,
        rng: &mut Rng,
    ) -> Result<Tensor> {
        Tensor::from_f64_fn(shape.into(), dtype, device, || mean + std * rng.normal())
    }
    /// Uniform samples in `[lo, hi)`, from a seeded `Rng`.
    pub fn rand_uniform(
        shape: impl Into<Shape>,
        lo: f64,
        hi: f64,
        dtype: DType,
        device: Device,
        rng: &mut Rng,
    ) -> Result<Tensor> {
        Tensor::from_f64_fn(shape.into(), dtype, device, || {
            lo + (hi - lo) * rng.uniform()
        })
    }

    // ---------------------------------------------------------------- autograd identity

    /// A leaf that autograd computes gradients for (a parameter), sharing this tensor's data.
    pub fn to_var(&self) -> Tensor {
        self.new_leaf(true)
    }
    /// The same data, cut from the graph.
    pub fn detach(&self) -> Tensor {
        self.new_leaf(false)
    }
    /// A new graph leaf over this tensor's data (no copy).
    fn new_leaf(&self, requires_grad: bool) -> Tensor {
        let t = &self.0;
        let (storage, layout) = (t.storage.clone(), t.layout.clone());
        Tensor::build(storage, layout, t.dtype, t.device, None, requires_grad)
    }
    pub fn id(&self) -> TensorId {
        self.0.id
    }
    pub fn is_variable(&self) -> bool {
        self.0.is_variable
    }
    /// True when gradients flow through this tensor (a variable, or computed from one).
    pub fn tracks_grad(&self) -> bool {
        self.0.is_variable || self.0.op.is_some()
    }
    pub(crate) fn op(&self) -> Option<&Op> {
        self.0.op.as_ref()
    }

    /// Registers `hook`, called once per `backward` with this variable's final gradient the
    /// moment the last op that consumed the variable has run its backward. This is what
    /// lets a compression thread start on early layers while backward continues.
    pub fn register_grad_hook(&self, hook: impl FnMut(&Tensor) + Send + 'static) -> Result<()> {
        if !self.is_variable() {
            return Err(Error::msg("register_grad_hook: hooks can only be registered on variables (see Tensor::to_var)"));
        }
        self.0
            .hooks
            .lock()
            .map_err(|_| Error::msg("register_grad_hook: hook list poisoned by a panicking hook"))?
            .push(Box::new(hook));
        Ok(())
    }
    /// Removes every hook registered on this variable.
    pub fn clear_grad_hooks(&self) {
        let mut h = self
            .0
            .hooks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        h.clear();
        self.0
            .hooks_cleared
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    // ---------------------------------------------------------------- accessors

    pub fn shape(&self) -> &Shape {
        self.0.layout.shape()
    }
    pub fn dims(&self) -> &[usize] {
        self.0.layout.dims()
    }
    pub fn rank(&self) -> usize {
        self.shape().rank()
    }
    pub fn elem_count(&self) -> usize {
        self.0.layout.elem_count()
    }
    pub fn layout(&self) -> &Layout {
        &self.0.layout
    }
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }
    pub fn device(&self) -> Device {
        self.0.device
    }
    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }
    /// Read access to the underlying storage (shared by views).
    pub(crate) fn storage(&self) -> RwLockReadGuard<'_, Storage> {
        // A poisoned lock means a kernel panicked mid-write; the data is still the last
        // consistent state we had, so reading it is the most useful thing to do.
        self.0.storage.read().unwrap_or_else(|e| e.into_inner())
    }
    /// Write access to the underlying storage, for in-place optimizer steps.
    pub(crate) fn storage_mut(&self) -> std::sync::RwLockWriteGuard<'_, Storage> {
        self.0.storage.write().unwrap_or_else(|e| e.into_inner())
    }
    /// Whether two tensors are views of one storage.
    pub(crate) fn shares_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0.storage, &other.0.storage)
    }

    /// The elements in row-major order.
    pub fn to_vec<T: WithDType>(&self) -> Result<Vec<T>> {
        if self.dtype() != T::DTYPE {
            return Err(Error::DTypeMismatch {
                op: "to_vec",
                lhs: self.dtype(),
                rhs: T::DTYPE,
            });
        }
        HOST_READS.with(|n| n.set(n.get() + 1));
        let cpu = self.storage().copy_strided(self.layout())?.to_cpu()?;
        Ok(T::slice(&cpu).map(|s| s.to_vec()).unwrap_or_default())
    }
    /// This tensor on `device`: itself when already there, else a contiguous copy (through
    /// the host between different devices; large copies use pinned staging memory).
    /// Differentiable: the gradient is copied back to this tensor's device.
    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        if device == self.device() {
            return Ok(self.clone());
        }
        HOST_READS.with(|n| n.set(n.get() + 1));
        let host = self.storage().copy_strided(self.layout())?.to_cpu()?;
        let s = Storage::from_cpu(host, device)?;
        Ok(Tensor::from_storage(
            s,
            self.shape().clone(),
            Some(Op::ToDevice(self.clone())),
        ))
    }
    /// Shorthand for `to_device(Device::Cpu)`.
    pub fn to_cpu(&self) -> Result<Tensor> {
        self.to_device(Device::Cpu)
    }

    /// The single element of a tensor with one element.
    pub fn to_scalar<T: WithDType>(&self) -> Result<T> {
        if self.elem_count() != 1 {
            return Err(Error::BadShape {
                op: "to_scalar",
                msg: "expected exactly one element".into(),
                shape: self.shape().clone(),
            });
        }
        Ok(self.to_vec::<T>()?[0])
    }
    /// Any float tensor's elements as f64 (for tests, metrics and checks).
    pub fn to_vec_f64(&self) -> Result<Vec<f64>> {
        self.to_dtype(DType::F64)?.to_vec::<f64>()
    }

    /// Overwrites this tensor's elements (in place, visible through every view of the same
    /// storage) with `src`'s, copying them across devices when `src` lives elsewhere. Not
    /// recorded by autograd: for optimizer updates and loading. There is no version
    /// counter: a graph that saved this tensor and has not run backward yet would use the
    /// new values silently, so assign only once its gradients are final (as the hooks say).
    pub fn assign(&self, src: &Tensor) -> Result<()> {
        if src.device() != self.device() {
            return self.assign(&src.to_device(self.device())?);
        }
        if src.shape() != self.shape() {
            return Err(Error::ShapeMismatch {
                op: "assign",
                lhs: self.shape().clone(),
                rhs: src.shape().clone(),
            });
        }
        if src.dtype() != self.dtype() {
            return Err(Error::DTypeMismatch {
                op: "assign",
                lhs: self.dtype(),
                rhs: src.dtype(),
            });
        }
        let data = src.storage().copy_strided(src.layout())?;
        let mut dst = self.0.storage.write().unwrap_or_else(|e| e.into_inner());
        dst.copy_into(self.layout(), &data)
    }

    /// f32 elements as IEEE half precision, for f16 wire formats and storage.
    pub fn to_f16_vec(&self) -> Result<Vec<half::f16>> {
        Ok(crate::dtype::f32_to_f16(
            &self.to_dtype(DType::F32)?.to_vec::<f32>()?,
        ))
    }
    /// f32 elements as bfloat16.
    pub fn to_bf16_vec(&self) -> Result<Vec<half::bf16>> {
        Ok(crate::dtype::f32_to_bf16(
            &self.to_dtype(DType::F32)?.to_vec::<f32>()?,
        ))
    }
    /// An f32 tensor from half-precision values.
    pub fn from_f16(data: &[half::f16], shape: impl Into<Shape>, device: Device) -> Result<Tensor> {
        Tensor::from_vec(crate::dtype::f16_to_f32(data), shape, device)
    }
    pub fn from_bf16(
        data: &[half::bf16],
        shape: impl Into<Shape>,
        device: Device,
    ) -> Result<Tensor> {
        Tensor::from_vec(crate::dtype::bf16_to_f32(data), shape, device)
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor[{}, {:?}, {}",
            self.shape(),
            self.dtype(),
            self.device()
        )?;
        if self.elem_count() <= 16 {
            if let Ok(v) = self.to_vec_f64() {
                write!(f, ", {v:?}")?;
            }
        }
        write!(f, "]")
    }
}
