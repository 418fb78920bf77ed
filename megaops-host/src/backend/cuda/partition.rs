//! SM partitions: a green context holding a subset of the GPU's SMs, and a stream on it.

use super::CudaDevice;
use super::stream::CudaStreamBackend;
use crate::backend::StreamBackend;
use crate::error::{Error, Result};
use cudarc::driver::sys;
use std::sync::Arc;

/// A green context; destroyed (with its stream) by the stream backend that owns it.
pub(crate) struct GreenContext(sys::CUgreenCtx);

// SAFETY: a driver handle, only used to destroy the context, once.
unsafe impl Send for GreenContext {}
unsafe impl Sync for GreenContext {}

impl GreenContext {
    /// Destroys `stream` (created on this context), then the context.
    ///
    /// # Safety
    /// `stream` was created on this green context, is idle, and nothing uses it after.
    pub unsafe fn destroy_with_stream(self, stream: sys::CUstream) {
        // SAFETY: the caller's contract.
        unsafe {
            let _ = sys::cuStreamDestroy_v2(stream);
            let _ = sys::cuGreenCtxDestroy(self.0);
        }
    }
}

fn check(r: sys::CUresult, what: &str) -> Result<()> {
    r.result().map_err(|e| Error::cuda(what.to_string(), e))
}

/// Splits off at least `sms` SMs (the driver rounds up to its partition granularity)
/// into a green context with its own non-blocking stream; returns the stream and the SM
/// count it got.
pub(crate) fn green_stream(device: Arc<CudaDevice>, sms: u32) -> Result<(Box<dyn StreamBackend>, u32)> {
    let total = device.limits.sm_count;
    if sms == 0 || sms >= total {
        return Err(Error::Invalid(format!(
            "an SM partition needs 1..{total} SMs, not {sms}"
        )));
    }
    device.bind()?;
    let cu_device = device.ctx.cu_device();
    // SAFETY: plain driver calls on out-parameters we own; the resource structs are
    // plain data, zero-initialised before the driver fills them.
    unsafe {
        let mut all: sys::CUdevResource = std::mem::zeroed();
        check(
            sys::cuDeviceGetDevResource(cu_device, &mut all, sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM),
            "reading the device's SM resource",
        )?;
        let mut part: sys::CUdevResource = std::mem::zeroed();
        let mut rest: sys::CUdevResource = std::mem::zeroed();
        let mut groups: std::ffi::c_uint = 1;
        check(
            sys::cuDevSmResourceSplitByCount(&mut part, &mut groups, &all, &mut rest, 0, sms),
            "splitting SMs",
        )?;
        if groups < 1 {
            return Err(Error::Invalid(format!("the driver could not split off {sms} SMs")));
        }
        let got = part.__bindgen_anon_1.sm.smCount;
        let mut desc: sys::CUdevResourceDesc = std::ptr::null_mut();
        check(
            sys::cuDevResourceGenerateDesc(&mut desc, &mut part, 1),
            "describing the SM partition",
        )?;
        let mut green: sys::CUgreenCtx = std::ptr::null_mut();
        check(
            sys::cuGreenCtxCreate(
                &mut green,
                desc,
                cu_device,
                sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32,
            ),
            "creating a green context",
        )?;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        let made = sys::cuGreenCtxStreamCreate(&mut raw, green, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32, 0);
        if let Err(e) = check(made, "creating a stream on the green context") {
            let _ = sys::cuGreenCtxDestroy(green);
            return Err(e);
        }
        // cudarc borrows the stream; the backend destroys it, then the green context.
        let stream = device.ctx.wrap_borrowed_stream(raw);
        let backend = CudaStreamBackend::new(device, stream, Some(GreenContext(green)));
        Ok((Box::new(backend), got))
    }
}
