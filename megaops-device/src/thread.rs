//! Thread, block and grid indices, lane and warp ids, and CTA barriers.
//!
//! Names follow `cuda_std::thread`. On `nvptx64` the indices read the PTX special
//! registers (`%tid`, `%ctaid`, `%ntid`, `%nctaid`, `%laneid`) through
//! `core::arch::nvptx`; on the host they ask the running virtual GPU through
//! [`crate::cpu::hooks`].
//!
//! # Barriers and convergence
//!
//! [`sync_threads`] uses `core::arch::nvptx::_syncthreads` (`llvm.nvvm.barrier0`), which
//! LLVM knows to be *convergent*. The other barriers are inline PTX, which this rustc does
//! not mark convergent, so an optimisation could in principle duplicate one into two
//! divergent paths. They therefore use the *non-aligned* `barrier.sync` / `barrier.red`
//! forms, which stay correct even when different threads of a warp reach the barrier at
//! different instructions (same cost on sm_70+). All barriers must still be reached by
//! every thread that the barrier counts, as in CUDA.

use crate::Dim3;
#[cfg(not(target_arch = "nvptx64"))]
use crate::cpu::hooks;

/// Number of threads in a warp.
pub const WARP_SIZE: u32 = 32;

macro_rules! special_register {
    ($(#[$doc:meta])* $name:ident, $intrinsic:ident, $reg:literal, $hook:ident . $field:ident) => {
        $(#[$doc])*
        #[doc = concat!("\n\nReads `", $reg, "` (`mov.u32 %r, ", $reg, ";`).")]
        #[inline(always)]
        pub fn $name() -> u32 {
            #[cfg(target_arch = "nvptx64")]
            {
                // SAFETY: reading a special register has no preconditions.
                unsafe { core::arch::nvptx::$intrinsic() as u32 }
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                hooks::$hook().$field
            }
        }
    };
}

special_register!(
    /// x component of the thread index within the CTA.
    thread_idx_x, _thread_idx_x, "%tid.x", thread_idx.x
);
special_register!(
    /// y component of the thread index within the CTA.
    thread_idx_y, _thread_idx_y, "%tid.y", thread_idx.y
);
special_register!(
    /// z component of the thread index within the CTA.
    thread_idx_z, _thread_idx_z, "%tid.z", thread_idx.z
);
special_register!(
    /// x component of the CTA index within the grid.
    block_idx_x, _block_idx_x, "%ctaid.x", block_idx.x
);
special_register!(
    /// y component of the CTA index within the grid.
    block_idx_y, _block_idx_y, "%ctaid.y", block_idx.y
);
special_register!(
    /// z component of the CTA index within the grid.
    block_idx_z, _block_idx_z, "%ctaid.z", block_idx.z
);
special_register!(
    /// x component of the CTA size (threads per block).
    block_dim_x, _block_dim_x, "%ntid.x", block_dim.x
);
special_register!(
    /// y component of the CTA size.
    block_dim_y, _block_dim_y, "%ntid.y", block_dim.y
);
special_register!(
    /// z component of the CTA size.
    block_dim_z, _block_dim_z, "%ntid.z", block_dim.z
);
special_register!(
    /// x component of the grid size (CTAs per grid).
    grid_dim_x, _grid_dim_x, "%nctaid.x", grid_dim.x
);
special_register!(
    /// y component of the grid size.
    grid_dim_y, _grid_dim_y, "%nctaid.y", grid_dim.y
);
special_register!(
    /// z component of the grid size.
    grid_dim_z, _grid_dim_z, "%nctaid.z", grid_dim.z
);

/// Thread index within the CTA (`%tid`).
#[inline(always)]
pub fn thread_idx() -> Dim3 {
    #[cfg(target_arch = "nvptx64")]
    {
        Dim3::new(thread_idx_x(), thread_idx_y(), thread_idx_z())
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        hooks::thread_idx()
    }
}

/// CTA index within the grid (`%ctaid`).
#[inline(always)]
pub fn block_idx() -> Dim3 {
    #[cfg(target_arch = "nvptx64")]
    {
        Dim3::new(block_idx_x(), block_idx_y(), block_idx_z())
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        hooks::block_idx()
    }
}

/// CTA size (`%ntid`).
#[inline(always)]
pub fn block_dim() -> Dim3 {
    #[cfg(target_arch = "nvptx64")]
    {
        Dim3::new(block_dim_x(), block_dim_y(), block_dim_z())
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        hooks::block_dim()
    }
}

/// Grid size in CTAs (`%nctaid`).
#[inline(always)]
pub fn grid_dim() -> Dim3 {
    #[cfg(target_arch = "nvptx64")]
    {
        Dim3::new(grid_dim_x(), grid_dim_y(), grid_dim_z())
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        hooks::grid_dim()
    }
}

/// Linear thread index within the CTA: `x + y * ntid.x + z * ntid.x * ntid.y`, the order
/// in which threads are grouped into warps.
#[inline(always)]
pub fn linear_thread_idx() -> u32 {
    let (t, n) = (thread_idx(), block_dim());
    linear_index(t, n)
}

/// `x + y * n.x + z * n.x * n.y`: the linear position of `t` in a box of size `n`
/// (pure helper of [`linear_thread_idx`]).
#[inline(always)]
pub const fn linear_index(t: Dim3, n: Dim3) -> u32 {
    t.x + n.x * (t.y + n.y * t.z)
}

/// Linear CTA index within the grid: `x + y * nctaid.x + z * nctaid.x * nctaid.y`.
#[inline(always)]
pub fn linear_block_idx() -> u32 {
    linear_index(block_idx(), grid_dim())
}

/// Lane of the calling thread within its warp (0..32).
///
/// Reads `%laneid` (`mov.u32 %r, %laneid;`). Host: `linear_thread_idx() % 32`.
#[inline(always)]
pub fn lane_id() -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let lane: u32;
        // SAFETY: reading a special register has no preconditions.
        unsafe {
            core::arch::asm!("mov.u32 {l}, %laneid;", l = out(reg32) lane, options(pure, nomem, nostack));
        }
        lane
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        linear_thread_idx() % WARP_SIZE
    }
}

/// The SM the calling thread's CTA runs on.
///
/// Reads `%smid` (`mov.u32 %r, %smid;`; volatile: a CTA may in principle migrate, so
/// every call reads it anew). Host: the virtual SM (`hooks::sm_id()`).
#[inline(always)]
pub fn sm_id() -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let sm: u32;
        // SAFETY: reading a special register has no preconditions.
        unsafe {
            core::arch::asm!("mov.u32 {s}, %smid;", s = out(reg32) sm, options(nomem, nostack));
        }
        sm
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        hooks::sm_id()
    }
}

/// Warp of the calling thread within its CTA: `linear_thread_idx() / 32`.
///
/// This is the logical warp index (stable for the lifetime of the thread), not
/// `%warpid` (the hardware slot, which can change under preemption).
#[inline(always)]
pub fn warp_id() -> u32 {
    linear_thread_idx() / WARP_SIZE
}

/// Barrier 0 of the CTA, as CUDA's `__syncthreads()`: waits until every thread of the CTA
/// has arrived, and orders their shared and global memory accesses at CTA level.
///
/// Emits `bar.sync 0;` (`llvm.nvvm.barrier0`, convergent). Host: `hooks::barrier(0, None)`.
#[inline(always)]
pub fn sync_threads() {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: a CTA barrier; every thread of the CTA must reach it (documented contract).
        unsafe { core::arch::nvptx::_syncthreads() }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        hooks::barrier(0, None)
    }
}

/// Named barrier `id` (0..16) for `threads` threads (a multiple of 32): waits until
/// `threads` threads have arrived at barrier `id`. Lets groups of warps synchronise
/// without stopping the whole CTA (e.g. producer and consumer warps).
///
/// Emits `barrier.sync id, threads;` (the non-aligned form of `bar.sync id, threads;`, see
/// the module docs). Host: `hooks::barrier(id, Some(threads))`.
#[inline(always)]
pub fn barrier_sync(id: u32, threads: u32) {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: a named barrier; the caller keeps the thread count consistent, as CUDA
        // requires. No memory is touched other than by the ordering the barrier implies.
        unsafe {
            core::arch::asm!("barrier.sync {id}, {n};", id = in(reg32) id, n = in(reg32) threads, options(nostack));
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        hooks::barrier(id, Some(threads))
    }
}

/// Barrier 0 of the CTA that also counts the threads whose `pred` is true, as CUDA's
/// `__syncthreads_count`.
///
/// Emits `barrier.red.popc.u32 d, 0, p;`. Host: `hooks::barrier_reduce(pred).count`.
#[inline(always)]
pub fn sync_threads_count(pred: bool) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let count: u32;
        // SAFETY: a CTA barrier with a reduction; every thread of the CTA must reach it.
        unsafe {
            core::arch::asm!(
                "{{ .reg .pred p; setp.ne.u32 p, {pred}, 0; barrier.red.popc.u32 {d}, 0, p; }}",
                d = out(reg32) count,
                pred = in(reg32) pred as u32,
                options(nostack),
            );
        }
        count
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        hooks::barrier_reduce(pred).count
    }
}

/// Barrier 0 of the CTA that returns whether `pred` is true in every thread, as CUDA's
/// `__syncthreads_and`.
///
/// Emits `barrier.red.and.pred q, 0, p;`. Host: `hooks::barrier_reduce(pred).all`.
#[inline(always)]
pub fn sync_threads_and(pred: bool) -> bool {
    #[cfg(target_arch = "nvptx64")]
    {
        let all: u32;
        // SAFETY: a CTA barrier with a reduction; every thread of the CTA must reach it.
        unsafe {
            core::arch::asm!(
                "{{ .reg .pred p, q; setp.ne.u32 p, {pred}, 0; barrier.red.and.pred q, 0, p; selp.u32 {d}, 1, 0, q; }}",
                d = out(reg32) all,
                pred = in(reg32) pred as u32,
                options(nostack),
            );
        }
        all != 0
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        hooks::barrier_reduce(pred).all
    }
}

/// Barrier 0 of the CTA that returns whether `pred` is true in some thread, as CUDA's
/// `__syncthreads_or`.
///
/// Emits `barrier.red.or.pred q, 0, p;`. Host: `hooks::barrier_reduce(pred).any`.
#[inline(always)]
pub fn sync_threads_or(pred: bool) -> bool {
    #[cfg(target_arch = "nvptx64")]
    {
        let any: u32;
        // SAFETY: a CTA barrier with a reduction; every thread of the CTA must reach it.
        unsafe {
            core::arch::asm!(
                "{{ .reg .pred p, q; setp.ne.u32 p, {pred}, 0; barrier.red.or.pred q, 0, p; selp.u32 {d}, 1, 0, q; }}",
                d = out(reg32) any,
                pred = in(reg32) pred as u32,
                options(nostack),
            );
        }
        any != 0
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        hooks::barrier_reduce(pred).any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_index_is_x_fastest() {
        let n = Dim3::new(8, 4, 2);
        assert_eq!(linear_index(Dim3::new(0, 0, 0), n), 0);
        assert_eq!(linear_index(Dim3::new(7, 0, 0), n), 7);
        assert_eq!(linear_index(Dim3::new(0, 1, 0), n), 8);
        assert_eq!(linear_index(Dim3::new(3, 2, 1), n), 3 + 2 * 8 + 32);
        assert_eq!(linear_index(Dim3::new(7, 3, 1), n), n.volume() as u32 - 1);
    }
}
