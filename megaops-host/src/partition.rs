//! SM partitions with green contexts (paper §2.3): a stream whose kernels run on a fixed
//! subset of the GPU's SMs, so a communication-like kernel keeps a few SMs to itself while
//! computation fills the rest.

use crate::device::Device;
use crate::error::Result;
use crate::stream::Stream;

/// A green context holding `sms` SMs and a stream on it. Kernels of any module loaded on
/// the device can be launched on [`SmPartition::stream`].
pub struct SmPartition {
    stream: Stream,
    sms: u32,
}

impl SmPartition {
    /// Splits off at least `sms` SMs (the driver rounds up to its partition granularity)
    /// into a green context with its own stream. On the CPU backend there are no SM
    /// partitions: this returns an ordinary stream and says so in [`SmPartition::sms`] (0).
    pub fn new(device: &Device, sms: u32) -> Result<SmPartition> {
        let (backend, sms) = device.backend().clone().partition_stream(sms)?;
        Ok(SmPartition {
            stream: Stream::from_backend(device, backend),
            sms,
        })
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
        // The stream backend destroys the green context once the stream is idle.
        let _ = self.stream.synchronize();
    }
}
