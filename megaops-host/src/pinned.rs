//! [`PinnedHost`]: page-locked host memory, the source of host-to-device copies on the
//! copy engine (`subkernel::copy::upload_rows`).

use crate::buffer::Buffer;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use std::marker::PhantomData;
use std::sync::Arc;

/// Values in page-locked host memory (`cuMemAllocHost`; ordinary host memory on the CPU
/// backend), which a copy engine reads without staging. Written once, when made, and
/// read-only afterwards, so a copy in flight never reads memory the host is changing;
/// copies keep the memory alive until they are done.
pub struct PinnedHost<T: DType> {
    device: Device,
    buffer: Arc<Buffer>,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: DType> PinnedHost<T> {
    /// Page-locked memory of `device` holding a copy of `values`.
    pub fn from_slice(device: &Device, values: &[T]) -> Result<PinnedHost<T>> {
        let buffer = Buffer::pinned(device.backend(), std::mem::size_of_val(values))?;
        // SAFETY: the buffer is host memory of at least that many bytes, just allocated
        // (nothing else refers to it); `T` is a plain value type.
        unsafe {
            std::ptr::copy_nonoverlapping(values.as_ptr(), buffer.addr() as *mut T, values.len());
        }
        Ok(PinnedHost {
            device: device.clone(),
            buffer: Arc::new(buffer),
            len: values.len(),
            _t: PhantomData,
        })
    }

    /// The values.
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `len` values written in `from_slice`, never written again; the buffer
        // lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.buffer.addr() as *const T, self.len) }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds no value.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device whose copy engine reads it.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The allocation (launches keep it alive).
    pub(crate) fn buffer(&self) -> &Arc<Buffer> {
        &self.buffer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use megaops_device::cpu::VgpuConfig;

    #[test]
    fn pinned_memory_holds_what_it_was_made_from() -> Result<()> {
        let device = Device::cpu(VgpuConfig::default())?;
        let v: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
        let p = PinnedHost::from_slice(&device, &v)?;
        assert_eq!(p.as_slice(), &v[..]);
        assert_eq!(p.len(), 1000);
        assert!(PinnedHost::<f32>::from_slice(&device, &[])?.is_empty());
        Ok(())
    }
}
