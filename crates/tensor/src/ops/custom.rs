//! Ops defined outside this crate. A downstream crate computes an output without autograd
//! (typically a fused kernel, like nn's CTC loss) and attaches the backward function that
//! maps the output's gradient to its inputs' gradients. Hooks and gradient accumulation
//! treat it like any built-in op.

use crate::op::Op;
use crate::{Result, Tensor};
use std::sync::Arc;

/// Maps the gradient of a custom op's output to one gradient per input (None: no gradient).
pub type CustomBackward = Arc<dyn Fn(&Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync>;

impl Tensor {
    /// `output`'s data, recorded as a function of `inputs` with the given backward. The
    /// gradients the backward returns must have the inputs' shapes.
    pub fn custom_op(output: &Tensor, inputs: &[Tensor], backward: CustomBackward) -> Tensor {
        output.detach().view(
            output.layout().clone(),
            Some(Op::Custom {
                inputs: inputs.to_vec(),
                backward,
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Device};

    #[test]
    fn a_custom_square_backpropagates_and_fires_hooks() {
        let x = Tensor::from_vec(vec![1.0f64, -2.0, 3.0], 3, Device::Cpu)
            .unwrap()
            .to_var();
        let fired = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let f = fired.clone();
        x.register_grad_hook(move |_| {
            f.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })
        .unwrap();
        let value = crate::no_grad(|| x.sqr()).unwrap();
        let saved = x.detach();
        let y = Tensor::custom_op(
            &value,
            std::slice::from_ref(&x),
            Arc::new(move |g| Ok(vec![Some(g.mul(&saved.scale(2.0)?)?)])),
        );
        let grads = y.sum_all().unwrap().backward().unwrap();
        assert_eq!(
            grads.get(&x).unwrap().to_vec::<f64>().unwrap(),
            [2.0, -4.0, 6.0]
        );
        assert_eq!(fired.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(y.dtype(), DType::F64);
    }
}
