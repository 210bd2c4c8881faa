//! Batch normalisation in training mode through cuDNN (its per-channel `SPATIAL` mode):
//! the forward with the batch's statistics and the backward through them. cuDNN's calls
//! read each activation once per pass with all channels in flight, where our kernels
//! (norm.rs) give each channel one block, which leaves most of a large GPU idle for the
//! few wide channels of ResNet-50's first stages. Running statistics stay with the caller
//! (nn's layer updates them from the returned mean and inverse deviation, as before), so
//! cuDNN is passed none. Evaluation mode and the backward through fixed statistics keep
//! our kernels; so does everything when cuDNN is absent or off (see cudnn.rs).

use super::cudnn::{self, data_type, ptr, ptr_mut, Dnn, Scaling, TensorDesc};
use super::device::{cuda_err, CudaDevice};
use super::dtype::GpuFloat;
use super::norm::Triple;
use crate::storage::BatchNormParams;
use crate::Result;
use cudarc::cudnn::sys;
use cudarc::driver::CudaSlice;
use std::sync::MutexGuard;

/// cuDNN refuses a smaller epsilon (CUDNN_BN_MIN_EPSILON).
const MIN_EPS: f64 = 1e-5;

fn usable(p: &BatchNormParams) -> bool {
    p.n * p.c * p.spatial > 0 && p.eps >= MIN_EPS && p.n * p.spatial > 1
}

/// What both passes start from: cuDNN (locked), the activations' descriptor as
/// `[N, C, spatial, 1]`, the per-channel one as `[1, C, 1, 1]`, and the output buffers
/// (one of the activations' size, two of C); `None` where our kernels must run.
struct Call<'a, T: GpuFloat> {
    dnn: MutexGuard<'a, Dnn>,
    act: TensorDesc,
    chan: TensorDesc,
    outs: Triple<T>,
}

fn start<'a, T: GpuFloat>(dev: &'a CudaDevice, p: &BatchNormParams) -> Result<Option<Call<'a, T>>> {
    if !usable(p) {
        return Ok(None);
    }
    let Some(dnn) = cudnn::lock(dev)? else {
        return Ok(None);
    };
    let dt = data_type::<T>();
    // A shape the descriptors cannot state (beyond i32) runs on our kernels.
    let (Ok(act), Ok(chan)) = (
        TensorDesc::nchw([p.n, p.c, p.spatial.max(1), 1], dt),
        TensorDesc::nchw([1, p.c, 1, 1], dt),
    ) else {
        return Ok(None);
    };
    Ok(Some(Call {
        dnn,
        act,
        chan,
        outs: (
            dev.alloc::<T>(p.n * p.c * p.spatial)?,
            dev.alloc::<T>(p.c)?,
            dev.alloc::<T>(p.c)?,
        ),
    }))
}

/// `(out, mean, invstd)` with the batch statistics; `None` where our kernels must run it.
pub(crate) fn forward_training<T: GpuFloat>(
    dev: &CudaDevice,
    x: &CudaSlice<T>,
    w: &CudaSlice<T>,
    b: &CudaSlice<T>,
    p: &BatchNormParams,
) -> Result<Option<Triple<T>>> {
    let Some(Call {
        dnn: g,
        act: xd,
        chan: cd,
        outs: (mut out, mut mean, mut invstd),
    }) = start::<T>(dev, p)?
    else {
        return Ok(None);
    };
    let scale = Scaling::<T>::new();
    let (alpha, beta) = scale.pointers();
    let ((px, _a), (pw, _b), (pb, _c)) = (ptr(x, dev), ptr(w, dev), ptr(b, dev));
    let ((po, _d), (pm, _e), (ps, _f)) = (
        ptr_mut(&mut out, dev),
        ptr_mut(&mut mean, dev),
        ptr_mut(&mut invstd, dev),
    );
    // SAFETY: descriptors match the buffers (contiguous [N, C, spatial] activations, C
    // per-channel values); no running statistics (both null, as cuDNN allows together);
    // queued on the compute stream the handle is bound to.
    unsafe {
        sys::cudnnBatchNormalizationForwardTraining(
            g.handle(),
            sys::cudnnBatchNormMode_t::CUDNN_BATCHNORM_SPATIAL,
            alpha,
            beta,
            xd.0,
            px,
            xd.0,
            po,
            cd.0,
            pw,
            pb,
            0.0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            p.eps,
            pm,
            ps,
        )
    }
    .result()
    .map_err(cuda_err("batch norm forward"))?;
    drop((_a, _b, _c, _d, _e, _f));
    Ok(Some((out, mean, invstd)))
}

/// `(d_input, d_weight, d_bias)` through the batch statistics `mean` and `invstd` the
/// forward returned; `None` where our kernels must run it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward_training<T: GpuFloat>(
    dev: &CudaDevice,
    x: &CudaSlice<T>,
    gy: &CudaSlice<T>,
    w: &CudaSlice<T>,
    mean: &CudaSlice<T>,
    invstd: &CudaSlice<T>,
    p: &BatchNormParams,
) -> Result<Option<Triple<T>>> {
    let Some(Call {
        dnn: g,
        act: xd,
        chan: cd,
        outs: (mut dx, mut dw, mut db),
    }) = start::<T>(dev, p)?
    else {
        return Ok(None);
    };
    let scale = Scaling::<T>::new();
    let (alpha, beta) = scale.pointers();
    let ((px, _a), (pg, _b), (pw, _c)) = (ptr(x, dev), ptr(gy, dev), ptr(w, dev));
    let ((pm, _d), (ps, _e)) = (ptr(mean, dev), ptr(invstd, dev));
    let ((pdx, _f), (pdw, _g), (pdb, _h)) = (
        ptr_mut(&mut dx, dev),
        ptr_mut(&mut dw, dev),
        ptr_mut(&mut db, dev),
    );
    // SAFETY: as in the forward; the saved mean and inverse deviation are the forward's
    // (C values each), and the betas are 0, so the outputs are written, never read.
    unsafe {
        sys::cudnnBatchNormalizationBackward(
            g.handle(),
            sys::cudnnBatchNormMode_t::CUDNN_BATCHNORM_SPATIAL,
            alpha,
            beta,
            alpha,
            beta,
            xd.0,
            px,
            xd.0,
            pg,
            xd.0,
            pdx,
            cd.0,
            pw,
            pdw,
            pdb,
            p.eps,
            pm,
            ps,
        )
    }
    .result()
    .map_err(cuda_err("batch norm backward"))?;
    drop((_a, _b, _c, _d, _e, _f, _g, _h));
    Ok(Some((dx, dw, db)))
}
