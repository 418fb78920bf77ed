//! SM partitions with green contexts (paper §2.3): a stream whose kernels run on a fixed
//! subset of the GPU's SMs, so a communication-like kernel keeps a few SMs to itself while
//! computation fills the rest.

use crate::device::{Device, DeviceBackend};
use crate::error::{Error, Result};
use crate::stream::Stream;
use cudarc::driver::sys;

/// A green context holding `sms` SMs and a stream on it. Kernels of any module loaded on
/// the device can be launched on [`SmPartition::stream`].
pub struct SmPartition {
    green: sys::CUgreenCtx,
    stream: Stream,
    sms: u32,
}

// SAFETY: the green-context handle is only used to destroy it on drop; the driver's
// handles are thread-safe.
unsafe impl Send for SmPartition {}
unsafe impl Sync for SmPartition {}

fn check(r: sys::CUresult, what: &str) -> Result<()> {
    r.result().map_err(|e| Error::cuda(what.to_string(), e))
}

impl SmPartition {
    /// Splits off at least `sms` SMs (the driver rounds up to its partition granularity)
    /// into a green context with its own stream. On the CPU backend there are no SM
    /// partitions: this returns an ordinary stream and says so in [`SmPartition::sms`] (0).
    pub fn new(device: &Device, sms: u32) -> Result<SmPartition> {
        let DeviceBackend::Cuda(c) = device.backend() else {
            return Ok(SmPartition {
                green: std::ptr::null_mut(),
                stream: Stream::new(device)?,
                sms: 0,
            });
        };
        if sms == 0 || sms >= c.sm_count {
            return Err(Error::Invalid(format!(
                "an SM partition needs 1..{} SMs, not {sms}",
                c.sm_count
            )));
        }
        c.ctx
            .bind_to_thread()
            .map_err(|e| Error::cuda("binding the context", e))?;
        // SAFETY: plain driver calls on out-parameters we own; the resource structs are
        // plain data, zero-initialised before the driver fills them.
        unsafe {
            let mut all: sys::CUdevResource = std::mem::zeroed();
            check(
                sys::cuDeviceGetDevResource(
                    c.ctx.cu_device(),
                    &mut all,
                    sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM,
                ),
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
                    c.ctx.cu_device(),
                    sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32,
                ),
                "creating a green context",
            )?;
            let mut raw: sys::CUstream = std::ptr::null_mut();
            let made =
                sys::cuGreenCtxStreamCreate(&mut raw, green, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32, 0);
            if let Err(e) = check(made, "creating a stream on the green context") {
                let _ = sys::cuGreenCtxDestroy(green);
                return Err(e);
            }
            // The stream belongs to the green context, which this partition destroys last.
            let stream = Stream::from_raw_cuda(device, c.ctx.wrap_borrowed_stream(raw))?;
            Ok(SmPartition {
                green,
                stream,
                sms: got,
            })
        }
    }

    /// The stream whose kernels run on the partition's SMs.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Number of SMs in the partition (0 on the CPU backend: no partitioning there).
    pub fn sms(&self) -> u32 {
        self.sms
    }
}

impl Drop for SmPartition {
    fn drop(&mut self) {
        let _ = self.stream.synchronize();
        if !self.green.is_null()
            && let Some(raw) = self.stream.cu_stream()
        {
            // SAFETY: the stream was created on this green context and is idle.
            unsafe {
                let _ = sys::cuStreamDestroy_v2(raw);
                let _ = sys::cuGreenCtxDestroy(self.green);
            }
        }
    }
}
