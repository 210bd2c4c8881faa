//! Per-parameter state vectors on a device (the residuals, errors and momenta of the
//! methods on tensors), read and written in the host methods' checkpoint format
//! (`{name}.{index}`), so a checkpoint of either resumes the other.

use crate::exchange::{check_len, check_numel};
use crate::method::StateTensors;
use crate::{CompressError, Result};
use tensor::{Device, Tensor};

pub(crate) struct DeviceVecs(Vec<Tensor>);

impl DeviceVecs {
    /// The host vectors, moved to `device` (the host ones are consumed).
    pub fn place(host: Vec<Vec<f32>>, device: Device) -> Result<Self> {
        let ts = host
            .into_iter()
            .map(|v| {
                let n = v.len();
                Tensor::from_vec(v, n, device)
            })
            .collect::<tensor::Result<_>>()?;
        Ok(DeviceVecs(ts))
    }
    /// Zero vectors of `sizes`, on `device` (a method's state at `init`, on the CPU until
    /// it is placed).
    pub fn zeros(sizes: impl IntoIterator<Item = usize>, device: Device) -> Result<Self> {
        let ts = sizes
            .into_iter()
            .map(|n| Tensor::zeros(n, tensor::DType::F32, device))
            .collect::<tensor::Result<_>>()?;
        Ok(DeviceVecs(ts))
    }
    /// Moves every vector to `device` (`Method::place`).
    pub fn move_to(&mut self, device: Device) -> Result<()> {
        for t in &mut self.0 {
            *t = t.to_device(device)?;
        }
        Ok(())
    }
    /// Parameter `index`'s vector.
    pub fn get(&self, index: usize) -> Option<&Tensor> {
        self.0.get(index)
    }
    /// The length of parameter `index`'s vector (`None`: no such parameter).
    pub fn len_of(&self, index: usize) -> Option<usize> {
        self.0.get(index).map(Tensor::elem_count)
    }
    /// Parameter `index`'s vector and its length, checked against `grad`'s.
    pub fn for_grad(&self, method: &str, index: usize, grad: &Tensor) -> Result<(&Tensor, usize)> {
        let t = self.0.get(index);
        let n = check_numel(method, index, t.map(Tensor::elem_count), grad)?;
        t.map(|t| (t, n)).ok_or_else(|| {
            CompressError::Usage(format!(
                "{method}: parameter {index} was not declared to init"
            ))
        })
    }
    /// Copied to the host as `{name}.{index}` entries.
    pub fn state(&self, name: &str) -> Result<StateTensors> {
        let host: Vec<Vec<f32>> = self
            .0
            .iter()
            .map(|t| t.to_vec::<f32>())
            .collect::<tensor::Result<_>>()?;
        Ok(super::named_state(name, &host))
    }
    /// Loads `{name}.{index}` entries (every name and length checked first, as
    /// [`super::load_named`] checks them), then writes them to the device.
    pub fn load(&self, method: &str, name: &str, state: &StateTensors) -> Result<()> {
        let mut host: Vec<Vec<f32>> = self.0.iter().map(|t| vec![0.0; t.elem_count()]).collect();
        super::load_named(method, state, &mut [(name, &mut host)])?;
        for (t, h) in self.0.iter().zip(host) {
            let n = h.len();
            t.assign(&Tensor::from_vec(h, n, Device::Cpu)?)?;
        }
        Ok(())
    }
}

/// A method's per-parameter vectors (a residual, an error feedback): on the host from
/// `init`, on the device once the method is placed. The one holder gradient dropping,
/// gTop-k and 1-bit SGD share, with its checkpoint form (`{name}.{index}`, the same from
/// either side) and the errors for an exchange on the wrong side.
pub(crate) struct PerParam {
    /// What the vectors are, in checkpoints and errors ("residual", "error").
    name: &'static str,
    host: Vec<Vec<f32>>,
    device: Option<DeviceVecs>,
}

impl PerParam {
    pub fn new(name: &'static str) -> Self {
        PerParam {
            name,
            host: Vec::new(),
            device: None,
        }
    }
    /// Zeros of the parameters' sizes, on the host (`Method::init`).
    pub fn init(&mut self, params: &[crate::method::ParamSpec]) {
        self.host = params.iter().map(|p| vec![0.0; p.numel()]).collect();
        self.device = None;
    }
    /// Moves the vectors to `device` (`Method::place`).
    pub fn place(&mut self, device: Device) -> Result<()> {
        let host = std::mem::take(&mut self.host);
        self.device = Some(DeviceVecs::place(host, device)?);
        Ok(())
    }
    /// The length of parameter `index`'s vector, on either side.
    pub fn len_of(&self, index: usize) -> Option<usize> {
        match &self.device {
            Some(d) => d.len_of(index),
            None => self.host.get(index).map(Vec::len),
        }
    }
    /// Parameter `index`'s host vector, checked against `grad`'s length (its length
    /// returned): an error once the vectors are on the device.
    pub fn host_for(
        &mut self,
        method: &str,
        index: usize,
        grad: &[f32],
    ) -> Result<(&mut Vec<f32>, usize)> {
        if self.device.is_some() {
            return Err(CompressError::Usage(format!(
                "{method}: the {}s are on the device (place was called): exchange tensors",
                self.name
            )));
        }
        let n = check_len(method, index, self.host.get(index).map(Vec::len), &[grad])?;
        Ok((&mut self.host[index], n))
    }
    /// The vectors on the device: an error before `place`.
    pub fn on_device(&self, method: &str) -> Result<&DeviceVecs> {
        self.device.as_ref().ok_or_else(|| {
            CompressError::Usage(format!(
                "{method}: exchange_tensor before place (the {}s are on the host)",
                self.name
            ))
        })
    }
    /// The checkpoint entries, copied to the host where the vectors are on the device.
    pub fn state(&self) -> Result<StateTensors> {
        match &self.device {
            Some(d) => d.state(self.name),
            None => Ok(super::named_state(self.name, &self.host)),
        }
    }
    /// Loads the checkpoint entries into whichever side holds the vectors.
    pub fn load(&mut self, method: &str, state: &StateTensors) -> Result<()> {
        match &self.device {
            Some(d) => d.load(method, self.name, state),
            None => super::load_named(method, state, &mut [(self.name, &mut self.host)]),
        }
    }
}
