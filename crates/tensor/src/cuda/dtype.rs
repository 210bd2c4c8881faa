//! The element types the GPU computes with and the dtype-tagged device buffer
//! (`CudaData`) a `CudaStorage` holds.

use super::storage::CudaStorage;
use crate::storage::BackendStorage;
use crate::{DType, Error, Result};
use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};

/// Element types that live on the GPU; `SUFFIX` names their kernel instantiations.
pub(crate) trait GpuType:
    DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync + 'static
{
    const SUFFIX: &'static str;
    fn wrap(s: CudaSlice<Self>) -> CudaData;
}
impl GpuType for f32 {
    const SUFFIX: &'static str = "f32";
    fn wrap(s: CudaSlice<f32>) -> CudaData {
        CudaData::F32(s)
    }
}
impl GpuType for f64 {
    const SUFFIX: &'static str = "f64";
    fn wrap(s: CudaSlice<f64>) -> CudaData {
        CudaData::F64(s)
    }
}
impl GpuType for u32 {
    const SUFFIX: &'static str = "u32";
    fn wrap(s: CudaSlice<u32>) -> CudaData {
        CudaData::U32(s)
    }
}

/// Float element types: the ones kernels compute with.
pub(crate) trait GpuFloat: GpuType + super::blas::BlasScalar {
    fn from_f64(v: f64) -> Self;
}
impl GpuFloat for f32 {
    fn from_f64(v: f64) -> f32 {
        v as f32
    }
}
impl GpuFloat for f64 {
    fn from_f64(v: f64) -> f64 {
        v
    }
}

pub(crate) enum CudaData {
    F32(CudaSlice<f32>),
    F64(CudaSlice<f64>),
    U32(CudaSlice<u32>),
}

/// An op this backend does not run in `dtype`.
pub(crate) fn unsupported(op: &'static str, dtype: DType) -> Error {
    Error::UnsupportedDType {
        op,
        dtype,
        expected: "f32 or f64",
    }
}
/// The device buffers of `inputs` as one element type, or a dtype-mismatch error.
pub(crate) fn slices<'a, T>(
    inputs: &[&'a CudaStorage],
    op: &'static str,
    get: impl Fn(&'a CudaStorage) -> Option<&'a CudaSlice<T>>,
) -> Result<Vec<&'a CudaSlice<T>>> {
    inputs
        .iter()
        .map(|s| get(s).ok_or_else(|| mismatch(op, inputs[0], s)))
        .collect()
}

/// Two operands of `op` in different dtypes.
pub(crate) fn mismatch(op: &'static str, a: &CudaStorage, b: &CudaStorage) -> Error {
    Error::DTypeMismatch {
        op,
        lhs: a.dtype(),
        rhs: b.dtype(),
    }
}
