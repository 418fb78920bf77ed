//! CUDA streams, events and graphs behind the backend traits.

use super::CudaDevice;
use super::partition::GreenContext;
use crate::backend::{BackendResult, EventBackend, EventKind, GraphBackend, RawLaunch, StreamBackend, downcast};
use crate::error::{CudaContext as _, Error, Result};
use cudarc::driver::{CudaEvent, CudaGraph, CudaStream, result, sys};
use std::any::Any;
use std::sync::Arc;

/// A CUDA stream (non-blocking, or one of a green context), with the device whose
/// modules its launches use.
pub(crate) struct CudaStreamBackend {
    // Field order is drop order: the stream goes before the green context it lives on.
    stream: Arc<CudaStream>,
    device: Arc<CudaDevice>,
    green: Option<GreenContext>,
}

impl CudaStreamBackend {
    /// Wraps `stream`; `green` is the green context it was created on (destroyed after
    /// the stream).
    pub fn new(device: Arc<CudaDevice>, stream: Arc<CudaStream>, green: Option<GreenContext>) -> Self {
        CudaStreamBackend { stream, device, green }
    }
}

impl CudaStreamBackend {
    /// `cuLaunchKernelEx` of `l` on this stream with the launch attributes `attrs`; `how`
    /// says how in an error (`launching `k` <how>, grid ...`).
    ///
    /// # Safety
    /// As [`StreamBackend::launch`]; every handle an attribute names stays live until the
    /// launch is done with it.
    unsafe fn launch_ex(&self, l: &RawLaunch<'_>, attrs: &mut [sys::CUlaunchAttribute], how: &str) -> Result<()> {
        let f = self.device.function(l.module, l.entry, l.dynamic_smem)?;
        let mut ptrs: Vec<*mut std::ffi::c_void> =
            l.params.iter().map(|p| p.as_ptr() as *mut std::ffi::c_void).collect();
        self.device.bind()?;
        let config = sys::CUlaunchConfig {
            gridDimX: l.grid[0],
            gridDimY: l.grid[1],
            gridDimZ: l.grid[2],
            blockDimX: l.block[0],
            blockDimY: l.block[1],
            blockDimZ: l.block[2],
            sharedMemBytes: l.dynamic_smem,
            hStream: self.stream.cu_stream(),
            attrs: attrs.as_mut_ptr(),
            numAttrs: attrs.len() as u32,
        };
        // SAFETY: the caller's contract (parameters match the entry, pointers stay valid
        // until the kernel is done, geometry validated); `config`, `attrs` and `ptrs`
        // outlive the call.
        unsafe { sys::cuLaunchKernelEx(&config, f.0, ptrs.as_mut_ptr(), std::ptr::null_mut()) }
            .result()
            .ctx(|| {
                format!(
                    "launching `{}` {how}, grid {:?}, block {:?}, {} B shared",
                    l.kernel, l.grid, l.block, l.dynamic_smem
                )
            })
    }
}

/// A launch attribute of kind `id` with an all-zero value, for the caller to fill in.
fn launch_attribute(id: sys::CUlaunchAttributeID) -> sys::CUlaunchAttribute {
    // SAFETY: an all-zero attribute is a valid `CU_LAUNCH_ATTRIBUTE_IGNORE` (plain
    // integers and handles); its id is set right after, its value by the caller.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = id;
    attr
}

impl Drop for CudaStreamBackend {
    fn drop(&mut self) {
        if let Some(green) = self.green.take() {
            let _ = self.stream.synchronize();
            // SAFETY: the stream was created on this green context (cudarc only borrows
            // it) and is idle; nothing else holds the raw handle.
            unsafe { green.destroy_with_stream(self.stream.cu_stream()) };
        }
    }
}

/// A CUDA event.
pub(crate) struct CudaEventBackend(CudaEvent);

/// An instantiated CUDA graph.
pub(crate) struct CudaGraphBackend(CudaGraph);

// SAFETY: the graph's handles are driver handles, usable from any thread; replays are
// serialised by the AsyncStream that launches them.
unsafe impl Send for CudaGraphBackend {}
unsafe impl Sync for CudaGraphBackend {}

impl StreamBackend for CudaStreamBackend {
    fn number(&self) -> Option<u64> {
        None
    }

    fn cu_stream(&self) -> Option<sys::CUstream> {
        Some(self.stream.cu_stream())
    }

    fn synchronize(&self) -> BackendResult<()> {
        self.stream.synchronize().ctx(|| "synchronising a stream".into())?;
        Ok(())
    }

    fn record_event(&self, kind: EventKind) -> Result<Box<dyn EventBackend>> {
        let flags = match kind {
            EventKind::Marker => sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
            EventKind::Timing | EventKind::TimingNode => sys::CUevent_flags::CU_EVENT_DEFAULT,
        };
        let capturing = kind == EventKind::TimingNode && self.is_capturing()?;
        if !capturing {
            let e = self
                .stream
                .record_event(Some(flags))
                .ctx(|| "recording an event".into())?;
            return Ok(Box::new(CudaEventBackend(e)));
        }
        let e = self
            .stream
            .context()
            .new_event(Some(flags))
            .ctx(|| "creating an event".into())?;
        let external = sys::CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL as u32;
        // SAFETY: both handles are live (the event is owned by `e`, the stream by `self`).
        unsafe { sys::cuEventRecordWithFlags(e.cu_event(), self.stream.cu_stream(), external) }
            .result()
            .ctx(|| "recording an event node in a capture".into())?;
        Ok(Box::new(CudaEventBackend(e)))
    }

    fn wait_event(&self, event: &dyn EventBackend) -> Result<()> {
        let e = downcast::<CudaEventBackend>(event.as_any(), "an event")?;
        self.stream
            .wait(&e.0)
            .ctx(|| "making a stream wait for an event".into())
    }

    unsafe fn launch(&self, l: &RawLaunch<'_>) -> BackendResult<()> {
        let programmatic = l.programmatic && self.device.programmatic_launches(l.module)?;
        if programmatic {
            let mut attr =
                launch_attribute(sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
            attr.value.programmaticStreamSerializationAllowed = 1;
            // SAFETY: the caller's contract; the entry's module is of sm_90 or later, so
            // the kernel waits for its prerequisites itself (`griddepcontrol.wait`).
            unsafe { self.launch_ex(l, &mut [attr], "programmatically") }?;
            return Ok(());
        }
        let f = self.device.function(l.module, l.entry, l.dynamic_smem)?;
        let mut ptrs: Vec<*mut std::ffi::c_void> =
            l.params.iter().map(|p| p.as_ptr() as *mut std::ffi::c_void).collect();
        self.device.bind()?;
        // SAFETY: the caller's contract: the parameters match the entry, pointers stay
        // valid until the kernel is done; geometry was validated against device limits.
        unsafe {
            result::launch_kernel(
                f.0,
                (l.grid[0], l.grid[1], l.grid[2]),
                (l.block[0], l.block[1], l.block[2]),
                l.dynamic_smem,
                self.stream.cu_stream(),
                &mut ptrs,
            )
        }
        .ctx(|| {
            format!(
                "launching `{}` with grid {:?}, block {:?}, {} B shared",
                l.kernel, l.grid, l.block, l.dynamic_smem
            )
        })?;
        Ok(())
    }

    unsafe fn launch_with_start_event(&self, l: &RawLaunch<'_>) -> BackendResult<Box<dyn EventBackend>> {
        let event = self
            .stream
            .context()
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .ctx(|| "creating a launch's start event".into())?;
        let mut attr = launch_attribute(sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT);
        attr.value.launchCompletionEvent = sys::CUlaunchAttributeValue_union__bindgen_ty_3 {
            event: event.cu_event(),
            flags: 0,
        };
        // SAFETY: as for `launch` (the caller's contract); the event is live (owned by
        // `event`).
        unsafe { self.launch_ex(l, &mut [attr], "with a start event") }?;
        Ok(Box::new(CudaEventBackend(event)))
    }

    unsafe fn fill_words(&self, addr: u64, value: i32, words: usize) -> Result<()> {
        // SAFETY: `addr` holds `words` words and stays allocated (the caller's contract).
        unsafe { sys::cuMemsetD32Async(addr, value as u32, words, self.stream.cu_stream()) }
            .result()
            .ctx(|| "enqueueing a 32-bit memset".into())
    }

    unsafe fn wait_value(&self, addr: u64, value: i32) -> Result<()> {
        let geq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
        // SAFETY: `addr` is plain device memory that stays allocated (the caller's contract).
        unsafe { sys::cuStreamWaitValue32_v2(self.stream.cu_stream(), addr, value as u32, geq) }
            .result()
            .ctx(|| "enqueueing a stream wait-value operation".into())
    }

    unsafe fn write_value(&self, addr: u64, value: i32) -> Result<()> {
        let barrier = sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32;
        // SAFETY: as above.
        unsafe { sys::cuStreamWriteValue32_v2(self.stream.cu_stream(), addr, value as u32, barrier) }
            .result()
            .ctx(|| "enqueueing a stream write-value operation".into())
    }

    unsafe fn write_values(&self, writes: &[(u64, i32)]) -> Result<()> {
        use sys::CUstreamBatchMemOpType_enum::CU_STREAM_MEM_OP_WRITE_VALUE_32;
        for batch in writes.chunks(crate::backend::MAX_BATCH_WRITES) {
            let mut ops: Vec<sys::CUstreamBatchMemOpParams> = batch
                .iter()
                .map(|&(address, value)| sys::CUstreamBatchMemOpParams {
                    writeValue: sys::CUstreamBatchMemOpParams_union_CUstreamMemOpWriteValueParams_st {
                        operation: CU_STREAM_MEM_OP_WRITE_VALUE_32,
                        address,
                        __bindgen_anon_1:
                            sys::CUstreamBatchMemOpParams_union_CUstreamMemOpWriteValueParams_st__bindgen_ty_1 {
                                value: value as u32,
                            },
                        // CU_STREAM_WRITE_VALUE_DEFAULT: a memory barrier before the write.
                        flags: 0,
                        alias: 0,
                    },
                })
                .collect();
            // SAFETY: every address is plain device memory that stays allocated (the
            // caller's contract); `ops` holds `batch.len()` initialised write operations.
            unsafe { sys::cuStreamBatchMemOp_v2(self.stream.cu_stream(), ops.len() as u32, ops.as_mut_ptr(), 0) }
                .result()
                .ctx(|| format!("enqueueing a batch of {} stream write-value operations", ops.len()))?;
        }
        Ok(())
    }

    unsafe fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        // SAFETY: both ranges are valid and disjoint (the caller's contract).
        unsafe { sys::cuMemcpyAsync(dst, src, bytes, self.stream.cu_stream()) }
            .result()
            .ctx(|| format!("enqueueing a copy of {bytes} B"))
    }

    fn host_op(&self, _op: Arc<dyn Fn() + Send + Sync>) -> Result<()> {
        Err(Error::Internal(
            "host operations in stream order exist only on the CPU backend".into(),
        ))
    }

    fn begin_capture(&self) -> Result<()> {
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .ctx(|| "beginning a graph capture".into())
    }

    fn end_capture(&self) -> Result<Box<dyn GraphBackend>> {
        let g = self
            .stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .ctx(|| "ending the graph capture".into())?
            .ok_or_else(|| Error::Internal("the capture recorded an empty graph".into()))?;
        Ok(Box::new(CudaGraphBackend(g)))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl CudaStreamBackend {
    /// Whether the stream is capturing a graph now.
    fn is_capturing(&self) -> Result<bool> {
        let status = self
            .stream
            .capture_status()
            .ctx(|| "reading a stream's capture status".into())?;
        Ok(status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE)
    }
}

impl EventBackend for CudaEventBackend {
    fn is_complete(&self) -> bool {
        self.0.is_complete()
    }

    fn synchronize(&self) -> BackendResult<()> {
        self.0.synchronize().ctx(|| "waiting for an event".into())?;
        Ok(())
    }

    fn elapsed_ms(&self, end: &dyn EventBackend) -> Result<f32> {
        let end = downcast::<CudaEventBackend>(end.as_any(), "an event")?;
        self.0.elapsed_ms(&end.0).ctx(|| "reading event timing".into())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl GraphBackend for CudaGraphBackend {
    fn upload(&self) -> Result<()> {
        self.0.upload().ctx(|| "uploading a graph".into())
    }

    fn launch(&self, stream: &dyn StreamBackend) -> BackendResult<()> {
        let s = downcast::<CudaStreamBackend>(stream.as_any(), "a stream")?;
        s.device.bind()?;
        // SAFETY: a live executable graph and a live stream of the same context.
        unsafe { sys::cuGraphLaunch(self.0.cu_graph_exec(), s.stream.cu_stream()) }
            .result()
            .ctx(|| "launching a graph".into())?;
        Ok(())
    }
}
