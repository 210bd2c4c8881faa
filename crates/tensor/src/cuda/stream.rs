//! Streams and events beside the compute stream. Every tensor op runs on its device's
//! compute stream; a [`SideStream`] is a second, non-blocking stream on the same device,
//! for work that should overlap compute, such as the compression thread copying ready
//! gradients to the host while backward continues.
//!
//! Ordering between the two is explicit ([`SideStream::wait_for_compute`],
//! [`SideStream::compute_waits`], [`Event`]) and also enforced per buffer: once a second
//! stream exists, cudarc records read/write events on every device buffer, so a stream
//! that reads a buffer waits for the last write to it on any stream.

use super::device::{cuda_err, device, CudaDevice};
use super::storage::CudaStorage;
use crate::storage::{BackendStorage, Storage};
use crate::{Device, Error, Result, Tensor};
use cudarc::driver::{CudaEvent, CudaStream};
use std::sync::Arc;

/// A point in a stream's work; completes when everything queued before it has run.
pub struct Event {
    event: CudaEvent,
}

impl Event {
    /// Blocks the host until the event has completed.
    pub fn synchronize(&self) -> Result<()> {
        self.event
            .synchronize()
            .map_err(cuda_err("event synchronize"))
    }
    /// Whether the event has completed (never blocks).
    pub fn is_complete(&self) -> bool {
        self.event.is_complete()
    }
    /// Milliseconds between this event and a later one (both from [`record_timed_event`]).
    pub fn elapsed_ms(&self, later: &Event) -> Result<f32> {
        self.event
            .elapsed_ms(&later.event)
            .map_err(cuda_err("event elapsed time"))
    }
}

fn cuda_device(d: Device) -> Result<Arc<CudaDevice>> {
    match d {
        Device::Cuda(i) => device(i),
        Device::Cpu => Err(Error::msg("streams and events exist only on CUDA devices")),
    }
}

/// Records an event on `device`'s compute stream: "everything queued so far".
pub fn record_compute_event(device: Device) -> Result<Event> {
    let d = cuda_device(device)?;
    let event = d
        .stream
        .record_event(None)
        .map_err(cuda_err("record event"))?;
    Ok(Event { event })
}

/// Records an event with timing on `device`'s compute stream, for [`Event::elapsed_ms`]
/// (events for ordering alone are recorded without: they cost less to wait on).
pub fn record_timed_event(device: Device) -> Result<Event> {
    let d = cuda_device(device)?;
    let event = d
        .stream
        .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(cuda_err("record event"))?;
    Ok(Event { event })
}

/// Blocks until `device`'s compute stream has drained (a no-op on the CPU).
pub fn synchronize(device: Device) -> Result<()> {
    match device {
        Device::Cpu => Ok(()),
        Device::Cuda(_) => cuda_device(device)?.synchronize(),
    }
}

/// A second stream on a CUDA device.
pub struct SideStream {
    dev: Arc<CudaDevice>,
    stream: Arc<CudaStream>,
}

impl SideStream {
    pub fn new(device: Device) -> Result<SideStream> {
        let dev = cuda_device(device)?;
        let stream = dev.ctx.new_stream().map_err(cuda_err("create stream"))?;
        Ok(SideStream { dev, stream })
    }
    pub fn device(&self) -> Device {
        Device::Cuda(self.dev.ordinal())
    }
    /// This stream waits (on the GPU; the host does not block) for everything queued on
    /// the compute stream so far.
    pub fn wait_for_compute(&self) -> Result<()> {
        self.stream
            .join(&self.dev.stream)
            .map_err(cuda_err("stream wait"))
    }
    /// The compute stream waits for everything queued on this stream so far.
    pub fn compute_waits(&self) -> Result<()> {
        self.dev
            .stream
            .join(&self.stream)
            .map_err(cuda_err("stream wait"))
    }
    /// Waits on the GPU for `event` (from any stream of this device).
    pub fn wait(&self, event: &Event) -> Result<()> {
        self.stream
            .wait(&event.event)
            .map_err(cuda_err("stream wait"))
    }
    /// Records an event on this stream.
    pub fn record(&self) -> Result<Event> {
        let event = self
            .stream
            .record_event(None)
            .map_err(cuda_err("record event"))?;
        Ok(Event { event })
    }
    /// Blocks until this stream's queued work has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(cuda_err("synchronize"))
    }
    /// Copies `t`'s elements to the host on this stream (staged through pinned memory
    /// when large), after the compute work that produced them, without waiting for
    /// compute work queued later.
    pub fn to_vec_f32(&self, t: &Tensor) -> Result<Vec<f32>> {
        if t.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op: "SideStream::to_vec_f32",
                lhs: t.device(),
                rhs: self.device(),
            });
        }
        let t = t.to_dtype(crate::DType::F32)?;
        // The contiguous copy (if any) is queued on the compute stream; the per-buffer
        // events make this stream's read wait for it.
        let c = t.contiguous()?;
        let storage = c.storage();
        let Storage::Cuda(s) = &*storage else {
            return Err(Error::msg(
                "SideStream::to_vec_f32: tensor is not on a CUDA device",
            ));
        };
        let range = c
            .layout()
            .contiguous_range()
            .ok_or_else(|| Error::msg("contiguous tensor without a contiguous range"))?;
        let host = copy_range(s, &self.stream)?;
        match host {
            crate::cpu::CpuStorage::F32(v) => Ok(v[range].to_vec()),
            other => Err(Error::DTypeMismatch {
                op: "SideStream::to_vec_f32",
                lhs: other.dtype(),
                rhs: crate::DType::F32,
            }),
        }
    }
}

fn copy_range(s: &CudaStorage, stream: &Arc<CudaStream>) -> Result<crate::cpu::CpuStorage> {
    s.to_cpu_on(stream)
}
