//! A device handle: one context and stream, our kernel modules compiled for the device's
//! architecture on first use (cached), and a cuBLAS handle. Its methods take and return
//! host buffers so that tests can compare every kernel with the CPU; `CudaStorage` will
//! keep the same kernels' inputs and outputs on the device.

use super::kernels::{self, binary_code, unary_code, SOURCES};
use crate::storage::{BinaryOp, UnaryOp};
use cudarc::cublas::{sys::cublasOperation_t, CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("CUDA: {0}")]
    Driver(String),
    #[error("{0}")]
    Compile(String),
    #[error("{0}")]
    Shape(String),
}

type Result<T> = std::result::Result<T, GpuError>;

fn drv<E: std::fmt::Debug>(e: E) -> GpuError {
    GpuError::Driver(format!("{e:?}"))
}

/// Broadcast geometry passed by value to `binary_f32` (8 dims at most).
#[repr(C)]
#[derive(Clone, Copy)]
struct Dims {
    shape: [i64; 8],
    ls: [i64; 8],
    rs: [i64; 8],
}
unsafe impl DeviceRepr for Dims {}

pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub arch: &'static str,
    blas: CudaBlas,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
}

fn arch_name(major: i32, minor: i32) -> &'static str {
    match (major, minor) {
        (9, _) => "sm_90",
        (8, 9) => "sm_89",
        (8, 6) => "sm_86",
        (8, _) => "sm_80",
        (7, 5) => "sm_75",
        (10, _) => "sm_100",
        (12, _) => "sm_120",
        _ => "sm_80",
    }
}

impl Gpu {
    pub fn new(ordinal: usize) -> Result<Gpu> {
        let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|_| GpuError::Driver("the CUDA driver library (libcuda.so) could not be loaded".into()))?
            .map_err(drv)?;
        let major = ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .map_err(drv)?;
        let minor = ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
            .map_err(drv)?;
        let stream = ctx.default_stream();
        let blas = std::panic::catch_unwind(|| CudaBlas::new(stream.clone()))
            .map_err(|_| GpuError::Driver("cuBLAS (libcublas.so.13) could not be loaded".into()))?
            .map_err(drv)?;
        Ok(Gpu { ctx, stream, arch: arch_name(major, minor), blas, modules: Mutex::new(HashMap::new()) })
    }

    /// The kernel `name` from module `module`, compiling the module on first use.
    fn function(&self, module: &'static str, name: &str) -> Result<CudaFunction> {
        let mut cache = self.modules.lock().map_err(|_| GpuError::Driver("module cache poisoned".into()))?;
        let m = match cache.get(module) {
            Some(m) => m.clone(),
            None => {
                let (_, src, _) = SOURCES
                    .iter()
                    .find(|s| s.0 == module)
                    .ok_or_else(|| GpuError::Compile(format!("no kernel module {module}")))?;
                let ptx = kernels::compile(module, src, self.arch).map_err(GpuError::Compile)?;
                let m = self.ctx.load_module(ptx).map_err(drv)?;
                cache.insert(module, m.clone());
                m
            }
        };
        m.load_function(name).map_err(drv)
    }

    fn grid(n: usize) -> LaunchConfig {
        let blocks = n.div_ceil(256).clamp(1, 65_535) as u32;
        LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
    }

    pub fn unary(&self, x: &[f32], op: UnaryOp) -> Result<Vec<f32>> {
        let f = self.function("elementwise", "unary_f32")?;
        let dx = self.stream.clone_htod(x).map_err(drv)?;
        let mut dy = self.stream.alloc_zeros::<f32>(x.len().max(1)).map_err(drv)?;
        let (code, a, b) = unary_code(op);
        let n = x.len() as u64;
        let mut l = self.stream.launch_builder(&f);
        l.arg(&dx).arg(&mut dy).arg(&n).arg(&code).arg(&a).arg(&b);
        unsafe { l.launch(Self::grid(x.len())) }.map_err(drv)?;
        let mut out = self.stream.clone_dtoh(&dy).map_err(drv)?;
        out.truncate(x.len());
        Ok(out)
    }

    /// `l op r` broadcast to `shape`; `l_strides`/`r_strides` in elements (0 to broadcast).
    pub fn binary(&self, l: &[f32], l_strides: &[usize], r: &[f32], r_strides: &[usize], shape: &[usize], op: BinaryOp) -> Result<Vec<f32>> {
        if shape.len() > 8 || l_strides.len() != shape.len() || r_strides.len() != shape.len() {
            return Err(GpuError::Shape(format!("binary: shape {shape:?} with strides {l_strides:?} and {r_strides:?}")));
        }
        let mut d = Dims { shape: [1; 8], ls: [0; 8], rs: [0; 8] };
        for k in 0..shape.len() {
            d.shape[k] = shape[k] as i64;
            d.ls[k] = l_strides[k] as i64;
            d.rs[k] = r_strides[k] as i64;
        }
        let n: usize = shape.iter().product();
        let f = self.function("elementwise", "binary_f32")?;
        let (dl, dr) = (self.stream.clone_htod(l).map_err(drv)?, self.stream.clone_htod(r).map_err(drv)?);
        let mut dy = self.stream.alloc_zeros::<f32>(n.max(1)).map_err(drv)?;
        let (n64, ndim, code) = (n as u64, shape.len() as i32, binary_code(op));
        let mut b = self.stream.launch_builder(&f);
        b.arg(&dl).arg(&dr).arg(&mut dy).arg(&n64).arg(&ndim).arg(&d).arg(&code);
        unsafe { b.launch(Self::grid(n)) }.map_err(drv)?;
        let mut out = self.stream.clone_dtoh(&dy).map_err(drv)?;
        out.truncate(n);
        Ok(out)
    }

    fn rows(&self, module: &'static str, name: &str, x: &[f32], rows: usize, cols: usize, out_len: usize, extra: Option<i32>) -> Result<Vec<f32>> {
        if x.len() != rows * cols || rows == 0 {
            return Err(GpuError::Shape(format!("{name}: {} values are not {rows} rows of {cols}", x.len())));
        }
        let f = self.function(module, name)?;
        let dx = self.stream.clone_htod(x).map_err(drv)?;
        let mut dy = self.stream.alloc_zeros::<f32>(out_len).map_err(drv)?;
        let threads = (cols.next_power_of_two()).clamp(32, 1024) as u32;
        let cfg = LaunchConfig { grid_dim: (rows as u32, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: threads * 4 };
        let c = cols as u64;
        let mut b = self.stream.launch_builder(&f);
        b.arg(&dx).arg(&mut dy).arg(&c);
        if let Some(e) = &extra {
            b.arg(e);
        }
        unsafe { b.launch(cfg) }.map_err(drv)?;
        self.stream.clone_dtoh(&dy).map_err(drv)
    }

    pub fn row_sum(&self, x: &[f32], rows: usize, cols: usize) -> Result<Vec<f32>> {
        self.rows("reduce", "row_sum_f32", x, rows, cols, rows, None)
    }
    pub fn row_max(&self, x: &[f32], rows: usize, cols: usize) -> Result<Vec<f32>> {
        self.rows("reduce", "row_max_f32", x, rows, cols, rows, None)
    }
    pub fn softmax_rows(&self, x: &[f32], rows: usize, cols: usize, log: bool) -> Result<Vec<f32>> {
        self.rows("softmax", "softmax_rows_f32", x, rows, cols, rows * cols, Some(log as i32))
    }

    /// Row-major `[m, k] × [k, n]` through cuBLAS (column-major: computes Bᵀ·Aᵀ = Cᵀ).
    /// Full f32 (no TF32), so results compare with the CPU.
    pub fn matmul(&self, a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Result<Vec<f32>> {
        if a.len() != m * k || b.len() != k * n {
            return Err(GpuError::Shape(format!("matmul: {} and {} values for [{m}, {k}] × [{k}, {n}]", a.len(), b.len())));
        }
        let (da, db) = (self.stream.clone_htod(a).map_err(drv)?, self.stream.clone_htod(b).map_err(drv)?);
        let mut dc = self.stream.alloc_zeros::<f32>((m * n).max(1)).map_err(drv)?;
        let cfg = GemmConfig {
            transa: cublasOperation_t::CUBLAS_OP_N,
            transb: cublasOperation_t::CUBLAS_OP_N,
            m: n as i32,
            n: m as i32,
            k: k as i32,
            alpha: 1.0f32,
            lda: n as i32,
            ldb: k as i32,
            beta: 0.0f32,
            ldc: n as i32,
        };
        unsafe { self.blas.gemm(cfg, &db, &da, &mut dc) }.map_err(drv)?;
        let mut out = self.stream.clone_dtoh(&dc).map_err(drv)?;
        out.truncate(m * n);
        Ok(out)
    }
}
