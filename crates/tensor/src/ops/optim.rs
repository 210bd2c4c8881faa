//! Optimizer steps as single in-place kernels (kernels/optim.cu, cpu/optim.rs), for the
//! update that runs once per parameter tensor per step.

use crate::cpu::CpuStorage;
use crate::cuda::CudaStorage;
use crate::storage::fused::FusedInPlace;
use crate::storage::{SgdStep, Storage};
use crate::{Error, Result, Tensor};

impl Tensor {
    /// One SGD step with momentum, in place: `self` is the parameter and `buf` its momentum
    /// buffer (both dense: contiguous, offset 0, their own storage), `grad` the gradient.
    /// Same arithmetic, in the same order, as torch.optim.SGD (see kernels/optim.cu). Not
    /// recorded by autograd.
    pub fn sgd_momentum_(&self, grad: &Tensor, buf: &Tensor, step: SgdStep) -> Result<()> {
        self.check_float("sgd_momentum")?;
        for (what, t) in [("gradient", grad), ("momentum buffer", buf)] {
            self.check_same_dtype(t, "sgd_momentum")?;
            if t.shape() != self.shape() {
                return Err(Error::ShapeMismatch {
                    op: if what == "gradient" {
                        "sgd_momentum (gradient)"
                    } else {
                        "sgd_momentum (momentum buffer)"
                    },
                    lhs: self.shape().clone(),
                    rhs: t.shape().clone(),
                });
            }
        }
        let dense = |t: &Tensor| {
            t.is_contiguous() && t.layout().offset() == 0 && t.storage().len() == t.elem_count()
        };
        if !dense(self) || !dense(buf) || self.shares_storage(buf) {
            return Err(Error::msg(
                "sgd_momentum: the parameter and its momentum buffer must be dense tensors with storages of their own",
            ));
        }
        let grad = grad.contiguous()?;
        if grad.shares_storage(self) || grad.shares_storage(buf) {
            return Err(Error::msg(
                "sgd_momentum: the gradient shares storage with the parameter or buffer",
            ));
        }
        let g = grad.storage();
        let (mut p, mut b) = (self.storage_mut(), buf.storage_mut());
        let kernel = Sgd {
            n: self.elem_count(),
            step,
        };
        Storage::run_in_place(&kernel, &mut [&mut p, &mut b], &[&g])
    }
}

/// The SGD step on `n` elements: targets `[parameter, momentum buffer]`, input the gradient.
struct Sgd {
    n: usize,
    step: SgdStep,
}
impl FusedInPlace for Sgd {
    const NAME: &'static str = "sgd_momentum";
    fn cpu(&self, targets: &mut [&mut CpuStorage], inputs: &[&CpuStorage]) -> Result<()> {
        match targets {
            [p, b] => crate::cpu::optim::run(p, inputs[0], b, self.step),
            _ => Err(Error::msg(
                "sgd_momentum: expects the parameter and its buffer",
            )),
        }
    }
    fn cuda(&self, targets: &mut [&mut CudaStorage], inputs: &[&CudaStorage]) -> Result<()> {
        match targets {
            [p, b] => crate::cuda::optim::run(p, inputs[0], b, self.n, self.step),
            _ => Err(Error::msg(
                "sgd_momentum: expects the parameter and its buffer",
            )),
        }
    }
}
