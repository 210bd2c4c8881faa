//! Our CUDA kernels: sources embedded from `kernels/*.cu`, compiled by NVRTC to PTX for
//! a given architecture. The op codes here are the ones the `.cu` switch statements use.

use crate::storage::{BinaryOp, UnaryOp};

/// `(module name, CUDA source, kernel names)`.
pub const SOURCES: [(&str, &str, &[&str]); 3] = [
    ("elementwise", include_str!("../../kernels/elementwise.cu"), &["unary_f32", "binary_f32"]),
    ("reduce", include_str!("../../kernels/reduce.cu"), &["row_sum_f32", "row_max_f32"]),
    ("softmax", include_str!("../../kernels/softmax.cu"), &["softmax_rows_f32"]),
];

/// Compiles one source to PTX for `arch` (e.g. "sm_90"); the error carries NVRTC's log.
pub fn compile(name: &str, src: &str, arch: &'static str) -> Result<cudarc::nvrtc::Ptx, String> {
    let opts = cudarc::nvrtc::CompileOptions { arch: Some(arch), ..Default::default() };
    // NVRTC is loaded on first use; a missing library is a panic in cudarc, an error here.
    std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(src, opts))
        .map_err(|_| "NVRTC (libnvrtc.so.13) could not be loaded: pip install nvidia-cuda-nvrtc and put its lib folder on LD_LIBRARY_PATH".to_string())?
        .map_err(|e| format!("kernels/{name}.cu for {arch}: {e:?}"))
}

/// The kernel code and its two float parameters for a unary op.
pub fn unary_code(op: UnaryOp) -> (i32, f32, f32) {
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
        UnaryOp::Affine { mul, add } => (12, mul as f32, add as f32),
        UnaryOp::Powf(e) => (13, e as f32, 0.0),
        UnaryOp::Clamp { min, max } => (14, min as f32, max as f32),
        UnaryOp::InRange { min, max } => (15, min as f32, max as f32),
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
