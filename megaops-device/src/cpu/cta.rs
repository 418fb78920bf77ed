//! A resident CTA: its threads, their states, its barriers, warp collectives and shared
//! memory.

use std::cell::Cell;
use std::rc::Rc;

use super::barrier::Barriers;
use super::shared::CtaSharedMemory;
use super::stack::StackPool;
use super::thread::{self, CurrentGuard, ThreadCoroutine, ThreadCtx};
use super::vgpu::KernelEntry;
use super::warp::Warps;
use crate::Dim3;
use crate::sync::WaitSite;

/// What the hooks of a CTA's threads read: indices, shared memory, the clock. Shared by
/// the CTA and its coroutines (each holds an `Rc`), so it outlives every suspended thread.
pub(crate) struct CtaInfo {
    pub(crate) block_idx: Dim3,
    pub(crate) block_dim: Dim3,
    pub(crate) grid_dim: Dim3,
    pub(crate) memory: CtaSharedMemory,
    pub(crate) threads: Box<[ThreadCtx]>,
    /// The virtual GPU's clock in virtual nanoseconds.
    pub(crate) clock: Rc<Cell<u64>>,
    /// Whether reads of synchronised inputs are checked ([`super::VgpuConfig::check_reads`]).
    pub(crate) check_reads: bool,
    /// The virtual SM it runs on (`%smid`).
    pub(crate) sm: u32,
}

/// Where a thread is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ThreadState {
    /// Runnable (not started yet, or yielded).
    Ready,
    /// At barrier `id`.
    Barrier(u32),
    /// In the warp collective of `mask`.
    Exchange(u32),
    /// Blocked until the semaphore reaches its target.
    Waiting(WaitSite),
    /// Returned from the entry.
    Exited,
}

/// One thread: its coroutine (created when it first runs) and its state.
pub(crate) struct ThreadSlot {
    pub(crate) co: Option<ThreadCoroutine>,
    pub(crate) state: ThreadState,
}

/// A CTA resident on an SM.
pub(crate) struct Cta {
    /// Launch number of its kernel.
    pub(crate) seq: u64,
    /// Linear block index.
    pub(crate) linear: u64,
    pub(crate) sm: u32,
    pub(crate) entry: KernelEntry,
    pub(crate) info: Rc<CtaInfo>,
    pub(crate) slots: Vec<ThreadSlot>,
    /// Threads that have not exited.
    pub(crate) live: u32,
    pub(crate) barriers: Barriers,
    pub(crate) warps: Warps,
    /// Threads to resume in the CTA's next sub-round.
    pub(crate) runnable: Vec<u32>,
    /// Buffer of the sub-round being run (kept to reuse its allocation).
    pub(crate) batch: Vec<u32>,
}

impl Cta {
    /// A CTA of block `linear` (in `grid`) whose threads are all ready; `None` when its
    /// shared memory cannot be allocated.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        seq: u64,
        linear: u64,
        sm: u32,
        grid: Dim3,
        block: Dim3,
        smem: usize,
        entry: KernelEntry,
        clock: Rc<Cell<u64>>,
        check_reads: bool,
    ) -> Option<Self> {
        let n = block.volume() as u32;
        let threads: Box<[ThreadCtx]> = (0..n as u64).map(|t| ThreadCtx::new(unlinear(t, block))).collect();
        let info = CtaInfo {
            block_idx: unlinear(linear, grid),
            block_dim: block,
            grid_dim: grid,
            memory: CtaSharedMemory::new(smem)?,
            threads,
            clock,
            check_reads,
            sm,
        };
        Some(Cta {
            seq,
            linear,
            sm,
            entry,
            info: Rc::new(info),
            slots: (0..n)
                .map(|_| ThreadSlot {
                    co: None,
                    state: ThreadState::Ready,
                })
                .collect(),
            live: n,
            barriers: Barriers::new(),
            warps: Warps::new(n),
            runnable: Vec::new(),
            batch: Vec::new(),
        })
    }

    /// Number of threads.
    pub(crate) fn size(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Unwinds every started, unfinished thread (running its destructors) and returns the
    /// stacks to `pool`; leaks those on a quarantined stack chunk instead.
    pub(crate) fn discard(&mut self, pool: &mut StackPool) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if let Some(co) = slot.co.take() {
                thread::discard(co, &self.info, i as u32, pool);
            }
            slot.state = ThreadState::Exited;
        }
    }
}

impl Drop for Cta {
    fn drop(&mut self) {
        // Normally every coroutine has been taken (finished or discarded through the
        // stack pool, which leaks those on a quarantined chunk) by now; unwind any left,
        // with the thread current, before its stack is freed.
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if let Some(mut co) = slot.co.take() {
                let _current = CurrentGuard::enter(&self.info, i as u32);
                co.force_unwind();
            }
        }
    }
}

/// The 3-D index of linear index `i` in `dim` (x fastest).
pub(crate) fn unlinear(i: u64, dim: Dim3) -> Dim3 {
    let x = dim.x.max(1) as u64;
    let y = dim.y.max(1) as u64;
    Dim3::new((i % x) as u32, ((i / x) % y) as u32, (i / (x * y)) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_indices_run_x_fastest() {
        let d = Dim3::new(4, 3, 2);
        assert_eq!(unlinear(0, d), Dim3::new(0, 0, 0));
        assert_eq!(unlinear(5, d), Dim3::new(1, 1, 0));
        assert_eq!(unlinear(23, d), Dim3::new(3, 2, 1));
    }
}
