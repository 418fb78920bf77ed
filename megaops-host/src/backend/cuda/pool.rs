//! The CUDA allocator: plain `cuMemAlloc` blocks (stream memory operations work on them,
//! stream-ordered pool allocations do not), rounded to size classes and reused before
//! asking the driver again. `cuMemFree` synchronises the whole device, which would
//! serialise overlapped work; a block comes back here only once no queued work can use
//! it (`crate::delayed_release` holds buffers until then).

use crate::error::{CudaContext as _, Error, Result};
use crate::mutex::lock;
use cudarc::driver::{CudaContext, DriverError, result, sys};
use std::collections::HashMap;
use std::sync::Mutex;

/// Freed blocks by size class, and the bytes held in all.
#[derive(Default)]
pub(crate) struct Pool {
    state: Mutex<PoolState>,
}

#[derive(Default)]
struct PoolState {
    free: HashMap<usize, Vec<sys::CUdeviceptr>>,
    reserved: usize,
}

/// Rounds an allocation size to the pool's size classes.
pub(crate) fn round_size(bytes: usize) -> usize {
    let bytes = bytes.max(1);
    if bytes <= 1 << 20 {
        bytes.div_ceil(512) * 512
    } else {
        bytes.div_ceil(2 << 20) * (2 << 20)
    }
}

impl Pool {
    /// A block of at least `bytes` bytes: (address, capacity). A free block of the size
    /// class is reused; otherwise the driver allocates, and when it is out of memory
    /// the cached blocks are freed and it tries once more. Still out of memory:
    /// [`Error::OutOfMemory`] naming `device`; any other driver error as it is.
    pub fn alloc(&self, ctx: &CudaContext, bytes: usize, device: &str) -> Result<(sys::CUdeviceptr, usize)> {
        let size = round_size(bytes);
        if let Some(ptr) = lock(&self.state).free.get_mut(&size).and_then(Vec::pop) {
            return Ok((ptr, size));
        }
        ctx.bind_to_thread()
            .ctx(|| "binding the CUDA context to this thread".into())?;
        let oom = |e: &DriverError| e.0 == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY;
        let failed = |e: DriverError| {
            if oom(&e) {
                Error::OutOfMemory {
                    memory: crate::error::MemoryKind::Device,
                    bytes: size,
                    device: device.to_string(),
                }
            } else {
                Error::cuda(format!("allocating {size} bytes of device memory"), e)
            }
        };
        // SAFETY: the context is bound; the size is non-zero.
        let ptr = match unsafe { result::malloc_sync(size) } {
            Ok(p) => p,
            Err(e) if oom(&e) => {
                self.trim(ctx)?;
                // SAFETY: as above.
                unsafe { result::malloc_sync(size) }.map_err(failed)?
            }
            Err(e) => return Err(failed(e)),
        };
        lock(&self.state).reserved += size;
        Ok((ptr, size))
    }

    /// Takes a block back for reuse.
    ///
    /// # Safety
    /// `ptr`/`size` come from [`Pool::alloc`] and no queued work uses the block.
    pub unsafe fn release(&self, ptr: sys::CUdeviceptr, size: usize) {
        lock(&self.state).free.entry(size).or_default().push(ptr);
    }

    /// Frees every cached block.
    pub fn trim(&self, ctx: &CudaContext) -> Result<()> {
        let blocks: Vec<(usize, Vec<sys::CUdeviceptr>)> = lock(&self.state).free.drain().collect();
        ctx.bind_to_thread()
            .ctx(|| "binding the CUDA context to this thread".into())?;
        for (size, ptrs) in blocks {
            for p in ptrs {
                // SAFETY: pooled blocks are unused and were allocated by malloc_sync.
                unsafe { result::free_sync(p) }.ctx(|| "freeing device memory".into())?;
                lock(&self.state).reserved -= size;
            }
        }
        Ok(())
    }

    /// Bytes held (in use or cached).
    pub fn reserved_bytes(&self) -> usize {
        lock(&self.state).reserved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes() {
        assert_eq!(round_size(0), 512);
        assert_eq!(round_size(513), 1024);
        assert_eq!(round_size(1 << 20), 1 << 20);
        assert_eq!(round_size((1 << 20) + 1), 2 << 20);
        assert_eq!(round_size(5 << 20), 6 << 20);
    }
}
