//! Streams, events and graphs of the virtual GPU.
//!
//! Graph capture works as CUDA's relaxed stream capture does: while a stream captures,
//! what is queued on it is recorded instead of run; a stream that waits for an event
//! recorded in the capture joins it; ending the capture on the stream that began it
//! (every joined stream joined back) gives a graph. A replay enqueues the recorded
//! operations again on their streams, after the work queued so far on the stream it is
//! launched on, which then waits for all of them.

use crate::backend::{
    BackendResult, EventBackend, EventKind, Failure, GraphBackend, RawLaunch, StreamBackend, downcast,
};
use crate::error::{Error, Result};
use crate::mutex::lock;
use megaops_device::Dim3;
use megaops_device::cpu::{CpuLaunch, EventId, StreamId, VirtualGpu};
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The captures in progress on one virtual GPU, by the streams taking part.
#[derive(Default)]
pub(crate) struct Captures {
    by_stream: Mutex<HashMap<StreamId, Arc<Mutex<CaptureLog>>>>,
}

impl Captures {
    fn of(&self, stream: StreamId) -> Option<Arc<Mutex<CaptureLog>>> {
        lock(&self.by_stream).get(&stream).cloned()
    }
}

/// What a capture recorded, in order.
struct CaptureLog {
    /// The stream that began it.
    origin: StreamId,
    ops: Vec<(StreamId, Op)>,
    /// Events recorded in the capture: the stream and the op position of each (`None`
    /// for a launch's start event, which does not mean the launch is done).
    events: Vec<(StreamId, Option<usize>)>,
    /// Streams that joined, other than the origin.
    joined: HashMap<StreamId, Join>,
}

/// Where a joined stream stands: its last operation, and the latest of its events the
/// origin waited for (joined back when that is at or after the last operation).
struct Join {
    last: usize,
    waited: Option<usize>,
}

impl Join {
    fn joined_back(&self) -> bool {
        self.waited.is_some_and(|w| w >= self.last)
    }
}

/// One recorded operation.
#[derive(Clone)]
enum Op {
    Launch(CpuLaunch),
    /// A launch whose start event is capture event `n`.
    LaunchStarted(CpuLaunch, usize),
    /// Records capture event `n`.
    Record(usize),
    /// Waits for capture event `n`.
    Wait(usize),
    Fill {
        addr: u64,
        value: i32,
        words: usize,
    },
    /// A host operation (a subkernel's CPU implementation, a copy).
    Host(Arc<dyn Fn() + Send + Sync>),
}

/// A stream of the virtual GPU.
pub(crate) struct CpuStream {
    vgpu: Arc<VirtualGpu>,
    captures: Arc<Captures>,
    id: StreamId,
}

/// An event of the virtual GPU, or one recorded inside a capture (completes only as part
/// of a replay, which records it anew).
enum CpuEvent {
    Real { vgpu: Arc<VirtualGpu>, id: EventId },
    Captured { log: Arc<Mutex<CaptureLog>>, index: usize },
}

/// A captured program.
struct CpuGraph {
    vgpu: Arc<VirtualGpu>,
    ops: Vec<(StreamId, Op)>,
    streams: Vec<StreamId>,
    events: usize,
}

impl CpuStream {
    /// A new stream of `vgpu`.
    pub fn new(vgpu: Arc<VirtualGpu>, captures: Arc<Captures>) -> Self {
        let id = vgpu.create_stream();
        CpuStream { vgpu, captures, id }
    }

    /// Records `op` if the stream is capturing; gives it back otherwise.
    fn capture(&self, op: Op) -> Option<Op> {
        let Some(log) = self.captures.of(self.id) else {
            return Some(op);
        };
        let mut log = lock(&log);
        let at = log.ops.len();
        if let Some(join) = log.joined.get_mut(&self.id) {
            join.last = at;
        }
        log.ops.push((self.id, op));
        None
    }
}

impl StreamBackend for CpuStream {
    fn number(&self) -> Option<u64> {
        Some(u64::from(self.id.index()))
    }

    fn cu_stream(&self) -> Option<cudarc::driver::sys::CUstream> {
        None
    }

    fn synchronize(&self) -> BackendResult<()> {
        if self.captures.of(self.id).is_some() {
            return Err(Error::Invalid("a stream cannot be synchronised while it captures a graph".into()).into());
        }
        self.vgpu.synchronize_stream(self.id).map_err(Failure::Stop)
    }

    fn record_event(&self, _kind: EventKind) -> Result<Box<dyn EventBackend>> {
        if let Some(log) = self.captures.of(self.id) {
            let index = {
                let mut l = lock(&log);
                let index = l.events.len();
                let at = l.ops.len();
                l.events.push((self.id, Some(at)));
                l.ops.push((self.id, Op::Record(index)));
                index
            };
            return Ok(Box::new(CpuEvent::Captured { log, index }));
        }
        Ok(Box::new(CpuEvent::Real {
            vgpu: self.vgpu.clone(),
            id: self.vgpu.record_event(self.id),
        }))
    }

    fn wait_event(&self, event: &dyn EventBackend) -> Result<()> {
        let event = downcast::<CpuEvent>(event.as_any(), "an event")?;
        let mine = self.captures.of(self.id);
        match (event, mine) {
            (CpuEvent::Real { id, .. }, None) => {
                self.vgpu.stream_wait_event(self.id, *id);
                Ok(())
            }
            (CpuEvent::Real { .. }, Some(_)) => Err(Error::Invalid(
                "a stream that captures a graph cannot wait for work outside the capture".into(),
            )),
            (CpuEvent::Captured { log, index }, mine) => {
                if let Some(mine) = &mine
                    && !Arc::ptr_eq(mine, log)
                {
                    return Err(Error::Invalid(
                        "a stream cannot wait for an event of another graph capture".into(),
                    ));
                }
                if mine.is_none() {
                    // Joins the capture (taken before the log: `end_capture`'s order).
                    lock(&self.captures.by_stream).insert(self.id, log.clone());
                }
                let mut l = lock(log);
                let (recorder, recorded_at) = l.events[*index];
                let at = l.ops.len();
                if self.id == l.origin {
                    if let Some(join) = l.joined.get_mut(&recorder) {
                        join.waited = join.waited.max(recorded_at);
                    }
                } else {
                    l.joined.entry(self.id).or_insert(Join { last: at, waited: None }).last = at;
                }
                l.ops.push((self.id, Op::Wait(*index)));
                Ok(())
            }
        }
    }

    unsafe fn launch(&self, l: &RawLaunch<'_>) -> BackendResult<()> {
        match self.capture(Op::Launch(cpu_launch(l))) {
            Some(Op::Launch(launch)) => self.vgpu.launch(self.id, launch).map_err(Failure::Stop),
            _ => Ok(()),
        }
    }

    unsafe fn launch_with_start_event(&self, l: &RawLaunch<'_>) -> BackendResult<Box<dyn EventBackend>> {
        let launch = cpu_launch(l);
        let Some(log) = self.captures.of(self.id) else {
            let id = self
                .vgpu
                .launch_with_start_event(self.id, launch)
                .map_err(Failure::Stop)?;
            return Ok(Box::new(CpuEvent::Real {
                vgpu: self.vgpu.clone(),
                id,
            }));
        };
        let index = {
            let mut g = lock(&log);
            let index = g.events.len();
            g.events.push((self.id, None));
            index
        };
        self.capture(Op::LaunchStarted(launch, index));
        Ok(Box::new(CpuEvent::Captured { log, index }))
    }

    unsafe fn fill_words(&self, addr: u64, value: i32, words: usize) -> Result<()> {
        if self.capture(Op::Fill { addr, value, words }).is_some() {
            // SAFETY: the caller's contract (memory of `words` words, kept allocated).
            unsafe { enqueue_fill(&self.vgpu, self.id, addr, value, words) };
        }
        Ok(())
    }

    unsafe fn wait_value(&self, _addr: u64, _value: i32) -> Result<()> {
        Err(Error::Internal(
            "the CPU backend has no stream memory operations: its subkernels wait by kernels".into(),
        ))
    }

    unsafe fn write_value(&self, _addr: u64, _value: i32) -> Result<()> {
        Err(Error::Internal(
            "the CPU backend has no stream memory operations: its subkernels signal by kernels".into(),
        ))
    }

    unsafe fn write_values(&self, writes: &[(u64, i32)]) -> Result<()> {
        let writes = writes.to_vec();
        self.host_op(Arc::new(move || {
            for &(addr, value) in &writes {
                // SAFETY: an aligned word of live CPU-backend memory (the caller's
                // contract); virtual-GPU threads read semaphores atomically too.
                unsafe { std::sync::atomic::AtomicI32::from_ptr(addr as *mut i32) }
                    .store(value, std::sync::atomic::Ordering::Release);
            }
        }))
    }

    unsafe fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.host_op(Arc::new(move || {
            // SAFETY: both ranges are valid and disjoint while queued (the caller's
            // contract; a graph keeps its buffers alive).
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, bytes) }
        }))
    }

    fn host_op(&self, op: Arc<dyn Fn() + Send + Sync>) -> Result<()> {
        if let Some(Op::Host(op)) = self.capture(Op::Host(op)) {
            self.vgpu.enqueue(self.id, Box::new(move || op()));
        }
        Ok(())
    }

    fn begin_capture(&self) -> Result<()> {
        let mut by_stream = lock(&self.captures.by_stream);
        if by_stream.contains_key(&self.id) {
            return Err(Error::Internal(
                "this stream already takes part in a graph capture".into(),
            ));
        }
        let log = CaptureLog {
            origin: self.id,
            ops: Vec::new(),
            events: Vec::new(),
            joined: HashMap::new(),
        };
        by_stream.insert(self.id, Arc::new(Mutex::new(log)));
        Ok(())
    }

    fn end_capture(&self) -> Result<Box<dyn GraphBackend>> {
        let log = self
            .captures
            .of(self.id)
            .ok_or_else(|| Error::Internal("this stream is not capturing a graph".into()))?;
        let mut by_stream = lock(&self.captures.by_stream);
        let l = lock(&log);
        if l.origin != self.id {
            return Err(Error::Internal(
                "a graph capture ends on the stream that began it".into(),
            ));
        }
        // Every stream of the capture leaves it, also when it fails below.
        by_stream.retain(|_, c| !Arc::ptr_eq(c, &log));
        if let Some((s, _)) = l.joined.iter().find(|(_, j)| !j.joined_back()) {
            return Err(Error::Internal(format!(
                "stream {} joined the graph capture but was not joined back into the stream that began it",
                s.index()
            )));
        }
        if l.ops.is_empty() {
            return Err(Error::Internal("the capture recorded an empty graph".into()));
        }
        let mut streams = vec![self.id];
        streams.extend(l.joined.keys().copied());
        Ok(Box::new(CpuGraph {
            vgpu: self.vgpu.clone(),
            ops: l.ops.clone(),
            streams,
            events: l.events.len(),
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Enqueues a fill of `words` words at `addr` on `stream`.
///
/// # Safety
/// `addr` is host memory of at least `words` words that stays allocated until it ran.
unsafe fn enqueue_fill(vgpu: &VirtualGpu, stream: StreamId, addr: u64, value: i32, words: usize) {
    vgpu.enqueue(
        stream,
        Box::new(move || {
            // SAFETY: the enqueuer's contract.
            unsafe { std::slice::from_raw_parts_mut(addr as *mut i32, words) }.fill(value);
        }),
    );
}

/// The virtual GPU's form of `l`.
fn cpu_launch(l: &RawLaunch<'_>) -> CpuLaunch {
    CpuLaunch {
        name: l.kernel.to_string(),
        grid: Dim3::new(l.grid[0], l.grid[1], l.grid[2]),
        block: Dim3::new(l.block[0], l.block[1], l.block[2]),
        dynamic_smem: l.dynamic_smem as usize,
        entry: l.cpu.clone(),
    }
}

impl EventBackend for CpuEvent {
    fn is_complete(&self) -> bool {
        match self {
            CpuEvent::Real { vgpu, id } => vgpu.event_complete(*id),
            CpuEvent::Captured { .. } => false,
        }
    }

    fn synchronize(&self) -> BackendResult<()> {
        match self {
            CpuEvent::Real { vgpu, id } => vgpu.synchronize_event(*id).map_err(Failure::Stop),
            CpuEvent::Captured { .. } => Err(Error::Invalid(
                "an event recorded inside a graph capture cannot be waited for on the host".into(),
            )
            .into()),
        }
    }

    fn elapsed_ms(&self, _end: &dyn EventBackend) -> Result<f32> {
        Err(Error::Invalid("event timing is only available on a CUDA device".into()))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl GraphBackend for CpuGraph {
    fn upload(&self) -> Result<()> {
        Ok(())
    }

    fn launch(&self, stream: &dyn StreamBackend) -> BackendResult<()> {
        let on = downcast::<CpuStream>(stream.as_any(), "a stream")?.id;
        let start = self.vgpu.record_event(on);
        for &s in &self.streams {
            self.vgpu.stream_wait_event(s, start);
        }
        let mut events: Vec<Option<EventId>> = vec![None; self.events];
        for (s, op) in &self.ops {
            match op {
                Op::Launch(l) => self.vgpu.launch(*s, l.clone()).map_err(Failure::Stop)?,
                Op::LaunchStarted(l, n) => {
                    events[*n] = Some(
                        self.vgpu
                            .launch_with_start_event(*s, l.clone())
                            .map_err(Failure::Stop)?,
                    )
                }
                Op::Record(n) => events[*n] = Some(self.vgpu.record_event(*s)),
                Op::Wait(n) => {
                    let e = events[*n].ok_or_else(|| Error::Internal("a captured wait precedes its event".into()))?;
                    self.vgpu.stream_wait_event(*s, e);
                }
                // SAFETY: the graph's owner keeps the buffers its operations use alive
                // as long as the graph.
                Op::Fill { addr, value, words } => unsafe { enqueue_fill(&self.vgpu, *s, *addr, *value, *words) },
                Op::Host(op) => {
                    let op = op.clone();
                    self.vgpu.enqueue(*s, Box::new(move || op()));
                }
            }
        }
        for &s in &self.streams {
            let end = self.vgpu.record_event(s);
            self.vgpu.stream_wait_event(on, end);
        }
        Ok(())
    }
}
