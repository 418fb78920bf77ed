//! The boundary between the runtime and what runs kernels: a CUDA GPU through cudarc
//! ([`cuda`]), or the CPU backend's virtual GPU ([`cpu`]). Both implement the traits
//! here; everything above this module holds them as trait objects and never asks which
//! backend it has (the public [`BackendKind`] only answers users who ask).
//!
//! Streams, events and graphs of one device come from that device's backend, so the
//! backend behind them always matches: a [`StreamBackend`] receives only events that
//! its own device's streams recorded (the runtime checks the device first and reports
//! a mismatch as an argument error).

pub(crate) mod cpu;
pub(crate) mod cuda;

use crate::error::Error;
use crate::module::PtxModule;
use crate::param::ParamBytes;
use megaops_device::cpu::CpuError;
use std::any::Any;
use std::sync::Arc;

/// Which backend a [`crate::Device`] runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// An NVIDIA GPU.
    Cuda,
    /// The CPU backend (virtual GPU).
    Cpu,
}

/// Sizes and limits of a device.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeviceLimits {
    /// (Virtual) streaming multiprocessors.
    pub sm_count: u32,
    /// Shared memory per SM, bytes.
    pub smem_per_sm: u32,
    /// Largest dynamic shared memory one block may opt in to, bytes.
    pub max_smem_per_block: u32,
    /// L2 cache, bytes (0 where there is none).
    pub l2_bytes: u32,
}

/// Why a backend operation failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// An error that already says everything (a CUDA error with its context, ...).
    Error(Error),
    /// The CPU backend stopped the run (deadlock, hang, out-of-tile read, kernel panic):
    /// the device turns it into a report naming the tensors and launches involved.
    Stop(CpuError),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Error(e)
    }
}

/// Result of a backend operation.
pub(crate) type BackendResult<T> = std::result::Result<T, Failure>;

/// A kernel launch in backend terms: entry, geometry, packed parameters, CPU body.
pub(crate) struct RawLaunch<'a> {
    /// Kernel name, for errors.
    pub kernel: &'a str,
    /// The PTX module holding `entry`.
    pub module: &'static PtxModule,
    /// The PTX entry.
    pub entry: &'static str,
    /// Grid, CTAs.
    pub grid: [u32; 3],
    /// Block, threads.
    pub block: [u32; 3],
    /// Dynamic shared memory, bytes.
    pub dynamic_smem: u32,
    /// Each kernel parameter's bytes, in order.
    pub params: &'a [ParamBytes],
    /// What every CPU-backend thread runs.
    pub cpu: Arc<dyn Fn() + Send + Sync>,
    /// Launch with programmatic stream serialization where the device and the entry's
    /// PTX allow it (sm_90 and later): the kernel may start before the work before it on
    /// the stream ended, and waits for that work itself (`griddepcontrol.wait`). Else,
    /// and on the CPU backend, an ordinary launch.
    pub programmatic: bool,
}

/// One device's backend: memory, module loading, streams.
pub(crate) trait DeviceBackend: Send + Sync {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// Device name (`"NVIDIA H200"`, `"CPU backend (8 virtual SMs)"`).
    fn name(&self) -> String;
    /// Sizes and limits.
    fn limits(&self) -> DeviceLimits;
    /// Allocates at least `bytes` bytes: (address, capacity). GPU memory is plain
    /// `cuMemAlloc` memory, uninitialised; CPU-backend memory is zeroed.
    fn alloc(&self, bytes: usize) -> crate::Result<(u64, usize)>;
    /// Takes an allocation back (the CUDA backend keeps it for reuse).
    ///
    /// # Safety
    /// `addr`/`capacity` come from [`DeviceBackend::alloc`] of this backend and no queued
    /// or running work uses the memory any more (see `delayed_release`).
    unsafe fn release(&self, addr: u64, capacity: usize);
    /// Allocates at least `bytes` bytes of page-locked host memory the copy engine reads
    /// directly (`cuMemAllocHost`; ordinary zeroed host memory on the CPU backend):
    /// (address, capacity).
    fn alloc_pinned(&self, bytes: usize) -> crate::Result<(u64, usize)>;
    /// Frees memory from [`DeviceBackend::alloc_pinned`].
    ///
    /// # Safety
    /// `addr`/`capacity` come from `alloc_pinned` of this backend and no queued or running
    /// work uses the memory any more.
    unsafe fn release_pinned(&self, addr: u64, capacity: usize);
    /// Bytes of memory the allocator holds (in use or cached).
    fn reserved_bytes(&self) -> usize;
    /// Copies `src` to device address `dst`, synchronously: the bytes are in device memory
    /// when it returns, so work queued afterwards on any stream sees them.
    ///
    /// # Safety
    /// `dst .. dst + src.len()` lies inside a live allocation of this backend, and no
    /// queued work uses that memory meanwhile.
    unsafe fn write(&self, dst: u64, src: &[u8]) -> BackendResult<()>;
    /// Copies device memory at `src` into `dst`, synchronously.
    ///
    /// # Safety
    /// `src .. src + dst.len()` lies inside a live allocation of this backend.
    unsafe fn read(&self, src: u64, dst: &mut [u8]) -> BackendResult<()>;
    /// Waits for all queued work on every stream.
    fn synchronize(&self) -> BackendResult<()>;
    /// Loads a PTX module (every function in it) now, if the backend loads modules.
    fn preload(&self, module: &'static PtxModule) -> crate::Result<()>;
    /// A new stream.
    fn new_stream(self: Arc<Self>) -> crate::Result<Box<dyn StreamBackend>>;
    /// A stream of the greatest priority the device has (the side streams of subkernels,
    /// whose chunks must reach the SMs before later launches' CTAs); the CPU backend has no
    /// priorities and returns an ordinary stream.
    fn new_priority_stream(self: Arc<Self>) -> crate::Result<Box<dyn StreamBackend>>;
    /// A stream whose kernels run on a partition of at least `sms` SMs (a green context
    /// on a GPU), and the SMs it got; the CPU backend has no partitions and returns an
    /// ordinary stream with 0 SMs.
    fn partition_stream(self: Arc<Self>, sms: u32) -> crate::Result<(Box<dyn StreamBackend>, u32)>;
}

/// How an event is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventKind {
    /// For ordering and completion only (cheapest).
    Marker,
    /// With a timestamp, for [`EventBackend::elapsed_ms`].
    Timing,
    /// With a timestamp, and during a graph capture an event-record node of the graph
    /// (recorded at every replay).
    TimingNode,
}

/// The most word writes one `cuStreamBatchMemOp` call takes
/// ([`StreamBackend::write_values`] splits longer lists).
pub(crate) const MAX_BATCH_WRITES: usize = 128;

/// An in-order queue of device work.
pub(crate) trait StreamBackend: Send + Sync {
    /// The number reports call the stream by where the backend has one (the virtual
    /// GPU's own stream numbers); `None` for CUDA streams.
    fn number(&self) -> Option<u64>;
    /// The CUDA stream handle (None on the CPU backend).
    fn cu_stream(&self) -> Option<cudarc::driver::sys::CUstream>;
    /// Waits until everything queued on this stream is done.
    fn synchronize(&self) -> BackendResult<()>;
    /// Records an event at the current end of the stream.
    fn record_event(&self, kind: EventKind) -> crate::Result<Box<dyn EventBackend>>;
    /// Makes later work on this stream wait for `event`, recorded by a stream of the
    /// same device (no host wait).
    fn wait_event(&self, event: &dyn EventBackend) -> crate::Result<()>;
    /// Enqueues a kernel.
    ///
    /// # Safety
    /// The parameters match the entry's signature (order, sizes, layouts), every pointer
    /// parameter is the address of memory of this device that stays allocated until the
    /// kernel is done (the caller retains it), and the CPU body does what the entry does.
    unsafe fn launch(&self, launch: &RawLaunch<'_>) -> BackendResult<()>;
    /// Enqueues a kernel like [`StreamBackend::launch`] and returns its *start event*:
    /// an event that completes once every CTA of the kernel has begun (CUDA's launch
    /// completion event, `CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT` on
    /// `cuLaunchKernelEx`; on the CPU backend, once the virtual GPU placed its last CTA).
    /// A stream that waits for it can start its next kernel while this one still runs.
    ///
    /// # Safety
    /// As for [`StreamBackend::launch`].
    unsafe fn launch_with_start_event(&self, launch: &RawLaunch<'_>) -> BackendResult<Box<dyn EventBackend>>;
    /// Enqueues setting `words` 32-bit words at `addr` to `value` (`cuMemsetD32Async`
    /// on a GPU, a host operation in stream order on the CPU backend).
    ///
    /// # Safety
    /// `addr` is memory of this device of at least `words` words that stays allocated
    /// until the operation is done.
    unsafe fn fill_words(&self, addr: u64, value: i32, words: usize) -> crate::Result<()>;
    /// Enqueues a stream memory operation that holds later work on this stream until the
    /// 32-bit word at `addr` reaches `value` (`cuStreamWaitValue32`, serial-number `GEQ`).
    /// Only GPUs have them; the CPU backend refuses.
    ///
    /// # Safety
    /// `addr` is plain `cuMemAlloc` memory of this device that stays allocated until the
    /// operation is done, and some queued work writes `value` there (a stream operation
    /// has no timeout).
    unsafe fn wait_value(&self, addr: u64, value: i32) -> crate::Result<()>;
    /// Enqueues a stream memory operation that writes `value` to the 32-bit word at `addr`
    /// after everything before it on this stream, with a memory barrier
    /// (`cuStreamWriteValue32`). Only GPUs have them; the CPU backend refuses.
    ///
    /// # Safety
    /// `addr` is plain `cuMemAlloc` memory of this device that stays allocated until the
    /// operation is done.
    unsafe fn write_value(&self, addr: u64, value: i32) -> crate::Result<()>;
    /// Enqueues writing each `(addr, value)` of `writes` (32-bit words) after everything
    /// before it on this stream, each with a memory barrier: one batch of stream memory
    /// operations on a GPU (`cuStreamBatchMemOp`, a batch per [`MAX_BATCH_WRITES`]), a host
    /// operation of release stores in stream order on the CPU backend. Nothing needs an
    /// SM. Semaphores that kernels poll may be written this way.
    ///
    /// # Safety
    /// Every `addr` is a 4-byte-aligned word of plain `cuMemAlloc` memory of this device
    /// (CPU backend: of its memory) that stays allocated until the operation is done.
    unsafe fn write_values(&self, writes: &[(u64, i32)]) -> crate::Result<()>;
    /// Enqueues a copy of `bytes` bytes from `src` to `dst` on the copy engine
    /// (`cuMemcpyAsync`; a host operation in stream order on the CPU backend). Either
    /// address may be device memory or page-locked host memory.
    ///
    /// # Safety
    /// Both ranges are valid for `bytes` bytes until the copy is done and do not overlap.
    unsafe fn copy(&self, dst: u64, src: u64, bytes: usize) -> crate::Result<()>;
    /// Enqueues `op` to run on the host in stream order (CPU backend only: it is how the
    /// CPU implementation of a subkernel runs; a GPU refuses).
    fn host_op(&self, op: Arc<dyn Fn() + Send + Sync>) -> crate::Result<()>;
    /// Starts capturing the work queued on this stream (and on streams that join the
    /// capture by waiting for an event recorded in it) into a graph. Relaxed capture
    /// mode: other threads may go on using the device.
    fn begin_capture(&self) -> crate::Result<()>;
    /// Ends the capture begun on this stream, returning the graph; every stream that
    /// joined it must have been joined back (this stream waited for an event recorded
    /// on it after its last captured work).
    fn end_capture(&self) -> crate::Result<Box<dyn GraphBackend>>;
    /// The backend's own type, for the graph of the same backend launched on it.
    fn as_any(&self) -> &dyn Any;
}

/// A marker in a stream.
pub(crate) trait EventBackend: Send + Sync {
    /// True once all work before the event has finished (never blocks).
    fn is_complete(&self) -> bool;
    /// Blocks the host until the event completes.
    fn synchronize(&self) -> BackendResult<()>;
    /// Milliseconds from `self` to the later event `end` (timing events of a GPU).
    fn elapsed_ms(&self, end: &dyn EventBackend) -> crate::Result<f32>;
    /// The backend's own type, for the stream of the same backend that waits for it.
    fn as_any(&self) -> &dyn Any;
}

/// A captured, replayable program.
pub(crate) trait GraphBackend: Send + Sync {
    /// Uploads its resources so the first replay does not pay for them.
    fn upload(&self) -> crate::Result<()>;
    /// Replays the whole graph on `stream` (a stream of the same device): it starts after
    /// the work queued there so far, and later work there runs after it.
    fn launch(&self, stream: &dyn StreamBackend) -> BackendResult<()>;
}

/// The event of the backend `E` behind `event`, or an internal error: streams and events
/// of one device share its backend, so a mismatch is a runtime bug.
pub(crate) fn downcast<'a, E: 'static>(any: &'a dyn Any, what: &str) -> crate::Result<&'a E> {
    any.downcast_ref::<E>()
        .ok_or_else(|| Error::Internal(format!("{what} of another backend reached this one")))
}
