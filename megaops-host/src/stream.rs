//! [`Stream`] and [`Event`]: ordered queues of device work, on either backend.

use crate::backend::{EventBackend, EventKind, GraphBackend, RawLaunch, StreamBackend};
use crate::buffer::Buffer;
use crate::delayed_release::DelayedRelease;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::mutex::lock;
use crate::order::TargetKey;
use cudarc::driver::sys;
use std::sync::{Arc, Mutex};

/// An in-order queue of device work (a CUDA stream, or a stream of the virtual GPU).
/// Buffers used by queued kernels stay alive until those kernels are known to be done.
pub struct Stream {
    device: Device,
    backend: Box<dyn StreamBackend>,
    release: Mutex<DelayedRelease>,
    key: TargetKey,
}

/// A marker in a stream: completion queries, cross-stream waits, timing.
pub struct Event {
    device: Device,
    backend: Box<dyn EventBackend>,
}

impl Stream {
    /// A new stream on `device`.
    pub fn new(device: &Device) -> Result<Stream> {
        Ok(Stream::from_backend(device, device.backend().clone().new_stream()?))
    }

    /// A new stream of the device's greatest priority (ordinary on the CPU backend).
    pub(crate) fn with_priority(device: &Device) -> Result<Stream> {
        Ok(Stream::from_backend(
            device,
            device.backend().clone().new_priority_stream()?,
        ))
    }

    /// Wraps a stream of `device`'s backend.
    pub(crate) fn from_backend(device: &Device, backend: Box<dyn StreamBackend>) -> Stream {
        Stream {
            device: device.clone(),
            backend,
            release: Mutex::new(DelayedRelease::default()),
            key: TargetKey::fresh(),
        }
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The number error reports call this stream by (`stream #4`), unique on its device:
    /// on the CPU backend the virtual GPU's own stream number (its deadlock reports'
    /// `stream 4`), on CUDA a process-wide count.
    pub fn id(&self) -> u64 {
        self.backend.number().unwrap_or_else(|| self.key.number())
    }

    /// Its identity as a launch target (see `order`).
    pub(crate) fn key(&self) -> TargetKey {
        self.key
    }

    /// The CUDA stream handle (None on the CPU backend).
    pub fn cu_stream(&self) -> Option<sys::CUstream> {
        self.backend.cu_stream()
    }

    /// Waits until everything queued on this stream is done, then reports tile-wait
    /// failures recorded on the device.
    pub fn synchronize(&self) -> Result<()> {
        self.backend.synchronize().map_err(|f| self.device.report(f))?;
        lock(&self.release).release_all();
        self.device.check_error_log()
    }

    fn event(&self, kind: EventKind) -> Result<Event> {
        Ok(Event {
            device: self.device.clone(),
            backend: self.backend.record_event(kind)?,
        })
    }

    /// Records an event at the current end of the stream.
    pub fn record_event(&self) -> Result<Event> {
        self.event(EventKind::Timing)
    }

    /// Records a timing event; inside a graph capture it becomes an event record node of
    /// the graph, recorded at every replay.
    pub(crate) fn record_timing_node(&self) -> Result<Event> {
        self.event(EventKind::TimingNode)
    }

    /// Records an event without timing (cheaper), for ordering and retention.
    pub(crate) fn record_marker(&self) -> Result<Event> {
        self.event(EventKind::Marker)
    }

    /// Makes later work on this stream wait for `event` (no host wait).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        if !event.device.same(&self.device) {
            return Err(Error::Invalid(format!(
                "an event of {} cannot order a stream of {}",
                event.device.name(),
                self.device.name()
            )));
        }
        self.backend.wait_event(event.backend.as_ref())
    }

    /// Makes later work on this stream wait for everything queued so far on `other`.
    pub fn wait_stream(&self, other: &Stream) -> Result<()> {
        self.wait_event(&other.record_marker()?)
    }

    /// Launches a kernel, records an event after it (returned) and keeps `buffers` alive
    /// until that event completes (or, during a graph capture, as long as the graph).
    ///
    /// # Safety
    /// The launch's parameters match its entry's signature (order, sizes, layouts) and
    /// every pointer parameter is the address of memory in `buffers` (or otherwise kept
    /// allocated until the kernel is done), of this stream's device.
    pub(crate) unsafe fn launch_raw(&self, l: &RawLaunch<'_>, buffers: Vec<Arc<Buffer>>) -> Result<Arc<Event>> {
        // SAFETY: the caller's contract; `buffers` are retained below until the kernel
        // is done.
        unsafe { self.backend.launch(l) }.map_err(|f| self.device.report(f))?;
        let event = Arc::new(self.record_marker()?);
        self.hold(buffers, &event);
        Ok(event)
    }

    /// [`Stream::launch_raw`], also returning the launch's start event, which completes
    /// once every CTA of the kernel has begun ([`StreamBackend::launch_with_start_event`]).
    ///
    /// # Safety
    /// As for [`Stream::launch_raw`].
    pub(crate) unsafe fn launch_raw_with_start(
        &self,
        l: &RawLaunch<'_>,
        buffers: Vec<Arc<Buffer>>,
    ) -> Result<(Arc<Event>, Event)> {
        // SAFETY: the caller's contract; `buffers` are retained below until the kernel
        // is done.
        let started = unsafe { self.backend.launch_with_start_event(l) }.map_err(|f| self.device.report(f))?;
        let event = Arc::new(self.record_marker()?);
        self.hold(buffers, &event);
        let started = Event {
            device: self.device.clone(),
            backend: started,
        };
        Ok((event, started))
    }

    /// Enqueues setting the 32-bit words of `buffer` from word `first` on, `words` of
    /// them, to `value`; `buffer` is kept alive until it ran.
    pub(crate) fn fill_words(&self, buffer: &Arc<Buffer>, first: usize, words: usize, value: i32) -> Result<()> {
        let end_byte = first.checked_add(words).and_then(|end| end.checked_mul(4));
        if end_byte.is_none_or(|end| end > buffer.len()) {
            return Err(Error::Internal(format!(
                "a fill of words {first}..{first}+{words} overruns a {}-byte buffer",
                buffer.len()
            )));
        }
        // SAFETY: the range lies inside `buffer` (checked above), which is held below
        // until the fill ran.
        unsafe {
            self.backend
                .fill_words(buffer.addr() + 4 * first as u64, value, words)?
        };
        let event = Arc::new(self.record_marker()?);
        self.hold(vec![buffer.clone()], &event);
        Ok(())
    }

    /// Enqueues a stream memory operation holding later work here until the word at
    /// `addr` reaches `value` (GPU only).
    ///
    /// # Safety
    /// As [`StreamBackend::wait_value`]; the caller keeps the memory allocated until the
    /// operation is done.
    pub(crate) unsafe fn wait_value(&self, addr: u64, value: i32) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.backend.wait_value(addr, value) }
    }

    /// Enqueues a stream memory operation writing `value` to the word at `addr` after the
    /// work before it (GPU only).
    ///
    /// # Safety
    /// As [`StreamBackend::write_value`]; the caller keeps the memory allocated until the
    /// operation is done.
    pub(crate) unsafe fn write_value(&self, addr: u64, value: i32) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.backend.write_value(addr, value) }
    }

    /// Enqueues writing each `(addr, value)` of `writes` after the work before it, with a
    /// memory barrier, without an SM ([`StreamBackend::write_values`]).
    ///
    /// # Safety
    /// As [`StreamBackend::write_values`]; the caller keeps the memory allocated until the
    /// operation is done.
    pub(crate) unsafe fn write_values(&self, writes: &[(u64, i32)]) -> Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        // SAFETY: forwarded.
        unsafe { self.backend.write_values(writes) }
    }

    /// Enqueues setting the `words` 32-bit words at `addr` to `value` after everything
    /// before it on this stream (`cuMemsetD32Async`): one operation however many words.
    /// GPU only: the CPU backend's fill is not atomic, so words that kernels poll there
    /// go through [`Stream::write_values`].
    ///
    /// # Safety
    /// `addr` is device memory of at least `words` words that stays allocated until the
    /// operation is done.
    pub(crate) unsafe fn fill_words_at(&self, addr: u64, value: i32, words: usize) -> Result<()> {
        if !self.device().is_cuda() {
            return Err(Error::Internal(
                "a raw word fill is for GPUs: polled words on the CPU backend take release stores".into(),
            ));
        }
        // SAFETY: forwarded.
        unsafe { self.backend.fill_words(addr, value, words) }
    }

    /// Enqueues a copy-engine copy of `bytes` bytes from `src` to `dst`.
    ///
    /// # Safety
    /// As [`StreamBackend::copy`]; the caller keeps both ranges allocated until the copy
    /// is done.
    pub(crate) unsafe fn copy_raw(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.backend.copy(dst, src, bytes) }
    }

    /// Enqueues `op` on the host in stream order (CPU backend only).
    pub(crate) fn host_op(&self, op: Arc<dyn Fn() + Send + Sync>) -> Result<()> {
        self.backend.host_op(op)
    }

    /// Keeps buffers alive until `event` (recorded after the work that uses them) completes.
    pub(crate) fn hold(&self, buffers: Vec<Arc<Buffer>>, event: &Arc<Event>) {
        lock(&self.release).hold(buffers, event);
    }

    /// Starts capturing this stream's work (and that of streams that join) into a graph.
    pub(crate) fn begin_capture(&self) -> Result<()> {
        self.backend.begin_capture()
    }

    /// Ends the capture this stream began.
    pub(crate) fn end_capture(&self) -> Result<Box<dyn GraphBackend>> {
        self.backend.end_capture()
    }

    /// Replays `graph` (captured on this stream's device) on this stream.
    pub(crate) fn launch_graph(&self, graph: &dyn GraphBackend) -> Result<()> {
        graph.launch(self.backend.as_ref()).map_err(|f| self.device.report(f))
    }

    /// Starts keeping buffers for a graph capture instead of tracking them by events.
    pub(crate) fn begin_capture_retention(&self) {
        lock(&self.release).begin_capture();
    }

    /// Ends a capture's retention, returning the buffers the graph uses.
    pub(crate) fn end_capture_retention(&self) -> Vec<Arc<Buffer>> {
        lock(&self.release).end_capture()
    }
}

impl Event {
    /// True once all work before the event has finished (never blocks).
    pub fn is_complete(&self) -> bool {
        self.backend.is_complete()
    }

    /// Blocks the host until the event completes.
    pub fn synchronize(&self) -> Result<()> {
        self.backend.synchronize().map_err(|f| self.device.report(f))
    }

    /// Milliseconds between `self` and a later event of the same device (GPU only).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        if !end.device.same(&self.device) {
            return Err(Error::Invalid("event timing needs two events of one device".into()));
        }
        self.backend.elapsed_ms(end.backend.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;
    use megaops_device::cpu::VgpuConfig;

    /// A capture forked to a second stream and joined back replays both streams' work,
    /// every time it is launched; nothing runs while capturing.
    #[test]
    fn a_joined_capture_replays_on_the_cpu_backend() -> Result<()> {
        let device = Device::cpu(VgpuConfig::default())?;
        let (s0, s1) = (Stream::new(&device)?, Stream::new(&device)?);
        let t = Tensor::<i32>::zeros(&device, &[8])?;
        s0.begin_capture()?;
        s0.fill_words(t.buffer(), 0, 4, 7)?;
        s1.wait_event(&s0.record_marker()?)?;
        s1.fill_words(t.buffer(), 4, 4, 9)?;
        s0.wait_event(&s1.record_marker()?)?;
        let graph = s0.end_capture()?;
        device.synchronize()?;
        assert_eq!(t.to_vec()?, [0; 8], "a capture runs nothing");
        for _ in 0..2 {
            s0.launch_graph(graph.as_ref())?;
            s0.synchronize()?;
            assert_eq!(t.to_vec()?, [7, 7, 7, 7, 9, 9, 9, 9]);
            t.fill(0)?;
        }
        Ok(())
    }

    /// Work forked to a stream that is not joined back fails the capture, as on CUDA;
    /// so does waiting for work outside the capture.
    #[test]
    fn an_unjoined_capture_is_an_error() -> Result<()> {
        let device = Device::cpu(VgpuConfig::default())?;
        let (s0, s1, s2) = (Stream::new(&device)?, Stream::new(&device)?, Stream::new(&device)?);
        let t = Tensor::<i32>::zeros(&device, &[4])?;
        let outside = s2.record_marker()?;
        s0.begin_capture()?;
        let e = s0.wait_event(&outside).expect_err("a wait on work outside the capture");
        assert!(e.to_string().contains("outside the capture"), "{e}");
        s1.wait_event(&s0.record_marker()?)?;
        s1.fill_words(t.buffer(), 0, 4, 1)?;
        let e = s0.end_capture().err().expect("an unjoined stream");
        assert!(
            matches!(e, Error::Internal(_)) && e.to_string().contains("not joined back"),
            "{e}"
        );
        // Both streams left the capture: they run work again.
        s1.fill_words(t.buffer(), 0, 4, 3)?;
        s1.synchronize()?;
        assert_eq!(t.to_vec()?, [3; 4]);
        Ok(())
    }
}
