//! Batched matrix products of strided views through cuBLAS. Row-major and transposed
//! (column-major) matrices go in as they are; any other view is made contiguous first.

use super::blas::{gemm, Operand};
use super::device::CudaDevice;
use super::dtype::GpuFloat;
use crate::{Layout, Result, Shape};
use cudarc::cublas::{CudaBlas, Gemm};
use cudarc::driver::CudaSlice;

/// The cuBLAS operand for a `[b, r, c]` layout, copying the view when cuBLAS cannot read
/// it in place (the copy is returned so it outlives the product).
fn operand<T: GpuFloat>(
    d: &CudaDevice,
    x: &CudaSlice<T>,
    l: &Layout,
) -> Result<(Option<CudaSlice<T>>, Operand)> {
    let (dims, s) = (l.dims(), l.strides());
    let (bs, r, c) = (if dims[0] <= 1 { 0 } else { s[0] }, dims[1], dims[2]);
    if let Some(o) = Operand::from_strides(l.offset(), bs, r, c, s[1], s[2]) {
        return Ok((None, o));
    }
    let copy = super::elementwise::copy_strided(d, x, l)?;
    let contiguous = Layout::contiguous(Shape::new([dims[0], r, c]));
    let o = Operand::from_strides(
        0,
        r * c,
        r,
        c,
        contiguous.strides()[1],
        contiguous.strides()[2],
    )
    .ok_or_else(|| crate::Error::msg("matmul: a contiguous matrix must map onto cuBLAS"))?;
    Ok((Some(copy), o))
}

pub(crate) fn matmul<T: GpuFloat>(
    d: &CudaDevice,
    a: &CudaSlice<T>,
    al: &Layout,
    b: &CudaSlice<T>,
    bl: &Layout,
    (batch, m, n, k): (usize, usize, usize, usize),
) -> Result<CudaSlice<T>>
where
    CudaBlas: Gemm<T>,
{
    let mut c = d.alloc_zeros::<T>(batch * m * n)?;
    let (ac, ao) = operand(d, a, al)?;
    let (bc, bo) = operand(d, b, bl)?;
    gemm(
        d,
        (batch, m, n, k),
        ac.as_ref().unwrap_or(a),
        ao,
        bc.as_ref().unwrap_or(b),
        bo,
        &mut c,
        (0, m * n, n),
        T::ZERO,
    )?;
    Ok(c)
}
