//! Our CUDA kernels: the sources in `kernels/*.cu`, embedded with `include_str!` and
//! compiled by NVRTC to PTX for a given architecture (the device's at first use; sm_80
//! and sm_90 in the `kernels_compile_nvrtc` test, which needs no GPU). Also the plain
//! structs passed to kernels by value and the op codes their switch statements use.
//!
//! This file must not launch anything: it is loadable without a driver.

use crate::storage::{BinaryOp, UnaryOp};
use crate::Layout;
use cudarc::driver::DeviceRepr;

/// Prepended to every module (NVRTC gets no include path).
const COMMON: &str = include_str!("../../kernels/common.cuh");

/// A kernel module: its name (the `.cu` file), source and the kernels it must export.
pub struct KernelModule {
    pub name: &'static str,
    pub source: &'static str,
    pub kernels: &'static [&'static str],
}

pub const MODULES: &[KernelModule] = &[
    KernelModule {
        name: "elementwise",
        source: include_str!("../../kernels/elementwise.cu"),
        kernels: &[
            "fill_f32",
            "fill_f64",
            "fill_u32",
            "copy_f32",
            "copy_f64",
            "copy_u32",
            "scatter_f32",
            "scatter_f64",
            "scatter_u32",
            "cast_f32_f64",
            "cast_f64_f32",
            "cast_u32_f32",
            "cast_u32_f64",
            "cast_f32_u32",
            "cast_f64_u32",
            "unary_f32",
            "unary_f64",
            "binary_f32",
            "binary_f64",
            "where_f32",
            "where_f64",
        ],
    },
    KernelModule {
        name: "reduce",
        source: include_str!("../../kernels/reduce.cu"),
        kernels: &["reduce_f32", "reduce_f64", "argmax_f32", "argmax_f64"],
    },
    KernelModule {
        name: "softmax",
        source: include_str!("../../kernels/softmax.cu"),
        kernels: &[
            "softmax_f32",
            "softmax_f64",
            "softmax_bwd_f32",
            "softmax_bwd_f64",
            "ce_fwd_f32",
            "ce_fwd_f64",
            "ce_mean_f32",
            "ce_mean_f64",
            "ce_bwd_f32",
            "ce_bwd_f64",
        ],
    },
    KernelModule {
        name: "conv",
        source: include_str!("../../kernels/conv.cu"),
        kernels: &["im2col_f32", "im2col_f64", "col2im_f32", "col2im_f64"],
    },
    KernelModule {
        name: "pool",
        source: include_str!("../../kernels/pool.cu"),
        kernels: &[
            "pool_fwd_f32",
            "pool_fwd_f64",
            "pool_bwd_f32",
            "pool_bwd_f64",
        ],
    },
    KernelModule {
        name: "norm",
        source: include_str!("../../kernels/norm.cu"),
        kernels: &[
            "bn_stats_f32",
            "bn_stats_f64",
            "bn_eval_stats_f32",
            "bn_eval_stats_f64",
            "bn_apply_f32",
            "bn_apply_f64",
            "bn_bwd_sums_f32",
            "bn_bwd_sums_f64",
            "bn_bwd_dx_f32",
            "bn_bwd_dx_f64",
        ],
    },
    KernelModule {
        name: "index",
        source: include_str!("../../kernels/index.cu"),
        kernels: &[
            "index_select_f32",
            "index_select_f64",
            "index_select_u32",
            "index_add_f32",
            "index_add_f64",
        ],
    },
    KernelModule {
        name: "random",
        source: include_str!("../../kernels/random.cu"),
        kernels: &["dropout_mask_f32", "dropout_mask_f64"],
    },
    KernelModule {
        name: "topk",
        source: include_str!("../../kernels/topk.cu"),
        kernels: &[
            "topk_init_f32",
            "topk_init_f64",
            "topk_step_f32",
            "topk_step_f64",
            "topk_take_f32",
            "topk_take_f64",
        ],
    },
    KernelModule {
        name: "rnn",
        source: include_str!("../../kernels/rnn.cu"),
        kernels: &[
            "lstm_cell_fwd_f32",
            "lstm_cell_fwd_f64",
            "lstm_cell_bwd_f32",
            "lstm_cell_bwd_f64",
            "gru_cell_fwd_f32",
            "gru_cell_fwd_f64",
            "gru_cell_bwd_f32",
            "gru_cell_bwd_f64",
        ],
    },
    KernelModule {
        name: "optim",
        source: include_str!("../../kernels/optim.cu"),
        kernels: &["sgd_momentum_f32", "sgd_momentum_f64"],
    },
    KernelModule {
        name: "sparsify",
        source: include_str!("../../kernels/sparsify.cu"),
        kernels: &[
            "mag_hist",
            "mag_pick",
            "mag_tile_count",
            "mag_tile_scan",
            "mag_tile_write",
            "zero_at",
            "gather_strided",
            "sum_sq_partial",
            "sum_sq_final",
            "dgc_accumulate",
        ],
    },
    KernelModule {
        name: "quantize",
        source: include_str!("../../kernels/quantize.cu"),
        kernels: &[
            "terngrad_codes",
            "bucket_scales",
            "qsgd_levels",
            "pack_codes",
            "unpack_codes",
            "sign_sums_partial",
            "sign_sums_final",
            "two_level_values",
        ],
    },
    KernelModule {
        name: "ctc",
        source: include_str!("../../kernels/ctc.cu"),
        kernels: &[
            "ctc_alpha_beta_f32",
            "ctc_alpha_beta_f64",
            "ctc_grad_f32",
            "ctc_grad_f64",
        ],
    },
];

/// The module that defines `kernel` and the kernel's name as stored there (`None` for
/// a name no module exports).
pub fn find(kernel: &str) -> Option<(&'static KernelModule, &'static str)> {
    MODULES
        .iter()
        .find_map(|m| m.kernels.iter().find(|k| **k == kernel).map(|k| (m, *k)))
}

/// Why NVRTC could not be used, or what it said about a source.
#[derive(Debug, Clone)]
pub enum CompileError {
    /// libnvrtc could not be loaded (not installed, or not on the library path).
    Unavailable(String),
    /// NVRTC ran and rejected the source; the message carries its log.
    Failed(String),
}

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompileError::Unavailable(m) | CompileError::Failed(m) => f.write_str(m),
        }
    }
}

/// Whether libnvrtc can be loaded. Probes with a plain dlopen first, because cudarc
/// panics (rather than returning an error) when a dynamically loaded library is missing.
pub fn nvrtc_available() -> bool {
    // SAFETY: only dlopen()s candidate library names and drops the handle.
    std::panic::catch_unwind(|| unsafe { cudarc::nvrtc::sys::is_culib_present() }).unwrap_or(false)
}

/// Compiles module `m` to PTX for `arch` (e.g. "sm_90").
pub fn compile(m: &KernelModule, arch: &'static str) -> Result<cudarc::nvrtc::Ptx, CompileError> {
    if !nvrtc_available() {
        return Err(CompileError::Unavailable(
            "NVRTC (libnvrtc.so.13) could not be loaded: `pip install nvidia-cuda-nvrtc` and put \
             site-packages/nvidia/cu13/lib on LD_LIBRARY_PATH (see crates/tensor/CUDA.md)"
                .into(),
        ));
    }
    let src = format!("{COMMON}\n// ---- kernels/{}.cu\n{}", m.name, m.source);
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        // Exact IEEE division and square roots: results must match the CPU's.
        prec_div: Some(true),
        prec_sqrt: Some(true),
        fmad: Some(false),
        ..Default::default()
    };
    // A library that loads but lacks a symbol still panics inside cudarc; keep it an error.
    std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(src, opts))
        .map_err(|_| {
            CompileError::Unavailable(
                "NVRTC panicked while loading (an incompatible libnvrtc?)".into(),
            )
        })?
        .map_err(|e| CompileError::Failed(format!("kernels/{}.cu for {arch}: {e:?}", m.name)))
}

/// The largest rank a strided kernel argument holds (`MAX_DIMS` in common.cuh).
pub const MAX_DIMS: usize = 8;

/// A strided view passed by value to kernels; `Strided` in common.cuh, field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Strided {
    pub ndim: i64,
    pub offset: i64,
    pub shape: [i64; MAX_DIMS],
    pub strides: [i64; MAX_DIMS],
}
// SAFETY: plain old data with the C layout the kernels declare.
unsafe impl DeviceRepr for Strided {}

impl Strided {
    /// From explicit dims and strides (in elements) and a start offset.
    pub fn new(dims: &[usize], strides: &[usize], offset: usize) -> crate::Result<Strided> {
        // Dims of size 1 carry no information; dropping them lets rank-9+ views that are
        // really smaller through.
        let mut kept: Vec<(usize, usize)> = Vec::with_capacity(dims.len());
        for (&d, &st) in dims.iter().zip(strides).filter(|(d, _)| **d != 1) {
            // Merge with the previous dim when the two walk memory as one (outer stride =
            // inner stride × inner size): a contiguous view becomes one dim, which the
            // kernels index with a multiply-add instead of divisions (common.cuh).
            match kept.last_mut() {
                Some((pd, ps)) if *ps == st * d => {
                    *pd *= d;
                    *ps = st;
                }
                _ => kept.push((d, st)),
            }
        }
        if kept.len() > MAX_DIMS {
            return Err(crate::Error::msg(format!(
                "CUDA kernels take views of at most {MAX_DIMS} dimensions (of size > 1), got dims {dims:?}; make the tensor contiguous or reshape it first"
            )));
        }
        let mut s = Strided {
            ndim: kept.len() as i64,
            offset: offset as i64,
            shape: [1; MAX_DIMS],
            strides: [0; MAX_DIMS],
        };
        for (k, (d, st)) in kept.into_iter().enumerate() {
            s.shape[k] = d as i64;
            s.strides[k] = st as i64;
        }
        Ok(s)
    }
    pub fn of(l: &Layout) -> crate::Result<Strided> {
        Strided::new(l.dims(), l.strides(), l.offset())
    }
    /// A contiguous vector of `n` elements.
    pub fn flat(n: usize) -> Strided {
        let mut s = Strided {
            ndim: 1,
            offset: 0,
            shape: [1; MAX_DIMS],
            strides: [0; MAX_DIMS],
        };
        s.shape[0] = n as i64;
        s.strides[0] = 1;
        s
    }
}

/// The kernel code and its two parameters for a unary op.
pub fn unary_code(op: UnaryOp) -> (i32, f64, f64) {
    match op {
        UnaryOp::Neg => (0, 0.0, 0.0),
        UnaryOp::Abs => (1, 0.0, 0.0),
        UnaryOp::Sign => (2, 0.0, 0.0),
        UnaryOp::Sqrt => (3, 0.0, 0.0),
        UnaryOp::Exp => (4, 0.0, 0.0),
        UnaryOp::Log => (5, 0.0, 0.0),
        UnaryOp::Tanh => (6, 0.0, 0.0),
        UnaryOp::Sigmoid => (7, 0.0, 0.0),
        UnaryOp::Relu => (8, 0.0, 0.0),
        UnaryOp::Step => (9, 0.0, 0.0),
        UnaryOp::Sqr => (10, 0.0, 0.0),
        UnaryOp::Recip => (11, 0.0, 0.0),
        UnaryOp::Affine { mul, add } => (12, mul, add),
        UnaryOp::Powf(e) => (13, e, 0.0),
        UnaryOp::Clamp { min, max } => (14, min, max),
        UnaryOp::InRange { min, max } => (15, min, max),
    }
}

pub fn binary_code(op: BinaryOp) -> i32 {
    match op {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
        BinaryOp::Maximum => 4,
        BinaryOp::Minimum => 5,
        BinaryOp::Eq => 6,
        BinaryOp::Ne => 7,
        BinaryOp::Lt => 8,
        BinaryOp::Le => 9,
        BinaryOp::Gt => 10,
        BinaryOp::Ge => 11,
    }
}

#[cfg(test)]
mod tests {
    use super::Strided;

    fn dims(s: &Strided) -> Vec<(i64, i64)> {
        (0..s.ndim as usize)
            .map(|k| (s.shape[k], s.strides[k]))
            .collect()
    }

    #[test]
    fn strided_views_merge_the_dims_that_walk_memory_as_one() {
        // Contiguous: one dim, whatever the rank.
        let s = Strided::new(&[2, 3, 4], &[12, 4, 1], 5).unwrap();
        assert_eq!((dims(&s), s.offset), (vec![(24, 1)], 5));
        // A transpose does not merge.
        let s = Strided::new(&[3, 2], &[1, 3], 0).unwrap();
        assert_eq!(dims(&s), vec![(3, 1), (2, 3)]);
        // A row broadcast keeps its zero stride apart; a full broadcast is one dim.
        let s = Strided::new(&[2, 3], &[0, 1], 0).unwrap();
        assert_eq!(dims(&s), vec![(2, 0), (3, 1)]);
        let s = Strided::new(&[2, 3], &[0, 0], 0).unwrap();
        assert_eq!(dims(&s), vec![(6, 0)]);
        // Size-1 dims are dropped first; a narrowed row keeps its row stride.
        let s = Strided::new(&[4, 1, 5], &[10, 99, 1], 0).unwrap();
        assert_eq!(dims(&s), vec![(4, 10), (5, 1)]);
        // A scalar view: no dims.
        let s = Strided::new(&[1, 1], &[0, 0], 7).unwrap();
        assert_eq!((s.ndim, s.offset), (0, 7));
    }
}
