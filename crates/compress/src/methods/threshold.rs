//! `thresholdv` (GRACE's threshold-v, beyond the five papers): the residual `E += g`
//! sends every entry whose magnitude is at least `v`, as (index, value) pairs summed by
//! TopKAllReduce and averaged, and clears them from `E`. How many are sent varies with
//! the gradient's scale (none where every entry is below v). On tensors on any device
//! (`tensor::sparsify::at_least`); on slices, the same code on CPU tensors.

use crate::exchange::{
    check_numel, on_cpu_tensors, refuse_non_finite, sparse_average_tensor, Meter,
};
use crate::method::{Method, ParamSpec, StateTensors, TensorUpdate, Update, UpdateKind};
use crate::{CompressError, Result};
use comm::{Communicator, ProcessGroup};
use tensor::{sparsify, DType, Device, Tensor};

pub struct ThresholdV {
    threshold: f32,
    residual: Vec<Tensor>,
}

impl ThresholdV {
    pub fn new(threshold: f64) -> Result<Self> {
        if !(threshold > 0.0 && threshold.is_finite()) {
            return Err(CompressError::Config(format!(
                "thresholdv: threshold must be a finite number > 0, got {threshold}"
            )));
        }
        Ok(ThresholdV {
            threshold: threshold as f32,
            residual: Vec::new(),
        })
    }

    fn exchange_on(
        &mut self,
        group: &mut dyn ProcessGroup,
        index: usize,
        grad: &Tensor,
    ) -> Result<TensorUpdate> {
        let len = self.residual.get(index).map(Tensor::elem_count);
        let n = check_numel("thresholdv", index, len, grad)?;
        let e = &self.residual[index];
        let mut m = Meter::new(n);
        let sel = m.compress(|| -> Result<sparsify::Selected> {
            e.assign(&e.add(&grad.flatten_all()?)?)?;
            // at_least passes inf and NaN too: they are refused here.
            let sel = sparsify::at_least(e, self.threshold)?;
            refuse_non_finite(
                "thresholdv",
                index,
                "the gradient",
                &sel.values.to_vec::<f32>()?,
            )?;
            sparsify::zero_selected(e, &sel)?;
            Ok(sel)
        })?;
        m.stats.sent_values = sel.len();
        m.stats.message_bytes = 4 + 8 * sel.len();
        let values = sparse_average_tensor(group, &mut m, &sel, grad.dims())?;
        Ok(TensorUpdate {
            values,
            kind: UpdateKind::Gradient,
            stats: m.stats,
        })
    }
}

impl Method for ThresholdV {
    fn name(&self) -> &'static str {
        "thresholdv"
    }
    fn describe(&self) -> String {
        format!("thresholdv(threshold={})", self.threshold)
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.residual = params
            .iter()
            .map(|p| Tensor::zeros(p.numel(), DType::F32, Device::Cpu))
            .collect::<tensor::Result<_>>()?;
        Ok(())
    }
    fn exchange(
        &mut self,
        comm: &mut Communicator,
        index: usize,
        _weights: &[f32],
        grad: &[f32],
    ) -> Result<Update> {
        on_cpu_tensors("thresholdv", comm, grad, |g, t| {
            tensor::no_grad(|| self.exchange_on(g, index, t))
        })
    }
    fn on_tensors(&self) -> bool {
        true
    }
    fn place(&mut self, device: Device) -> Result<()> {
        for r in &mut self.residual {
            *r = r.to_device(device)?;
        }
        Ok(())
    }
    fn exchange_tensor(
        &mut self,
        group: &mut dyn ProcessGroup,
        index: usize,
        _weights: Option<&Tensor>,
        grad: &Tensor,
    ) -> Result<TensorUpdate> {
        tensor::no_grad(|| self.exchange_on(group, index, grad))
    }
    fn state(&self) -> Result<StateTensors> {
        let host: Vec<Vec<f32>> = self
            .residual
            .iter()
            .map(|t| t.to_vec::<f32>())
            .collect::<tensor::Result<_>>()?;
        Ok(crate::methods::named_state("residual", &host))
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        let mut host: Vec<Vec<f32>> = self
            .residual
            .iter()
            .map(|t| vec![0.0; t.elem_count()])
            .collect();
        crate::methods::load_named("thresholdv", state, &mut [("residual", &mut host)])?;
        for (t, h) in self.residual.iter_mut().zip(host) {
            let n = h.len();
            *t = Tensor::from_vec(h, n, t.device())?;
        }
        Ok(())
    }
}
