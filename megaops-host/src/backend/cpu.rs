//! CPU backend: kernels run on `megaops_device::cpu::VirtualGpu`; device memory is host
//! memory.

use crate::error::{Error, Result};
use megaops_device::cpu::{VgpuConfig, VirtualGpu};
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::sync::Arc;

/// Alignment of CPU-backend allocations (as cudaMalloc's 256 bytes).
pub(crate) const ALIGN: usize = 256;

/// The CPU backend of one [`crate::Device`].
pub(crate) struct CpuDevice {
    pub vgpu: Arc<VirtualGpu>,
}

impl CpuDevice {
    /// A virtual GPU of shape `config`; an invalid configuration is an error, not a panic.
    pub fn new(config: VgpuConfig) -> Result<Self> {
        let vgpu = VirtualGpu::try_new(config).map_err(|e| Error::Cpu(e.to_string()))?;
        Ok(CpuDevice { vgpu })
    }

    /// Allocates zeroed host memory standing in for device memory.
    pub fn alloc(bytes: usize) -> Result<(*mut u8, usize)> {
        let size = bytes.max(1).div_ceil(ALIGN) * ALIGN;
        let layout = Layout::from_size_align(size, ALIGN)
            .map_err(|e| Error::Invalid(format!("allocation of {bytes} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::Invalid(format!(
                "out of host memory allocating {size} bytes for the CPU backend"
            )));
        }
        Ok((ptr, size))
    }

    /// Frees memory from [`CpuDevice::alloc`].
    ///
    /// # Safety
    /// `ptr`/`size` come from `alloc` and nothing uses the memory any more.
    pub unsafe fn free(ptr: *mut u8, size: usize) {
        if let Ok(layout) = Layout::from_size_align(size, ALIGN) {
            // SAFETY: caller's contract.
            unsafe { dealloc(ptr, layout) }
        }
    }
}
