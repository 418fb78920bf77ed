//! Device memory allocations, shared by tensors and kept alive by in-flight work.

use crate::backend::DeviceBackend;
use crate::error::Result;
use std::sync::Arc;

/// One allocation of device memory (GPU memory, or host memory on the CPU backend).
/// Tensors hold it through an `Arc`; launches hold extra references until the work that
/// uses it is known to have finished (see `delayed_release`), so dropping a tensor never
/// frees memory a queued kernel still reads.
pub struct Buffer {
    backend: Arc<dyn DeviceBackend>,
    addr: u64,
    bytes: usize,
    capacity: usize,
    /// Page-locked host memory (`DeviceBackend::alloc_pinned`) instead of device memory.
    pinned: bool,
}

impl Buffer {
    /// Allocates `bytes` bytes from `backend`. GPU memory is uninitialised; CPU-backend
    /// memory is zeroed.
    pub(crate) fn new(backend: &Arc<dyn DeviceBackend>, bytes: usize) -> Result<Buffer> {
        let (addr, capacity) = backend.alloc(bytes)?;
        Ok(Buffer {
            backend: backend.clone(),
            addr,
            bytes,
            capacity,
            pinned: false,
        })
    }

    /// Allocates `bytes` bytes of page-locked host memory from `backend`, uninitialised
    /// (zeroed on the CPU backend).
    pub(crate) fn pinned(backend: &Arc<dyn DeviceBackend>, bytes: usize) -> Result<Buffer> {
        let (addr, capacity) = backend.alloc_pinned(bytes)?;
        Ok(Buffer {
            backend: backend.clone(),
            addr,
            bytes,
            capacity,
            pinned: true,
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

    /// Whether the memory belongs to `backend`.
    pub(crate) fn is_of(&self, backend: &Arc<dyn DeviceBackend>) -> bool {
        Arc::ptr_eq(&self.backend, backend)
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({:#x}, {} bytes)", self.addr, self.bytes)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated by this backend with this capacity, pinned or not; the last
        // reference is gone, and launches hold references while they may run (delayed
        // release).
        unsafe {
            if self.pinned {
                self.backend.release_pinned(self.addr, self.capacity)
            } else {
                self.backend.release(self.addr, self.capacity)
            }
        }
    }
}
