//! Convolutions through cuDNN: forward, input gradient and weight gradient, each with
//! its algorithm chosen once per shape and cached, and one workspace kept per device and
//! grown on demand. Where cuDNN cannot be loaded, is switched off, or offers no suitable
//! algorithm for a shape, `conv.rs`'s im2col + cuBLAS path runs instead, and the first
//! convolution says once which path runs.
//!
//! Suitable means: status success, a workspace of at most [`WORKSPACE_CAP`], FMA math
//! for f32 unless TF32 is allowed (`set_allow_tf32`, as for products), and a
//! deterministic algorithm unless `fastest` is asked for. `GRADEX_CUDNN` chooses how:
//! - unset or `on`: cuDNN's heuristic ranking (`cudnnGet*Algorithm_v7`), first suitable
//!   entry; the same algorithm in every run and on every rank, so with deterministic
//!   algorithms a seed gives the same bits every run (which byte-for-byte comparisons of
//!   methods rely on), as PyTorch with `benchmark=False, deterministic=True`;
//! - `benchmark`: measured (`cudnnFind*`, as `torch.backends.cudnn.benchmark`),
//!   deterministic algorithms only; faster where the heuristic misjudges, but timing can
//!   pick differently from run to run, so bits may differ between runs;
//! - `fastest`: measured, non-deterministic algorithms admitted (PyTorch's
//!   `benchmark=True` default);
//! - `off`: never cuDNN.
//!
//! Our own descriptor wrappers over cudarc's `cudnn::result` calls, rather than its safe
//! layer, because the ranking and measuring calls need the raw descriptors (the safe
//! layer keeps them private and returns only the heuristic's first entry).

use super::blas::tf32_allowed;
use super::device::{cuda_err, CudaDevice};
use super::dtype::GpuFloat;
use crate::storage::Conv2dParams;
use crate::{Error, Result};
use cudarc::cudnn::{result as dnn, sys};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, SyncOnDrop};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::MutexGuard;

/// Algorithms needing a larger workspace are passed over (PyTorch caps by free memory;
/// a fixed bound keeps the choice the same from run to run).
const WORKSPACE_CAP: usize = 1 << 30;

/// Which algorithms `GRADEX_CUDNN` admits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Off,
    /// Heuristic ranking, deterministic algorithms.
    Heuristic,
    /// Measured, deterministic algorithms.
    Benchmark,
    /// Measured, any algorithm.
    Fastest,
}

pub(crate) fn mode_from_env() -> Result<Mode> {
    match std::env::var("GRADEX_CUDNN") {
        Err(std::env::VarError::NotPresent) => Ok(Mode::Heuristic),
        Ok(v) => parse_mode(&v),
        Err(e) => Err(Error::msg(format!("GRADEX_CUDNN: {e}"))),
    }
}

pub(crate) fn parse_mode(v: &str) -> Result<Mode> {
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "on" | "1" => Ok(Mode::Heuristic),
        "benchmark" => Ok(Mode::Benchmark),
        "fastest" => Ok(Mode::Fastest),
        "off" | "0" => Ok(Mode::Off),
        _ => Err(Error::msg(format!(
            "GRADEX_CUDNN={v:?}: expected on (heuristic choice, deterministic algorithms), \
             benchmark (measured, deterministic), fastest (measured, any) or off"
        ))),
    }
}

pub(crate) struct TensorDesc(pub(crate) sys::cudnnTensorDescriptor_t);
impl Drop for TensorDesc {
    fn drop(&mut self) {
        // SAFETY: created by create_tensor_descriptor, destroyed once.
        let _ = unsafe { dnn::destroy_tensor_descriptor(self.0) };
    }
}
struct FilterDesc(sys::cudnnFilterDescriptor_t);
impl Drop for FilterDesc {
    fn drop(&mut self) {
        // SAFETY: created by create_filter_descriptor, destroyed once.
        let _ = unsafe { dnn::destroy_filter_descriptor(self.0) };
    }
}
struct ConvDesc(sys::cudnnConvolutionDescriptor_t);
impl Drop for ConvDesc {
    fn drop(&mut self) {
        // SAFETY: created by create_convolution_descriptor, destroyed once.
        let _ = unsafe { dnn::destroy_convolution_descriptor(self.0) };
    }
}

/// The descriptors of one convolution: input x, weights w, output y, and the convolution.
struct Descs {
    x: TensorDesc,
    w: FilterDesc,
    y: TensorDesc,
    conv: ConvDesc,
}

fn int(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::msg(format!("cuDNN convolution: {what} {v} exceeds i32")))
}

fn descs(
    p: &Conv2dParams,
    dtype: sys::cudnnDataType_t,
    math: sys::cudnnMathType_t,
) -> Result<Descs> {
    let x = TensorDesc::nchw([p.batch, p.in_channels, p.in_h, p.in_w], dtype)?;
    let y = TensorDesc::nchw([p.batch, p.out_channels, p.out_h(), p.out_w()], dtype)?;
    let groups = int(p.groups.max(1), "groups")?;
    let wd =
        FilterDesc(dnn::create_filter_descriptor().map_err(cuda_err("create filter descriptor"))?);
    let conv = ConvDesc(
        dnn::create_convolution_descriptor().map_err(cuda_err("create convolution descriptor"))?,
    );
    // SAFETY: each descriptor was just created and is set once before use.
    unsafe {
        dnn::set_filter4d_descriptor(
            wd.0,
            dtype,
            sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
            [
                int(p.out_channels, "output channels")?,
                int(p.in_channels, "channels")? / groups,
                int(p.k_h, "kernel height")?,
                int(p.k_w, "kernel width")?,
            ],
        )
        .map_err(cuda_err("set filter descriptor"))?;
        dnn::set_convolution2d_descriptor(
            conv.0,
            int(p.padding.0, "padding")?,
            int(p.padding.1, "padding")?,
            int(p.stride.0, "stride")?,
            int(p.stride.1, "stride")?,
            int(p.dilation.0, "dilation")?,
            int(p.dilation.1, "dilation")?,
            // Cross-correlation, as every framework's "convolution".
            sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
            dtype,
        )
        .map_err(cuda_err("set convolution descriptor"))?;
        dnn::set_convolution_group_count(conv.0, groups).map_err(cuda_err("set group count"))?;
        dnn::set_convolution_math_type(conv.0, math).map_err(cuda_err("set math type"))?;
    }
    Ok(Descs { x, w: wd, y, conv })
}

/// The three passes of a convolution, each with its own algorithm family.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Pass {
    Forward,
    Data,
    Filter,
}

#[derive(Clone, Copy, Debug)]
enum Algo {
    Forward(sys::cudnnConvolutionFwdAlgo_t),
    Data(sys::cudnnConvolutionBwdDataAlgo_t),
    Filter(sys::cudnnConvolutionBwdFilterAlgo_t),
}

/// The measured choice for one shape and pass.
#[derive(Clone, Copy, Debug)]
struct Choice {
    algo: Algo,
    workspace: usize,
    math: sys::cudnnMathType_t,
}

/// A convolution's shape, dtype (f64 or not), TF32 switch and pass: what a choice
/// depends on.
type Key = (Conv2dParams, bool, bool, Pass);

/// One device's cuDNN state: the handle (bound to the compute stream), the choices made so
/// far (`None`: cuDNN has nothing suitable for that shape, our kernels run it) and the
/// workspace. Used under the device's mutex only.
pub(crate) struct Dnn {
    handle: sys::cudnnHandle_t,
    mode: Mode,
    version: usize,
    choices: HashMap<Key, Option<Choice>>,
    workspace: Option<CudaSlice<u8>>,
}
// SAFETY: the handle is used by one thread at a time (behind CudaDevice's mutex), which is
// what cuDNN requires; it is not tied to the creating thread.
unsafe impl Send for Dnn {}

impl Drop for Dnn {
    fn drop(&mut self) {
        // SAFETY: created by create_handle, destroyed once.
        let _ = unsafe { dnn::destroy_handle(self.handle) };
    }
}

/// cuDNN for `dev`, or why our kernels run instead (for the once-only message).
pub(crate) fn open(dev: &CudaDevice) -> std::result::Result<Dnn, String> {
    let mode = mode_from_env().map_err(|e| e.to_string())?;
    if mode == Mode::Off {
        return Err("GRADEX_CUDNN=off".into());
    }
    // SAFETY: dlopen probe only; cudarc panics on a missing library, hence the probe.
    let present = std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
    if !present {
        return Err("cuDNN (libcudnn.so) is not on the library path".into());
    }
    let made = std::panic::catch_unwind(|| -> std::result::Result<Dnn, String> {
        dev.ctx.bind_to_thread().map_err(|e| format!("{e:?}"))?;
        let handle = dnn::create_handle().map_err(|e| format!("creating a handle: {e:?}"))?;
        let dnn = Dnn {
            handle,
            mode,
            version: dnn::get_version(),
            choices: HashMap::new(),
            workspace: None,
        };
        // SAFETY: a valid handle and the device's live compute stream.
        unsafe { dnn::set_stream(handle, dev.stream.cu_stream() as sys::cudaStream_t) }
            .map_err(|e| format!("binding the compute stream: {e:?}"))?;
        Ok(dnn)
    });
    made.unwrap_or_else(|_| Err("cuDNN could not be loaded".into()))
}

impl Dnn {
    /// The handle, for the other cuDNN calls (batch norm) made under the same lock.
    pub(crate) fn handle(&self) -> sys::cudnnHandle_t {
        self.handle
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "cuDNN {} ({} once per shape)",
            self.version,
            match self.mode {
                Mode::Fastest => "the fastest algorithm measured",
                Mode::Benchmark => "the fastest deterministic algorithm measured",
                _ => "the heuristic's first deterministic algorithm",
            }
        )
    }

    fn suitable(
        &self,
        status: sys::cudnnStatus_t,
        memory: usize,
        det: sys::cudnnDeterminism_t,
        math: sys::cudnnMathType_t,
        fma_only: bool,
    ) -> bool {
        status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS
            && memory <= WORKSPACE_CAP
            && (self.mode == Mode::Fastest || det == sys::cudnnDeterminism_t::CUDNN_DETERMINISTIC)
            // DEFAULT_MATH permits TF32 on Ampere and later: for f32 without TF32 only
            // FMA_MATH will do (PyTorch asserts the same).
            && (!fma_only || math == sys::cudnnMathType_t::CUDNN_FMA_MATH)
    }

    /// The algorithms of `pass` for these descriptors, ranked by cuDNN's heuristic or
    /// measured (each run once, on scratch memory of cuDNN's own), best first, and the
    /// first suitable one.
    fn find(&self, d: &Descs, pass: Pass, fma_only: bool) -> Result<Option<Choice>> {
        const MAX: usize = 16;
        let measure = self.mode != Mode::Heuristic;
        // One pass's call: its perf struct, its ranking and measuring functions (same
        // signature), descriptor order, and the Algo variant its choice is.
        macro_rules! measure {
            ($perf:ty, $rank:ident, $find:ident, ($($desc:expr),*), $variant:ident, $what:expr) => {{
                let mut count = 0i32;
                // SAFETY: plain C structs, valid when zeroed.
                let mut r = [unsafe { std::mem::zeroed::<$perf>() }; MAX];
                // SAFETY: valid handle and descriptors; the results array holds MAX
                // entries and cuDNN writes at most `count` <= MAX of them.
                unsafe {
                    if measure {
                        sys::$find(self.handle, $($desc),*, MAX as i32, &mut count, r.as_mut_ptr())
                    } else {
                        sys::$rank(self.handle, $($desc),*, MAX as i32, &mut count, r.as_mut_ptr())
                    }
                }
                .result()
                .map_err(cuda_err($what))?;
                r[..count.clamp(0, MAX as i32) as usize]
                    .iter()
                    .find(|p| self.suitable(p.status, p.memory, p.determinism, p.mathType, fma_only))
                    .map(|p| Choice {
                        algo: Algo::$variant(p.algo),
                        workspace: p.memory,
                        math: p.mathType,
                    })
            }};
        }
        Ok(match pass {
            Pass::Forward => measure!(
                sys::cudnnConvolutionFwdAlgoPerf_t,
                cudnnGetConvolutionForwardAlgorithm_v7,
                cudnnFindConvolutionForwardAlgorithm,
                (d.x.0, d.w.0, d.conv.0, d.y.0),
                Forward,
                "rank forward algorithms"
            ),
            Pass::Data => measure!(
                sys::cudnnConvolutionBwdDataAlgoPerf_t,
                cudnnGetConvolutionBackwardDataAlgorithm_v7,
                cudnnFindConvolutionBackwardDataAlgorithm,
                (d.w.0, d.y.0, d.conv.0, d.x.0),
                Data,
                "rank input-gradient algorithms"
            ),
            Pass::Filter => measure!(
                sys::cudnnConvolutionBwdFilterAlgoPerf_t,
                cudnnGetConvolutionBackwardFilterAlgorithm_v7,
                cudnnFindConvolutionBackwardFilterAlgorithm,
                (d.x.0, d.y.0, d.conv.0, d.w.0),
                Filter,
                "rank weight-gradient algorithms"
            ),
        })
    }

    /// The choice for this shape and pass, ranked or measured on first sight; `None` when
    /// cuDNN has nothing suitable (or refuses the shape), which is remembered too.
    fn choice<T: GpuFloat>(
        &mut self,
        dev: &CudaDevice,
        p: &Conv2dParams,
        pass: Pass,
    ) -> Result<(Option<Choice>, Descs)> {
        let f64 = !T::IS_F32;
        let tf32 = !f64 && tf32_allowed();
        let math = if tf32 {
            sys::cudnnMathType_t::CUDNN_DEFAULT_MATH
        } else {
            sys::cudnnMathType_t::CUDNN_FMA_MATH
        };
        let d = descs(p, data_type::<T>(), math)?;
        let k = (*p, f64, tf32, pass);
        let c = match self.choices.get(&k) {
            Some(c) => *c,
            None => {
                if self.mode != Mode::Heuristic {
                    // cudnnFind* allocates its scratch with cudaMalloc, which cannot use
                    // what our pool keeps cached: hand the cache back first. Measuring
                    // synchronises, once per shape.
                    dev.trim_memory()?;
                }
                // A refusal means our kernels, for this shape from now on.
                let c = self.find(&d, pass, !f64 && !tf32).unwrap_or_else(|e| {
                    eprintln!("cuda:{}: cuDNN refused a convolution ({pass:?}, {p:?}): {e}; our kernels run it", dev.ordinal());
                    None
                });
                self.choices.insert(k, c);
                c
            }
        };
        if let Some(c) = c {
            // SAFETY: a live descriptor; the math type the measured algorithm ran with.
            unsafe { dnn::set_convolution_math_type(d.conv.0, c.math) }
                .map_err(cuda_err("set math type"))?;
        }
        Ok((c, d))
    }

    /// The workspace, at least `bytes` long (kept and reused: every use is on the compute
    /// stream, so a later convolution cannot overwrite it while an earlier one reads it).
    fn workspace(&mut self, dev: &CudaDevice, bytes: usize) -> Result<Option<&mut CudaSlice<u8>>> {
        if bytes == 0 {
            return Ok(None);
        }
        if self.workspace.as_ref().is_none_or(|w| w.len() < bytes) {
            self.workspace = None;
            self.workspace = Some(dev.alloc::<u8>(bytes)?);
        }
        Ok(self.workspace.as_mut())
    }
}

impl TensorDesc {
    /// A 4-d NCHW descriptor of `dims` in the dtype cuDNN calls `dtype`.
    pub(crate) fn nchw(dims: [usize; 4], dtype: sys::cudnnDataType_t) -> Result<TensorDesc> {
        let t = TensorDesc(
            dnn::create_tensor_descriptor().map_err(cuda_err("create tensor descriptor"))?,
        );
        let [n, c, h, w] = dims;
        let dims = [
            int(n, "batch")?,
            int(c, "channels")?,
            int(h, "height")?,
            int(w, "width")?,
        ];
        // SAFETY: a descriptor just created, set once.
        unsafe {
            dnn::set_tensor4d_descriptor(
                t.0,
                sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                dtype,
                dims,
            )
        }
        .map_err(cuda_err("set tensor descriptor"))?;
        Ok(t)
    }
}

/// `dev`'s cuDNN, locked, with the device's context current on this thread (cuDNN's
/// calls use it, and this may be a thread's first CUDA call, e.g. a compression
/// thread's); `None` where cuDNN is absent or off.
pub(crate) fn lock(dev: &CudaDevice) -> Result<Option<MutexGuard<'_, Dnn>>> {
    let Some(dnn) = dev.dnn() else {
        return Ok(None);
    };
    dev.ctx.bind_to_thread().map_err(cuda_err("bind context"))?;
    Ok(Some(dnn.lock().unwrap_or_else(|e| e.into_inner())))
}

/// cuDNN's alpha = 1 and beta = 0 (write the result, read nothing of the output), kept
/// alive while the call that points at them runs.
pub(crate) struct Scaling<T>(T, T);
impl<T: GpuFloat> Scaling<T> {
    pub(crate) fn new() -> Self {
        Scaling(T::from_f64(1.0), T::from_f64(0.0))
    }
    pub(crate) fn pointers(&self) -> (*const c_void, *const c_void) {
        (
            (&self.0 as *const T).cast::<c_void>(),
            (&self.1 as *const T).cast::<c_void>(),
        )
    }
}

/// cuDNN's name for T.
pub(crate) fn data_type<T: GpuFloat>() -> sys::cudnnDataType_t {
    if T::IS_F32 {
        sys::cudnnDataType_t::CUDNN_DATA_FLOAT
    } else {
        sys::cudnnDataType_t::CUDNN_DATA_DOUBLE
    }
}

/// Device addresses as cuDNN's untyped pointers.
pub(crate) fn ptr<'a, T>(
    s: &'a CudaSlice<T>,
    dev: &'a CudaDevice,
) -> (*const c_void, SyncOnDrop<'a>) {
    let (p, sync) = s.device_ptr(&dev.stream);
    (p as usize as *const c_void, sync)
}
pub(crate) fn ptr_mut<'a, T>(
    s: &'a mut CudaSlice<T>,
    dev: &'a CudaDevice,
) -> (*mut c_void, SyncOnDrop<'a>) {
    let (p, sync) = s.device_ptr_mut(&dev.stream);
    (p as usize as *mut c_void, sync)
}

/// One pass of a convolution through cuDNN; `None` where our kernels must run it. `a` and
/// `b` are the pass's inputs in the order of its cuDNN call (forward: x, w; data, the
/// input gradient: w, dy; filter, the weight gradient: x, dy).
pub(crate) fn run<T: GpuFloat>(
    dev: &CudaDevice,
    p: &Conv2dParams,
    pass: Pass,
    a: &CudaSlice<T>,
    b: &CudaSlice<T>,
) -> Result<Option<CudaSlice<T>>> {
    let out_len = match pass {
        Pass::Forward => p.out_shape(),
        Pass::Data => p.in_shape(),
        Pass::Filter => p.weight_shape(),
    }
    .elem_count();
    let empty = [
        p.batch,
        p.in_channels,
        p.in_h,
        p.in_w,
        p.out_channels,
        p.k_h,
        p.k_w,
    ];
    if out_len == 0 || empty.contains(&0) {
        return Ok(None);
    }
    let Some(mut g) = lock(dev)? else {
        return Ok(None);
    };
    let (choice, d) = match g.choice::<T>(dev, p, pass) {
        Ok(x) => x,
        Err(e) => {
            // A shape cuDNN's descriptors cannot state (e.g. beyond i32): our kernels.
            eprintln!(
                "cuda:{}: {e}; our kernels run this convolution",
                dev.ordinal()
            );
            return Ok(None);
        }
    };
    let Some(c) = choice else {
        return Ok(None);
    };
    let handle = g.handle;
    let mut out = dev.alloc::<T>(out_len)?;
    let scale = Scaling::<T>::new();
    let (alpha, beta) = scale.pointers();
    let ws = g.workspace(dev, c.workspace)?;
    let ws_len = ws.as_ref().map_or(0, |w| w.len());
    let (wsp, _ws_sync) = match ws {
        Some(w) => {
            let (p, s) = ptr_mut(w, dev);
            (p, Some(s))
        }
        None => (std::ptr::null_mut(), None),
    };
    let (pa, _sa) = ptr(a, dev);
    let (pb, _sb) = ptr(b, dev);
    let (po, _so) = ptr_mut(&mut out, dev);
    // SAFETY: descriptors match the buffers' shapes and dtype (built from `p` and T); the
    // output holds out_len elements (the pass's result shape); beta is 0, so the
    // uninitialised output is never read; the workspace holds at least what the algorithm
    // asked for; everything is queued on the compute stream the handle is bound to.
    let status = unsafe {
        match c.algo {
            Algo::Forward(algo) => sys::cudnnConvolutionForward(
                handle, alpha, d.x.0, pa, d.w.0, pb, d.conv.0, algo, wsp, ws_len, beta, d.y.0, po,
            ),
            Algo::Data(algo) => sys::cudnnConvolutionBackwardData(
                handle, alpha, d.w.0, pa, d.y.0, pb, d.conv.0, algo, wsp, ws_len, beta, d.x.0, po,
            ),
            Algo::Filter(algo) => sys::cudnnConvolutionBackwardFilter(
                handle, alpha, d.x.0, pa, d.y.0, pb, d.conv.0, algo, wsp, ws_len, beta, d.w.0, po,
            ),
        }
    };
    status.result().map_err(cuda_err("convolution"))?;
    drop((_sa, _sb, _so, _ws_sync));
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::{parse_mode, Mode};

    #[test]
    fn modes_parse_and_bad_ones_are_named() {
        assert_eq!(parse_mode("").unwrap(), Mode::Heuristic);
        assert_eq!(parse_mode("ON").unwrap(), Mode::Heuristic);
        assert_eq!(parse_mode("benchmark").unwrap(), Mode::Benchmark);
        assert_eq!(parse_mode("fastest").unwrap(), Mode::Fastest);
        assert_eq!(parse_mode("off").unwrap(), Mode::Off);
        let e = parse_mode("sometimes").unwrap_err().to_string();
        assert!(e.contains("GRADEX_CUDNN"), "{e}");
    }
}
