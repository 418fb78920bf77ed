//! Device memory allocations, shared by tensors and kept alive by in-flight work.

use crate::backend::cpu::CpuDevice;
use crate::device::{Device, DeviceBackend};
use crate::error::Result;

/// One allocation of device memory (GPU memory, or host memory on the CPU backend).
/// Tensors hold it through an `Arc`; launches hold extra references until the work that
/// uses it is known to have finished, so dropping a tensor never frees memory a queued
/// kernel still reads.
pub struct Buffer {
    device: Device,
    addr: u64,
    bytes: usize,
    capacity: usize,
}

impl Buffer {
    /// Allocates `bytes` bytes on `device`. GPU memory is uninitialised; CPU-backend
    /// memory is zeroed.
    pub fn new(device: &Device, bytes: usize) -> Result<Buffer> {
        let (addr, capacity) = match device.backend() {
            DeviceBackend::Cuda(c) => c.alloc(bytes)?,
            DeviceBackend::Cpu(_) => {
                let (p, cap) = CpuDevice::alloc(bytes)?;
                (p as u64, cap)
            }
        };
        Ok(Buffer {
            device: device.clone(),
            addr,
            bytes,
            capacity,
        })
    }

    /// Device address (a host address on the CPU backend).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Size in bytes as requested.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// True for a zero-byte buffer.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The device it lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({:#x}, {} bytes)", self.addr, self.bytes)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        match self.device.backend() {
            DeviceBackend::Cuda(c) => c.release(self.addr, self.capacity),
            // SAFETY: allocated by CpuDevice::alloc with this capacity; the last
            // reference is gone, and launches hold references while they may run.
            DeviceBackend::Cpu(_) => unsafe { CpuDevice::free(self.addr as *mut u8, self.capacity) },
        }
    }
}
