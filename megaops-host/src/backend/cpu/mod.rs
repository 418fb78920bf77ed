//! CPU backend: kernels run on `megaops_device::cpu::VirtualGpu`; device memory is host
//! memory; streams, events and graph capture are the virtual GPU's ([`stream`]).

mod stream;

use crate::backend::{BackendKind, BackendResult, DeviceBackend, DeviceLimits, Failure, StreamBackend};
use crate::error::{Error, Result};
use crate::module::PtxModule;
use megaops_device::cpu::{VgpuConfig, VirtualGpu};
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::sync::Arc;
use stream::{Captures, CpuStream};

/// Alignment of CPU-backend allocations (as cudaMalloc's 256 bytes).
const ALIGN: usize = 256;

/// The CPU backend of one [`crate::Device`].
pub(crate) struct CpuDevice {
    vgpu: Arc<VirtualGpu>,
    captures: Arc<Captures>,
}

impl CpuDevice {
    /// A virtual GPU of shape `config`; an invalid configuration is an error, not a panic.
    pub fn new(config: VgpuConfig) -> Result<Self> {
        let vgpu = VirtualGpu::try_new(config).map_err(|e| Error::Cpu(e.to_string()))?;
        Ok(CpuDevice {
            vgpu,
            captures: Arc::default(),
        })
    }
}

impl DeviceBackend for CpuDevice {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }

    fn name(&self) -> String {
        format!("CPU backend ({} virtual SMs)", self.vgpu.config().sms)
    }

    fn limits(&self) -> DeviceLimits {
        let c = self.vgpu.config();
        DeviceLimits {
            sm_count: c.sms,
            smem_per_sm: c.smem_per_sm as u32,
            max_smem_per_block: c.max_smem_per_cta as u32,
            l2_bytes: 0,
        }
    }

    fn alloc(&self, bytes: usize) -> Result<(u64, usize)> {
        let size = bytes.max(1).div_ceil(ALIGN) * ALIGN;
        let layout = Layout::from_size_align(size, ALIGN).map_err(|_| Error::OutOfMemory {
            memory: crate::error::MemoryKind::Host,
            bytes,
            device: self.name(),
        })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::OutOfMemory {
                memory: crate::error::MemoryKind::Host,
                bytes: size,
                device: self.name(),
            });
        }
        Ok((ptr as u64, size))
    }

    unsafe fn release(&self, addr: u64, capacity: usize) {
        if let Ok(layout) = Layout::from_size_align(capacity, ALIGN) {
            // SAFETY: allocated by `alloc` with this layout; unused (caller's contract).
            unsafe { dealloc(addr as *mut u8, layout) }
        }
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<(u64, usize)> {
        self.alloc(bytes)
    }

    unsafe fn release_pinned(&self, addr: u64, capacity: usize) {
        // SAFETY: `alloc_pinned` is `alloc` here.
        unsafe { self.release(addr, capacity) }
    }

    fn reserved_bytes(&self) -> usize {
        0
    }

    unsafe fn write(&self, dst: u64, src: &[u8]) -> BackendResult<()> {
        // SAFETY: the range lies inside a live host allocation and no queued work uses
        // it (the caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }

    unsafe fn read(&self, src: u64, dst: &mut [u8]) -> BackendResult<()> {
        // SAFETY: the range lies inside a live host allocation (the caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn synchronize(&self) -> BackendResult<()> {
        self.vgpu.synchronize().map_err(Failure::Stop)
    }

    fn preload(&self, _module: &'static PtxModule) -> Result<()> {
        Ok(())
    }

    fn new_stream(self: Arc<Self>) -> Result<Box<dyn StreamBackend>> {
        Ok(Box::new(CpuStream::new(self.vgpu.clone(), self.captures.clone())))
    }

    fn new_priority_stream(self: Arc<Self>) -> Result<Box<dyn StreamBackend>> {
        self.new_stream()
    }

    fn partition_stream(self: Arc<Self>, _sms: u32) -> Result<(Box<dyn StreamBackend>, u32)> {
        Ok((self.new_stream()?, 0))
    }
}
