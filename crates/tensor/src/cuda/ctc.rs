//! Launch code for CTC's forward-backward (kernels/ctc.cu). The extended label sequences
//! (blank, l1, blank, ..., blank) are built on the host, where the targets live, and
//! uploaded with the per-sample lengths; alpha, beta and the per-sample losses stay on
//! the device (reading the losses back would synchronise every step).

use super::device::CudaDevice;
use super::dtype::{unsupported, CudaData, GpuFloat};
use super::launch::launched;
use super::CudaStorage;
use crate::DType;
use crate::Result;
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

/// Per-sample nll (`[N]`, f64, on the device) and d nll / d lp `[T, N, C]`.
pub(crate) fn ctc<T: GpuFloat>(
    d: &CudaDevice,
    lp: &CudaSlice<T>,
    (frames, n, classes): (usize, usize, usize),
    targets: &[Vec<u32>],
    lengths: &[usize],
) -> Result<(CudaSlice<f64>, CudaSlice<T>)> {
    let smax = targets.iter().map(|t| 2 * t.len() + 1).max().unwrap_or(1);
    let mut ext = vec![0u32; n * smax];
    let mut slen = Vec::with_capacity(n);
    for (i, t) in targets.iter().enumerate() {
        for (j, &l) in t.iter().enumerate() {
            ext[i * smax + 2 * j + 1] = l;
        }
        slen.push((2 * t.len() + 1) as u32);
    }
    let flen: Vec<u32> = lengths.iter().map(|&l| l as u32).collect();
    let (ext_d, slen_d, flen_d) = (d.upload(&ext)?, d.upload(&slen)?, d.upload(&flen)?);
    let cells = n * frames * smax;
    let mut alpha = d.alloc::<f64>(cells.max(1))?;
    let mut beta = d.alloc::<f64>(cells.max(1))?;
    let mut nll = d.alloc_zeros::<f64>(n.max(1))?;
    let mut grad = d.alloc_zeros::<T>((frames * n * classes).max(1))?;
    if n == 0 || frames * classes == 0 {
        return Ok((nll, grad));
    }
    let dims = [n as u64, classes as u64, frames as u64, smax as u64];
    let name = format!("ctc_alpha_beta_{}", T::SUFFIX);
    let f = d.func(&name)?;
    let mut b = d.stream.launch_builder(&f);
    b.arg(lp)
        .arg(&ext_d)
        .arg(&slen_d)
        .arg(&flen_d)
        .arg(&mut alpha)
        .arg(&mut beta)
        .arg(&mut nll);
    for x in &dims {
        b.arg(x);
    }
    // One block per sample; threads stride over the label positions.
    let cfg = LaunchConfig {
        grid_dim: (n as u32, 1, 1),
        block_dim: ((smax.next_power_of_two()).clamp(32, 256) as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: buffers sized [N, T, smax] for alpha/beta, [N] for the lengths and nll;
    // lengths were checked to be in 1..=T by the caller.
    launched(&name, unsafe { b.launch(cfg) })?;
    let name = format!("ctc_grad_{}", T::SUFFIX);
    let f = d.func(&name)?;
    let mut b = d.stream.launch_builder(&f);
    b.arg(&ext_d)
        .arg(&slen_d)
        .arg(&flen_d)
        .arg(&alpha)
        .arg(&beta)
        .arg(&nll)
        .arg(&mut grad);
    for x in &dims {
        b.arg(x);
    }
    // SAFETY: one thread per element of the [T, N, C] gradient.
    launched(&name, unsafe {
        b.launch(CudaDevice::cfg(frames * n * classes))
    })?;
    Ok((nll, grad))
}

/// [`ctc`] on a storage: the nll in f64 and the gradient in the log-probabilities' dtype.
pub(crate) fn run(
    lp: &CudaStorage,
    dims: (usize, usize, usize),
    targets: &[Vec<u32>],
    lengths: &[usize],
) -> Result<(CudaStorage, CudaStorage)> {
    let d = &lp.dev;
    let len = dims.0 * dims.1 * dims.2;
    Ok(match &lp.data {
        CudaData::F32(x) => {
            let (l, g) = ctc(d, x, dims, targets, lengths)?;
            (CudaStorage::new(l, dims.1, d), CudaStorage::new(g, len, d))
        }
        CudaData::F64(x) => {
            let (l, g) = ctc(d, x, dims, targets, lengths)?;
            (CudaStorage::new(l, dims.1, d), CudaStorage::new(g, len, d))
        }
        CudaData::U32(_) => return Err(unsupported("ctc", DType::U32)),
    })
}
