//! [`Stream`] and [`Event`]: ordered queues of device work, on either backend.

use crate::backend::cuda::lock;
use crate::buffer::Buffer;
use crate::device::{Device, DeviceBackend};
use crate::error::{CudaContext as _, Error, Result};
use crate::module::PtxModule;
use crate::order::TargetKey;
use cudarc::driver::{CudaEvent, CudaStream, result, sys};
use megaops_device::Dim3;
use megaops_device::cpu::{CpuLaunch, EventId, StreamId};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// An in-order queue of device work (a CUDA stream, or a stream of the virtual GPU).
/// Buffers used by queued kernels stay alive until those kernels are known to be done.
pub struct Stream {
    device: Device,
    raw: RawStream,
    inflight: Mutex<Inflight>,
    key: TargetKey,
}

#[derive(Clone)]
pub(crate) enum RawStream {
    Cuda(Arc<CudaStream>),
    Cpu(StreamId),
}

#[derive(Default)]
struct Inflight {
    /// Buffers of launches whose completion is not yet known, with the event after them.
    pending: VecDeque<(Arc<Event>, Vec<Arc<Buffer>>)>,
    /// While a graph is being captured, buffers are retained here instead.
    captured: Option<Vec<Arc<Buffer>>>,
}

/// A marker in a stream: completion queries, cross-stream waits, timing.
pub struct Event {
    device: Device,
    raw: RawEvent,
}

enum RawEvent {
    Cuda(CudaEvent),
    Cpu(EventId),
}

/// A kernel launch in backend terms: entry, geometry, packed parameters, CPU body.
pub(crate) struct RawLaunch<'a> {
    pub kernel: &'a str,
    pub module: &'static PtxModule,
    pub entry: &'static str,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_smem: u32,
    /// Each kernel parameter's bytes, in order.
    pub params: &'a [crate::param::ParamBytes],
    /// What every CPU-backend thread runs.
    pub cpu: Arc<dyn Fn() + Send + Sync>,
}

impl Stream {
    /// A new stream on `device`.
    pub fn new(device: &Device) -> Result<Stream> {
        let raw = match device.backend() {
            DeviceBackend::Cuda(c) => RawStream::Cuda(c.new_stream()?),
            DeviceBackend::Cpu(c) => RawStream::Cpu(c.vgpu.create_stream()),
        };
        Ok(Stream {
            device: device.clone(),
            raw,
            inflight: Mutex::new(Inflight::default()),
            key: TargetKey::fresh(),
        })
    }

    /// Wraps an existing CUDA stream (e.g. one on a green context).
    pub(crate) fn from_raw_cuda(device: &Device, stream: Arc<CudaStream>) -> Result<Stream> {
        Ok(Stream {
            device: device.clone(),
            raw: RawStream::Cuda(stream),
            inflight: Mutex::new(Inflight::default()),
            key: TargetKey::fresh(),
        })
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    pub(crate) fn raw(&self) -> &RawStream {
        &self.raw
    }

    /// The number error reports call this stream by (`stream #4`), unique on its device:
    /// on the CPU backend the virtual GPU's own stream number (its deadlock reports'
    /// `stream 4`), on CUDA a process-wide count.
    pub fn id(&self) -> u64 {
        match &self.raw {
            RawStream::Cpu(id) => u64::from(id.index()),
            RawStream::Cuda(_) => self.key.number(),
        }
    }

    /// Its identity as a launch target (see `order`).
    pub(crate) fn key(&self) -> TargetKey {
        self.key
    }

    /// The CUDA stream handle (None on the CPU backend).
    pub fn cu_stream(&self) -> Option<sys::CUstream> {
        match &self.raw {
            RawStream::Cuda(s) => Some(s.cu_stream()),
            RawStream::Cpu(_) => None,
        }
    }

    /// Waits until everything queued on this stream is done, then reports tile-wait
    /// failures recorded on the device.
    pub fn synchronize(&self) -> Result<()> {
        match &self.raw {
            RawStream::Cuda(s) => s.synchronize().ctx(|| "synchronising a stream".into())?,
            RawStream::Cpu(id) => {
                if let DeviceBackend::Cpu(c) = self.device.backend() {
                    c.vgpu.synchronize_stream(*id).map_err(|e| self.device.cpu_error(e))?;
                }
            }
        }
        lock(&self.inflight).pending.clear();
        self.device.check_error_log()
    }

    /// Records an event at the current end of the stream.
    pub fn record_event(&self) -> Result<Event> {
        let raw = match (&self.raw, self.device.backend()) {
            (RawStream::Cuda(s), _) => RawEvent::Cuda(
                s.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                    .ctx(|| "recording an event".into())?,
            ),
            (RawStream::Cpu(id), DeviceBackend::Cpu(c)) => RawEvent::Cpu(c.vgpu.record_event(*id)),
            _ => return Err(Error::Invalid("stream and device backends differ".into())),
        };
        Ok(Event {
            device: self.device.clone(),
            raw,
        })
    }

    /// Records a timing event; inside a graph capture (`capturing`) it becomes an event
    /// record node of the graph (`cuEventRecordWithFlags` with `CU_EVENT_RECORD_EXTERNAL`),
    /// recorded at every replay.
    pub(crate) fn record_timing_node(&self, capturing: bool) -> Result<Event> {
        let RawStream::Cuda(s) = &self.raw else {
            return self.record_event();
        };
        if !capturing {
            return self.record_event();
        }
        let e = s
            .context()
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .ctx(|| "creating an event".into())?;
        let flags = sys::CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL as u32;
        // SAFETY: both handles are live (the event is owned by `e`, the stream by `self`).
        unsafe { sys::cuEventRecordWithFlags(e.cu_event(), s.cu_stream(), flags) }
            .result()
            .ctx(|| "recording an event node in a capture".into())?;
        Ok(Event {
            device: self.device.clone(),
            raw: RawEvent::Cuda(e),
        })
    }

    /// Makes later work on this stream wait for `event` (no host wait).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        match (&self.raw, &event.raw, self.device.backend()) {
            (RawStream::Cuda(s), RawEvent::Cuda(e), _) => s.wait(e).ctx(|| "making a stream wait for an event".into()),
            (RawStream::Cpu(id), RawEvent::Cpu(e), DeviceBackend::Cpu(c)) => {
                c.vgpu.stream_wait_event(*id, *e);
                Ok(())
            }
            _ => Err(Error::Invalid(
                "an event of one backend cannot order a stream of another".into(),
            )),
        }
    }

    /// Makes later work on this stream wait for everything queued so far on `other`.
    pub fn wait_stream(&self, other: &Stream) -> Result<()> {
        self.wait_event(&other.record_event()?)
    }

    /// Launches a kernel, records an event after it (returned) and keeps `buffers` alive
    /// until that event completes (or, during a graph capture, as long as the graph).
    pub(crate) fn launch_raw(&self, l: &RawLaunch<'_>, buffers: Vec<Arc<Buffer>>) -> Result<Arc<Event>> {
        match (&self.raw, self.device.backend()) {
            (RawStream::Cuda(s), DeviceBackend::Cuda(c)) => {
                let f = c.function(l.module, l.entry, l.dynamic_smem)?;
                let mut ptrs: Vec<*mut std::ffi::c_void> =
                    l.params.iter().map(|p| p.as_ptr() as *mut std::ffi::c_void).collect();
                c.ctx.bind_to_thread().ctx(|| "binding the context".into())?;
                // SAFETY: the parameter list was assembled by the typed launcher the
                // kernel macro generated from the kernel's own signature (same order,
                // sizes and layouts on host and device); every pointer parameter is the
                // address of a live buffer of the right device, retained below until the
                // kernel is done; geometry was validated against device limits.
                unsafe {
                    result::launch_kernel(
                        f.0,
                        (l.grid[0], l.grid[1], l.grid[2]),
                        (l.block[0], l.block[1], l.block[2]),
                        l.dynamic_smem,
                        s.cu_stream(),
                        &mut ptrs,
                    )
                }
                .ctx(|| {
                    format!(
                        "launching `{}` with grid {:?}, block {:?}, {} B shared",
                        l.kernel, l.grid, l.block, l.dynamic_smem
                    )
                })?;
            }
            (RawStream::Cpu(id), DeviceBackend::Cpu(c)) => {
                let launch = CpuLaunch {
                    name: l.kernel.to_string(),
                    grid: Dim3::new(l.grid[0], l.grid[1], l.grid[2]),
                    block: Dim3::new(l.block[0], l.block[1], l.block[2]),
                    dynamic_smem: l.dynamic_smem as usize,
                    entry: l.cpu.clone(),
                };
                c.vgpu.launch(*id, launch).map_err(|e| self.device.cpu_error(e))?;
            }
            _ => return Err(Error::Invalid("stream and device backends differ".into())),
        }
        let event = Arc::new(self.record_marker()?);
        self.retain(buffers, &event);
        Ok(event)
    }

    /// Keeps buffers alive until `event` (recorded after the work that uses them) completes.
    pub(crate) fn retain(&self, buffers: Vec<Arc<Buffer>>, event: &Arc<Event>) {
        let mut inflight = lock(&self.inflight);
        if let Some(captured) = inflight.captured.as_mut() {
            captured.extend(buffers);
            return;
        }
        // Drop what finished; then mark the new work.
        while inflight.pending.front().is_some_and(|(e, _)| e.is_complete()) {
            inflight.pending.pop_front();
        }
        if !buffers.is_empty() {
            inflight.pending.push_back((event.clone(), buffers));
        }
    }

    /// Records an event without timing (cheaper), for ordering and retention.
    pub(crate) fn record_marker(&self) -> Result<Event> {
        match &self.raw {
            RawStream::Cuda(s) => Ok(Event {
                device: self.device.clone(),
                raw: RawEvent::Cuda(
                    s.record_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
                        .ctx(|| "recording an event".into())?,
                ),
            }),
            RawStream::Cpu(_) => self.record_event(),
        }
    }

    /// Starts retaining buffers for a graph capture instead of tracking them by events.
    pub(crate) fn begin_capture_retention(&self) {
        lock(&self.inflight).captured = Some(Vec::new());
    }

    /// Ends a capture's retention, returning the buffers the graph uses.
    pub(crate) fn end_capture_retention(&self) -> Vec<Arc<Buffer>> {
        lock(&self.inflight).captured.take().unwrap_or_default()
    }
}

impl Event {
    /// True once all work before the event has finished (never blocks).
    pub fn is_complete(&self) -> bool {
        match (&self.raw, self.device.backend()) {
            (RawEvent::Cuda(e), _) => e.is_complete(),
            (RawEvent::Cpu(e), DeviceBackend::Cpu(c)) => c.vgpu.event_complete(*e),
            _ => false,
        }
    }

    /// Blocks the host until the event completes.
    pub fn synchronize(&self) -> Result<()> {
        match (&self.raw, self.device.backend()) {
            (RawEvent::Cuda(e), _) => e.synchronize().ctx(|| "waiting for an event".into()),
            (RawEvent::Cpu(e), DeviceBackend::Cpu(c)) => {
                c.vgpu.synchronize_event(*e).map_err(|err| self.device.cpu_error(err))
            }
            _ => Err(Error::Invalid("event of another backend".into())),
        }
    }

    /// Milliseconds between `self` and a later event (GPU only).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        match (&self.raw, &end.raw) {
            (RawEvent::Cuda(a), RawEvent::Cuda(b)) => a.elapsed_ms(b).ctx(|| "reading event timing".into()),
            _ => Err(Error::Invalid("event timing is only available on a CUDA device".into())),
        }
    }
}
