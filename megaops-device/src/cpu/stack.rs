//! A pool of coroutine stacks.
//!
//! A thread gets its stack when it first runs and gives it back when it exits (or is
//! discarded), so the number of stacks ever allocated is bounded by the most threads
//! resident at once (`sms × max_threads_per_sm`), however many CTAs a run goes through.
//! Stacks are `mmap`ed with a guard page; only the pages a thread touches use memory.

use corosensei::stack::DefaultStack;

use super::CpuError;

/// Free stacks of one size.
pub(crate) struct StackPool {
    size: usize,
    free: Vec<DefaultStack>,
    allocated: u64,
}

impl StackPool {
    pub(crate) fn new(size: usize) -> Self {
        StackPool {
            size,
            free: Vec::new(),
            allocated: 0,
        }
    }

    /// A free stack, or a new one.
    pub(crate) fn take(&mut self) -> Result<DefaultStack, CpuError> {
        if let Some(s) = self.free.pop() {
            return Ok(s);
        }
        let s = DefaultStack::new(self.size).map_err(|e| {
            CpuError::Resource(format!(
                "cannot allocate a {} KiB coroutine stack after {} stacks: {e}",
                self.size / 1024,
                self.allocated
            ))
        })?;
        self.allocated += 1;
        Ok(s)
    }

    /// Returns a stack for reuse.
    pub(crate) fn put(&mut self, stack: DefaultStack) {
        self.free.push(stack);
    }

    /// Stacks allocated so far.
    pub(crate) fn allocated(&self) -> u64 {
        self.allocated
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_returned_stacks() {
        let mut pool = StackPool::new(64 * 1024);
        let a = pool.take().expect("stack");
        let b = pool.take().expect("stack");
        pool.put(a);
        pool.put(b);
        let _c = pool.take().expect("stack");
        assert_eq!(pool.allocated(), 2);
    }
}
