//! One CUDA device as the tensor backend sees it: its context, the compute stream every
//! tensor op runs on, a cuBLAS handle bound to that stream, our kernel modules compiled
//! by NVRTC for the device's architecture on first use (cached for the process), and a
//! pinned host staging buffer for the large host<->device copies a training step repeats
//! (batches in, gradients out), the fault word kernels report bad input through
//! ([`super::fault`]), the caching memory pool ([`super::memory`]) and a count of the
//! host's synchronisations with the device.
//!
//! Devices are process-wide singletons per ordinal ([`device`]), so every tensor on
//! `cuda:0` shares one stream and kernels are compiled once. Nothing here panics when
//! the driver is missing: cudarc's dynamic loading would, so every entry point probes
//! the library first and catches unwinds as a backstop.

use super::kernels::{self, CompileError};
use super::{cudnn, fault, memory};
use crate::{Error, Result};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{
    result as cu, sys, CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream,
    DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig, ValidAsZeroBits,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Converts any CUDA-side error into ours, naming what we were doing.
pub(crate) fn cuda_err<E: std::fmt::Debug>(what: &str) -> impl FnOnce(E) -> Error + '_ {
    move |e| Error::msg(format!("CUDA {what}: {e:?}"))
}

/// Copies at least this large go through the pinned staging buffer; smaller ones are
/// latency-bound and go straight from pageable memory.
const PINNED_MIN_BYTES: usize = 64 << 10;

/// Page-locked host memory, grown on demand and reused (allocating pinned memory is slow).
struct Staging {
    ptr: *mut u8,
    bytes: usize,
    /// Recorded after an upload's copy out of the buffer: an upload does not wait for its
    /// copy (that would be a synchronisation per batch), so the next user of the buffer
    /// waits for this event instead, i.e. for that one copy, long done by then as a rule.
    pending: Option<CudaEvent>,
}
// SAFETY: the buffer is only touched under the device's mutex.
unsafe impl Send for Staging {}

impl Staging {
    /// The buffer, at least `bytes` long and free: no copy out of it still in flight.
    /// Counts a wait in `host_syncs` when the last upload's copy had not finished.
    fn reserve(
        &mut self,
        ctx: &CudaContext,
        bytes: usize,
        host_syncs: &AtomicU64,
    ) -> Result<*mut u8> {
        if let Some(e) = self.pending.take() {
            if !e.is_complete() {
                host_syncs.fetch_add(1, Ordering::Relaxed);
            }
            e.synchronize()
                .map_err(cuda_err("wait for a staged upload"))?;
        }
        if bytes > self.bytes {
            ctx.bind_to_thread().map_err(cuda_err("bind context"))?;
            if !self.ptr.is_null() {
                // SAFETY: allocated by malloc_host below; every copy into it has completed
                // (downloads synchronise their stream before releasing the lock, uploads'
                // copies were waited for above).
                unsafe { cu::free_host(self.ptr.cast()) }
                    .map_err(cuda_err("free pinned memory"))?;
                self.ptr = std::ptr::null_mut();
                self.bytes = 0;
            }
            let want = bytes.next_power_of_two();
            // SAFETY: plain page-locked allocation (flags 0: cached, not write-combined,
            // because the host reads downloads back).
            let p =
                unsafe { cu::malloc_host(want, 0) }.map_err(cuda_err("allocate pinned memory"))?;
            self.ptr = p.cast();
            self.bytes = want;
        }
        Ok(self.ptr)
    }
}

/// Which architecture NVRTC targets for a compute capability.
fn arch_name(major: i32, minor: i32) -> &'static str {
    match (major, minor) {
        (7, 0) => "sm_70",
        (7, 5) => "sm_75",
        (8, 0) => "sm_80",
        (8, 6) => "sm_86",
        (8, 7) => "sm_87",
        (8, 9) => "sm_89",
        (9, _) => "sm_90",
        (10, 0) => "sm_100",
        (10, _) => "sm_101",
        (12, _) => "sm_120",
        // Newer parts run PTX for an older architecture through the driver's JIT.
        (m, _) if m > 12 => "sm_120",
        _ => "sm_70",
    }
}

/// The device's default memory pool handle (an opaque driver pointer, valid for the
/// context's life and safe to use from any thread).
struct Pool(sys::CUmemoryPool);
// SAFETY: the driver's pool calls are thread-safe; the handle is never freed by us.
unsafe impl Send for Pool {}
unsafe impl Sync for Pool {}

pub struct CudaDevice {
    ordinal: usize,
    name: String,
    arch: &'static str,
    pub(crate) ctx: Arc<CudaContext>,
    /// The stream every tensor op on this device runs on.
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) blas: Mutex<CudaBlas>,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    functions: Mutex<HashMap<&'static str, CudaFunction>>,
    staging: Mutex<Staging>,
    /// `[code, position, value, bound]` of the first bad input a kernel found.
    fault: Mutex<CudaSlice<u32>>,
    pool: Option<Pool>,
    /// Times the host waited for the device (synchronize, downloads, staged uploads).
    host_syncs: AtomicU64,
    /// cuDNN for convolutions, opened at the first convolution; `None` when it cannot be.
    dnn: OnceLock<Option<Mutex<cudnn::Dnn>>>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaDevice(cuda:{}, {}, {})",
            self.ordinal, self.name, self.arch
        )
    }
}

/// Whether libcuda can be loaded at all (a plain dlopen; never panics).
pub fn driver_library_present() -> bool {
    // SAFETY: only dlopen()s candidate names.
    std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false)
}

/// Number of CUDA devices; 0 without a driver.
pub fn device_count() -> usize {
    if !driver_library_present() {
        return 0;
    }
    std::panic::catch_unwind(|| {
        CudaContext::device_count()
            .map(|n| n.max(0) as usize)
            .unwrap_or(0)
    })
    .unwrap_or(0)
}

fn registry() -> &'static Mutex<HashMap<usize, Arc<CudaDevice>>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<CudaDevice>>>> = OnceLock::new();
    DEVICES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The process-wide handle of CUDA device `ordinal`, created on first use.
pub fn device(ordinal: usize) -> Result<Arc<CudaDevice>> {
    let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = reg.get(&ordinal) {
        return Ok(d.clone());
    }
    let d = Arc::new(CudaDevice::open(ordinal)?);
    reg.insert(ordinal, d.clone());
    Ok(d)
}

impl CudaDevice {
    fn open(ordinal: usize) -> Result<CudaDevice> {
        let unavailable = |why: String| Error::CudaUnavailable(ordinal, why);
        if !driver_library_present() {
            return Err(unavailable(
                "the CUDA driver library (libcuda.so) is not installed or not on the library path"
                    .into(),
            ));
        }
        if !kernels::nvrtc_available() {
            return Err(unavailable(
                "NVRTC (libnvrtc.so.13), which compiles our kernels, is not on the library path (pip install nvidia-cuda-nvrtc, see crates/tensor/CUDA.md)".into(),
            ));
        }
        let count = device_count();
        if ordinal >= count {
            return Err(unavailable(format!(
                "the driver reports {count} CUDA device(s)"
            )));
        }
        let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|_| unavailable("the CUDA driver library could not be used".into()))?
            .map_err(|e| unavailable(format!("creating a context failed: {e:?}")))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| unavailable(format!("{e:?}")))?;
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        let stream = ctx.default_stream();
        // SAFETY: dlopen probe only.
        let blas_present =
            std::panic::catch_unwind(|| unsafe { cudarc::cublas::sys::is_culib_present() })
                .unwrap_or(false);
        if !blas_present {
            return Err(unavailable(
                "cuBLAS (libcublas.so.13) is not on the library path (pip install nvidia-cublas, see crates/tensor/CUDA.md)".into(),
            ));
        }
        let blas = std::panic::catch_unwind(|| CudaBlas::new(stream.clone()))
            .map_err(|_| unavailable("cuBLAS could not be loaded".into()))?
            .map_err(|e| unavailable(format!("cuBLAS: {e:?}")))?;
        let fault = stream
            .alloc_zeros::<u32>(fault::WORDS)
            .map_err(|e| unavailable(format!("allocating the fault word failed: {e:?}")))?;
        let pool = memory::default_pool(ctx.cu_device()).map(Pool);
        match &pool {
            Some(p) => memory::configure(p.0, memory::cache_bytes_from_env()?)?,
            None => eprintln!(
                "cuda:{ordinal}: no stream-ordered memory pool on this device; every \
                 allocation is a plain cuMemAlloc and nothing is cached"
            ),
        }
        let dev = CudaDevice {
            ordinal,
            name,
            arch: arch_name(major, minor),
            ctx,
            stream,
            blas: Mutex::new(blas),
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            staging: Mutex::new(Staging {
                ptr: std::ptr::null_mut(),
                bytes: 0,
                pending: None,
            }),
            fault: Mutex::new(fault),
            pool,
            host_syncs: AtomicU64::new(0),
            dnn: OnceLock::new(),
        };
        Ok(dev)
    }

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
    /// The GPU's name as the driver reports it.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The architecture our kernels are compiled for, e.g. "sm_90".
    pub fn arch(&self) -> &'static str {
        self.arch
    }
    /// Waits until every op queued on the compute stream has finished; a bad input a
    /// kernel found since the last synchronisation is this call's error.
    pub fn synchronize(&self) -> Result<()> {
        self.host_syncs.fetch_add(1, Ordering::Relaxed);
        self.stream.synchronize().map_err(cuda_err("synchronize"))?;
        self.take_fault()
    }

    /// cuDNN, opened on first use; the first call says which path convolutions take.
    pub(crate) fn dnn(&self) -> Option<&Mutex<cudnn::Dnn>> {
        self.dnn
            .get_or_init(|| match cudnn::open(self) {
                Ok(d) => {
                    eprintln!(
                        "cuda:{}: convolutions through {}",
                        self.ordinal,
                        d.describe()
                    );
                    Some(Mutex::new(d))
                }
                Err(why) => {
                    eprintln!(
                        "cuda:{}: convolutions run as im2col + cuBLAS ({why})",
                        self.ordinal
                    );
                    None
                }
            })
            .as_ref()
    }

    /// The fault word, for a kernel to report bad input into (kernels/common.cuh).
    pub(crate) fn fault_word(&self) -> MutexGuard<'_, CudaSlice<u32>> {
        self.fault.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads and clears the fault word (the compute stream has just been synchronised, so
    /// the small read costs no further wait).
    fn take_fault(&self) -> Result<()> {
        let mut word = self.fault_word();
        let words = self
            .stream
            .clone_dtoh(&*word)
            .map_err(cuda_err("read the fault word"))?;
        match fault::error_of(&words) {
            None => Ok(()),
            Some(e) => {
                self.stream
                    .memset_zeros(&mut *word)
                    .map_err(cuda_err("clear the fault word"))?;
                Err(e)
            }
        }
    }

    /// How many times the host has waited for this device (explicit synchronisations,
    /// downloads, staged uploads) since it was opened: a training step that reads nothing
    /// back adds none, which the GPU tests check.
    pub fn host_syncs(&self) -> u64 {
        self.host_syncs.load(Ordering::Relaxed)
    }

    /// The caching pool's current and high-water memory use; `None` where the device has
    /// no memory pool.
    pub fn memory_stats(&self) -> Result<Option<memory::MemoryStats>> {
        self.pool.as_ref().map(|p| memory::stats(p.0)).transpose()
    }
    /// Hands the pool's cached memory back to the driver, after the compute stream's
    /// queued frees have happened (for allocations outside the pool). Waits without
    /// reading the fault word: a bad input stays the error of the caller's next
    /// synchronisation rather than of this internal wait.
    pub(crate) fn trim_memory(&self) -> Result<()> {
        match &self.pool {
            Some(p) => {
                self.host_syncs.fetch_add(1, Ordering::Relaxed);
                self.stream.synchronize().map_err(cuda_err("synchronize"))?;
                memory::trim(p.0)
            }
            None => Ok(()),
        }
    }
    /// Restarts the high-water marks of [`Self::memory_stats`] from the current use.
    pub fn reset_memory_peaks(&self) -> Result<()> {
        match &self.pool {
            Some(p) => memory::reset_peaks(p.0),
            None => Ok(()),
        }
    }

    /// The kernel `name`, compiling its module on first use.
    pub(crate) fn func(&self, name: &str) -> Result<CudaFunction> {
        if let Some(f) = self
            .functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            return Ok(f.clone());
        }
        let (m, name) = kernels::find(name)
            .ok_or_else(|| Error::msg(format!("CUDA: no kernel named {name} in kernels/*.cu")))?;
        let module = {
            let mut cache = self.modules.lock().unwrap_or_else(|e| e.into_inner());
            match cache.get(m.name) {
                Some(x) => x.clone(),
                None => {
                    let ptx = kernels::compile(m, self.arch).map_err(|e| match e {
                        CompileError::Unavailable(s) => Error::CudaUnavailable(self.ordinal, s),
                        CompileError::Failed(s) => Error::msg(s),
                    })?;
                    let x = self.ctx.load_module(ptx).map_err(cuda_err("load module"))?;
                    cache.insert(m.name, x.clone());
                    x
                }
            }
        };
        let f = module
            .load_function(name)
            .map_err(cuda_err("load kernel"))?;
        self.functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, f.clone());
        Ok(f)
    }

    /// A 1-d launch covering `n` elements (grid-stride kernels take any grid).
    pub(crate) fn cfg(n: usize) -> LaunchConfig {
        let blocks = n.div_ceil(256).clamp(1, 1 << 20) as u32;
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        }
    }
    /// One block per row with a power-of-two thread count suited to `cols`, and
    /// `doubles_per_thread` doubles of dynamic shared memory per thread.
    pub(crate) fn cfg_rows(rows: usize, cols: usize, doubles_per_thread: u32) -> LaunchConfig {
        let threads = cols.next_power_of_two().clamp(32, 1024) as u32;
        LaunchConfig {
            grid_dim: (rows.clamp(1, i32::MAX as usize) as u32, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: threads * 8 * doubles_per_thread,
        }
    }

    /// Uninitialised device memory (plain `cuMemAlloc`, never managed memory); every
    /// caller overwrites all of it.
    pub(crate) fn alloc<T: DeviceRepr>(&self, n: usize) -> Result<CudaSlice<T>> {
        // SAFETY: the contents are written by a kernel or a copy before anyone reads them.
        unsafe { self.stream.alloc::<T>(n.max(1)) }.map_err(cuda_err("allocate"))
    }
    /// A fresh buffer of `n` elements that `write` fills (queuing its kernel on the compute
    /// stream); for `n == 0` the buffer, never read, without calling `write`, since a
    /// launch of no threads is an error.
    pub(crate) fn output<T: DeviceRepr>(
        &self,
        n: usize,
        write: impl FnOnce(&mut CudaSlice<T>) -> Result<()>,
    ) -> Result<CudaSlice<T>> {
        let mut out = self.alloc::<T>(n)?;
        if n > 0 {
            write(&mut out)?;
        }
        Ok(out)
    }
    pub(crate) fn alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        n: usize,
    ) -> Result<CudaSlice<T>> {
        self.stream
            .alloc_zeros::<T>(n.max(1))
            .map_err(cuda_err("allocate"))
    }

    /// Host to device, staged through pinned memory when large. Returns once the data is
    /// in the staging buffer, without waiting for the copy to the device (queued on the
    /// compute stream, so every later op sees the data).
    pub(crate) fn upload<T: DeviceRepr + Copy>(&self, src: &[T]) -> Result<CudaSlice<T>> {
        let mut dst = self.alloc::<T>(src.len())?;
        let bytes = std::mem::size_of_val(src);
        if bytes < PINNED_MIN_BYTES {
            if !src.is_empty() {
                self.stream
                    .memcpy_htod(src, &mut dst)
                    .map_err(cuda_err("copy to device"))?;
            }
            return Ok(dst);
        }
        let mut staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        let p = staging
            .reserve(&self.ctx, bytes, &self.host_syncs)?
            .cast::<T>();
        // SAFETY: `p` holds at least `bytes` bytes, page-aligned and free (reserve waited for
        // any copy out of it); nothing else uses it while we hold the lock, and the event
        // recorded below makes the next user wait for this copy.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len());
            let (dptr, _sync) = dst.device_ptr_mut(&self.stream);
            cu::memcpy_htod_async(
                dptr,
                std::slice::from_raw_parts(p, src.len()),
                self.stream.cu_stream(),
            )
            .map_err(cuda_err("copy to device"))?;
        }
        match self.stream.record_event(None) {
            Ok(e) => staging.pending = Some(e),
            Err(e) => {
                // Without the event the next user could not wait for this copy: wait now.
                self.stream.synchronize().map_err(cuda_err("synchronize"))?;
                return Err(cuda_err("record a staged upload")(e));
            }
        }
        Ok(dst)
    }

    /// Device to host on `stream` (the compute stream unless a side stream is given),
    /// staged through pinned memory when large.
    pub(crate) fn download_on<T: DeviceRepr + Copy + Default, S: DevicePtr<T>>(
        &self,
        src: &S,
        n: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<Vec<T>> {
        let bytes = n * std::mem::size_of::<T>();
        if n == 0 {
            return Ok(Vec::new());
        }
        self.host_syncs.fetch_add(1, Ordering::Relaxed);
        // A bad input a kernel found is the error of the first download on the compute
        // stream after it (downloads on a side stream do not wait for compute work).
        let compute = Arc::ptr_eq(stream, &self.stream);
        // The raw copies below need the context current on this thread (which may be a
        // compression thread that never touched CUDA before).
        self.ctx
            .bind_to_thread()
            .map_err(cuda_err("bind context"))?;
        if bytes < PINNED_MIN_BYTES {
            let mut out = vec![T::default(); n];
            {
                let (sptr, _sync) = src.device_ptr(stream);
                // SAFETY: `out` has room for n elements; `src` holds at least n.
                unsafe { cu::memcpy_dtoh_async(&mut out[..], sptr, stream.cu_stream()) }
                    .map_err(cuda_err("copy to host"))?;
            }
            stream.synchronize().map_err(cuda_err("synchronize"))?;
            if compute {
                self.take_fault()?;
            }
            return Ok(out);
        }
        let mut staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        let p = staging
            .reserve(&self.ctx, bytes, &self.host_syncs)?
            .cast::<T>();
        // SAFETY: as in `upload`; we synchronise the stream before reading the buffer.
        unsafe {
            let (sptr, _sync) = src.device_ptr(stream);
            cu::memcpy_dtoh_async(
                std::slice::from_raw_parts_mut(p, n),
                sptr,
                stream.cu_stream(),
            )
            .map_err(cuda_err("copy to host"))?;
            drop(_sync);
            stream.synchronize().map_err(cuda_err("synchronize"))?;
            let out = std::slice::from_raw_parts(p, n).to_vec();
            drop(staging);
            if compute {
                self.take_fault()?;
            }
            Ok(out)
        }
    }
    pub(crate) fn download<T: DeviceRepr + Copy + Default, S: DevicePtr<T>>(
        &self,
        src: &S,
        n: usize,
    ) -> Result<Vec<T>> {
        self.download_on(src, n, &self.stream)
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        let s = self.staging.get_mut().unwrap_or_else(|e| e.into_inner());
        if !s.ptr.is_null() {
            let _ = self.stream.synchronize();
            // SAFETY: allocated by malloc_host; no copy is in flight after the sync.
            let _ = unsafe { cu::free_host(s.ptr.cast()) };
        }
    }
}
