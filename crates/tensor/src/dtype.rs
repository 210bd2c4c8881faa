//! Element types. Compute happens in f32 (f64 on the CPU for gradient checks); `U32`
//! holds indices and labels; f16 and bf16 exist only as storage and wire formats, through
//! the conversions at the bottom of this file.

use half::{bf16, f16};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
    U32,
}

impl DType {
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::F64 => 8,
        }
    }
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }
}

/// A floating-point element type the CPU kernels are generic over (f32 and f64).
pub trait Float:
    num_traits::Float
    + Send
    + Sync
    + Default
    + std::fmt::Debug
    + std::iter::Sum
    + std::ops::AddAssign
    + std::ops::SubAssign
    + std::ops::MulAssign
    + 'static
{
    const DTYPE: DType;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    /// e^x as the CPU kernels compute it: libm for f64 (the gradient checks' reference),
    /// a vectorisable form within 1.2 ulp for f32 (`cpu::fastmath`).
    fn kernel_exp(self) -> Self;
    /// tanh x as the CPU kernels compute it (f32: within 2 ulp, `cpu::fastmath`).
    fn kernel_tanh(self) -> Self;
    /// 1/(1 + e^−x) as the CPU kernels compute it (f32: within 2.5 ulp).
    fn kernel_sigmoid(self) -> Self;
}

impl Float for f32 {
    const DTYPE: DType = DType::F32;
    #[inline]
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn kernel_exp(self) -> Self {
        crate::cpu::fastmath::exp(self)
    }
    #[inline(always)]
    fn kernel_tanh(self) -> Self {
        crate::cpu::fastmath::tanh(self)
    }
    #[inline(always)]
    fn kernel_sigmoid(self) -> Self {
        crate::cpu::fastmath::sigmoid(self)
    }
}
impl Float for f64 {
    const DTYPE: DType = DType::F64;
    #[inline]
    fn from_f64(x: f64) -> Self {
        x
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline]
    fn kernel_exp(self) -> Self {
        self.exp()
    }
    #[inline]
    fn kernel_tanh(self) -> Self {
        self.tanh()
    }
    #[inline]
    fn kernel_sigmoid(self) -> Self {
        1.0 / (1.0 + (-self).exp())
    }
}

/// Converts f32 values to IEEE half precision (round to nearest even), for f16 wire formats.
pub fn f32_to_f16(values: &[f32]) -> Vec<f16> {
    values.iter().map(|&v| f16::from_f32(v)).collect()
}
pub fn f16_to_f32(values: &[f16]) -> Vec<f32> {
    values.iter().map(|v| v.to_f32()).collect()
}
/// Converts f32 values to bfloat16 (round to nearest even).
pub fn f32_to_bf16(values: &[f32]) -> Vec<bf16> {
    values.iter().map(|&v| bf16::from_f32(v)).collect()
}
pub fn bf16_to_f32(values: &[bf16]) -> Vec<f32> {
    values.iter().map(|v| v.to_f32()).collect()
}
