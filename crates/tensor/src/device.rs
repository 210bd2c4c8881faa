//! Where a tensor's storage lives. One binary serves CPU-only and GPU machines: the
//! device is chosen at run time, and asking for CUDA where there is none is an error,
//! never a panic.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

impl Device {
    /// The GPU with this ordinal when a CUDA driver and device are really present,
    /// otherwise the CPU.
    pub fn cuda_if_available(ordinal: usize) -> Device {
        if crate::cuda::is_available(ordinal) {
            Device::Cuda(ordinal)
        } else {
            Device::Cpu
        }
    }
    pub fn is_cpu(self) -> bool {
        matches!(self, Device::Cpu)
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}
