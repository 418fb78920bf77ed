//! Shared memory of one CTA: the dynamic buffer sized at launch and the static shared
//! variables, allocated zeroed on first use.

use std::alloc::{self, Layout};
use std::cell::RefCell;
use std::ptr::NonNull;

/// Alignment of dynamic shared memory (what `.extern .shared .align 16` gives on the GPU).
pub(crate) const DYNAMIC_ALIGN: usize = 16;

/// A zeroed heap block that kernel threads access through raw pointers only (the virtual
/// GPU never forms references to its contents).
pub(crate) struct SharedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl SharedBuf {
    /// A zeroed block of `layout`; a zero-sized layout gets a dangling, aligned pointer.
    pub(crate) fn zeroed(layout: Layout) -> Self {
        let ptr = if layout.size() == 0 {
            // A non-null address aligned to `layout.align()`, never dereferenced for more
            // than zero bytes.
            NonNull::new(layout.align() as *mut u8).unwrap_or(NonNull::dangling())
        } else {
            // SAFETY: the layout has a non-zero size.
            let raw = unsafe { alloc::alloc_zeroed(layout) };
            match NonNull::new(raw) {
                Some(p) => p,
                None => alloc::handle_alloc_error(layout),
            }
        };
        SharedBuf { ptr, layout }
    }

    /// Base address.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for SharedBuf {
    fn drop(&mut self) {
        if self.layout.size() != 0 {
            // SAFETY: allocated in `zeroed` with exactly this layout, freed once.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
        }
    }
}

/// The shared memory of one CTA.
pub(crate) struct CtaSharedMemory {
    dynamic: SharedBuf,
    statics: RefCell<Vec<StaticVar>>,
}

struct StaticVar {
    key: usize,
    buf: SharedBuf,
}

impl CtaSharedMemory {
    /// `dynamic_size` zeroed bytes of dynamic shared memory and no static variables yet;
    /// `None` when the size is too large for any allocation.
    pub(crate) fn new(dynamic_size: usize) -> Option<Self> {
        let layout = Layout::from_size_align(dynamic_size, DYNAMIC_ALIGN).ok()?;
        Some(CtaSharedMemory {
            dynamic: SharedBuf::zeroed(layout),
            statics: RefCell::new(Vec::new()),
        })
    }

    /// Base and size of the dynamic shared memory.
    pub(crate) fn dynamic(&self) -> (*mut u8, usize) {
        (self.dynamic.ptr(), self.dynamic.len())
    }

    /// This CTA's instance of the static variable `key`, allocated zeroed on first use.
    /// Errors (a message for the kernel panic) when `size`/`align` is not a valid layout
    /// or differs from the first use of the same key.
    pub(crate) fn static_var(&self, key: *const u8, size: usize, align: usize) -> Result<*mut u8, String> {
        let layout = Layout::from_size_align(size, align)
            .map_err(|_| format!("static shared variable {key:p}: invalid layout (size {size}, align {align})"))?;
        let mut statics = self.statics.borrow_mut();
        if let Some(var) = statics.iter().find(|v| v.key == key as usize) {
            if var.buf.layout != layout {
                return Err(format!(
                    "static shared variable {key:p} used with size {size}, align {align} after size {}, align {}",
                    var.buf.layout.size(),
                    var.buf.layout.align()
                ));
            }
            return Ok(var.buf.ptr());
        }
        let buf = SharedBuf::zeroed(layout);
        let ptr = buf.ptr();
        statics.push(StaticVar { key: key as usize, buf });
        Ok(ptr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_is_zeroed_and_aligned() {
        let m = CtaSharedMemory::new(100).expect("small size");
        let (p, n) = m.dynamic();
        assert_eq!(n, 100);
        assert_eq!(p as usize % DYNAMIC_ALIGN, 0);
        // SAFETY: p points to 100 initialised (zeroed) bytes owned by `m`.
        let bytes = unsafe { std::slice::from_raw_parts(p, n) };
        assert!(bytes.iter().all(|&b| b == 0));
        let empty = CtaSharedMemory::new(0).expect("small size");
        assert_eq!(empty.dynamic().0 as usize % DYNAMIC_ALIGN, 0);
    }

    #[test]
    fn statics_are_per_key_and_checked() {
        static A: u8 = 0;
        static B: u8 = 0;
        let m = CtaSharedMemory::new(0).expect("small size");
        let a = m.static_var(&A, 64, 8).expect("valid layout");
        assert_eq!(m.static_var(&A, 64, 8), Ok(a));
        let b = m.static_var(&B, 4, 4).expect("valid layout");
        assert_ne!(a, b);
        assert_eq!(a as usize % 8, 0);
        assert!(m.static_var(&A, 32, 8).is_err());
        assert!(m.static_var(&B, 4, 3).is_err());
    }
}
