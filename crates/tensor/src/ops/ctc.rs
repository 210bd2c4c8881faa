//! CTC's forward-backward as a tensor function, on the device the log-probabilities live
//! on (crate::cpu::ctc, kernels/ctc.cu). The loss built on it, with its reductions and
//! `zero_infinity`, is `nn::loss::ctc_loss`.

use crate::cpu::CpuStorage;
use crate::cuda::CudaStorage;
use crate::storage::fused::Fused;
use crate::storage::Storage;
use crate::{Error, Result, Tensor};

impl Tensor {
    /// For log-probabilities `[T, N, C]` (blank = class 0) and per-sample `targets`
    /// (labels in 1..C) using the first `lengths[n]` frames: each sample's negative
    /// log-likelihood as an f64 `[N]` tensor (+inf when the target cannot be aligned in its
    /// frames) and d nll_n / d log_probs as a `[T, N, C]` tensor, both on the
    /// log-probabilities' device (nothing is read back to the host); the gradient is zero
    /// past each sample's frames and for an unalignable sample. Not recorded by autograd.
    pub fn ctc_forward_backward(
        &self,
        targets: &[Vec<u32>],
        lengths: &[usize],
    ) -> Result<(Tensor, Tensor)> {
        self.check_float("ctc")?;
        let d = self.dims();
        if d.len() != 3 {
            return Err(Error::BadShape {
                op: "ctc",
                msg: "log_probs must be [T, N, C]".into(),
                shape: self.shape().clone(),
            });
        }
        let (frames, n, classes) = (d[0], d[1], d[2]);
        if classes == 0 {
            return Err(Error::BadShape {
                op: "ctc",
                msg: "log_probs has no classes (the blank, 0, at least)".into(),
                shape: self.shape().clone(),
            });
        }
        if targets.len() != n || lengths.len() != n {
            return Err(Error::msg(format!(
                "ctc: batch of {n}, but {} targets and {} input lengths",
                targets.len(),
                lengths.len()
            )));
        }
        for (i, (tg, &len)) in targets.iter().zip(lengths).enumerate() {
            if len == 0 || len > frames {
                return Err(Error::msg(format!(
                    "ctc: input length {len} of sample {i} is not in 1..={frames}"
                )));
            }
            if let Some(&bad) = tg.iter().find(|&&l| l == 0 || l as usize >= classes) {
                return Err(Error::msg(format!(
                    "ctc: label {bad} in target {i} is not in 1..{classes} (0 is the blank)"
                )));
            }
        }
        let x = self.detach().contiguous()?;
        let kernel = Kernel {
            dims: (frames, n, classes),
            targets,
            lengths,
        };
        let [nll, grad] = Storage::run(&kernel, &[&x.storage()])?;
        Ok((
            Tensor::from_storage(nll, vec![n], None),
            Tensor::from_storage(grad, d.to_vec(), None),
        ))
    }
}

/// The forward-backward kernel on contiguous log-probabilities `dims = (T, N, C)`, the
/// arguments checked by [`Tensor::ctc_forward_backward`]: outputs nll `[N]` (f64) and the
/// gradient `[T, N, C]`.
struct Kernel<'a> {
    dims: (usize, usize, usize),
    targets: &'a [Vec<u32>],
    lengths: &'a [usize],
}
impl Fused for Kernel<'_> {
    const NAME: &'static str = "ctc";
    fn cpu(&self, inputs: &[&CpuStorage]) -> Result<Vec<CpuStorage>> {
        let (l, g) = crate::cpu::ctc::run(inputs[0], self.dims, self.targets, self.lengths)?;
        Ok(vec![l, g])
    }
    fn cuda(&self, inputs: &[&CudaStorage]) -> Result<Vec<CudaStorage>> {
        let (l, g) = crate::cuda::ctc::run(inputs[0], self.dims, self.targets, self.lengths)?;
        Ok(vec![l, g])
    }
}
