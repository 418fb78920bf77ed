//! Tile traces: what `#[megaops::kernel]` records per kernel tile when the launch's
//! [`KernelCtx::trace`] is set (off by default). Each config has two PTX entries: the
//! plain one contains none of these calls, the `__traced` one that a traced launch runs
//! contains them (and each call also tests `ctx.trace`, so a traced entry launched
//! without a log records nothing).
//!
//! Per kernel tile the traced body calls [`trace_now`] at the tile's start,
//! [`trace_waited`] after each input wait that succeeded, [`trace_end`] once every thread
//! finished the tile (before the output signals, so that a consumer's wait always ends
//! after the end its producer recorded) and [`trace_record`] after the signals. Thread 0
//! of the CTA writes one [`TileTrace`] into the launch's [`TraceLog`]; records past the
//! log's capacity are counted, not written. Times are `%globaltimer` nanoseconds on the
//! GPU and the virtual clock on the CPU backend (deterministic per seed).

use super::args::{KernelCtx, TileTrace, TraceLog};

/// Built with `MEGAOPS_TRACE_OFF` set in the environment: every trace call compiles to
/// nothing and traced launches record no tile (to measure what the calls cost when off).
pub const TRACE_COMPILED_OUT: bool = option_env!("MEGAOPS_TRACE_OFF").is_some();
use crate::atomic::{self, Gpu, Relaxed};
use crate::thread::{block_idx_x, linear_thread_idx, sm_id, sync_threads};

/// The trace clock if this launch is traced, else 0.
///
/// Emits, when `ctx.trace` is non-null, `mov.u64 %rd, %globaltimer;`. Host: the virtual
/// clock without a scheduling point.
#[inline(always)]
pub fn trace_now(ctx: &KernelCtx) -> u64 {
    if TRACE_COMPILED_OUT || ctx.trace.is_null() {
        return 0;
    }
    clock()
}

/// After an input wait that succeeded: the wait-end time `waited` becomes now (a tile
/// with several inputs keeps the last wait's end). No-op when the launch is not traced.
#[inline(always)]
pub fn trace_waited(ctx: &KernelCtx, waited: &mut u64) {
    if !TRACE_COMPILED_OUT && !ctx.trace.is_null() {
        *waited = clock();
    }
}

/// The tile's end: when traced, a CTA barrier (`bar.sync 0`: every thread finished the
/// tile) and thread 0's clock; else 0 and no barrier. Every thread of the CTA must call
/// it (the generated body does, after the tile's statements).
#[inline(always)]
pub fn trace_end(ctx: &KernelCtx) -> u64 {
    if TRACE_COMPILED_OUT || ctx.trace.is_null() {
        return 0;
    }
    sync_threads();
    clock()
}

/// Thread 0 appends the tile's record to the launch's log: one
/// `atom.relaxed.gpu.add.u32` on the log's head, then plain stores of the record if the
/// slot is below the capacity. `waited == 0` (no wait ran on thread 0) records the start.
///
/// # Safety
/// `ctx.trace` is null or a valid [`TraceLog`] whose `records` hold `capacity` entries.
#[inline(always)]
pub unsafe fn trace_record(ctx: &KernelCtx, tile: u32, start: u64, waited: u64, end: u64) {
    if TRACE_COMPILED_OUT || ctx.trace.is_null() || linear_thread_idx() != 0 {
        return;
    }
    let log: *mut TraceLog = ctx.trace;
    // SAFETY: a valid log (caller's contract); `head` is only changed atomically.
    unsafe {
        let slot = atomic::add(core::ptr::addr_of_mut!((*log).head), 1u32, Relaxed, Gpu);
        if slot < (*log).capacity {
            (*log).records.add(slot as usize).write(TileTrace {
                start_ns: start,
                waited_ns: if waited == 0 { start } else { waited },
                end_ns: end,
                launch_id: ctx.launch_id,
                tile,
                sm: sm_id(),
                cta: block_idx_x(),
            });
        }
    }
}

#[inline(always)]
fn clock() -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        crate::time::global_timer()
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        crate::cpu::hooks::clock_ns()
    }
}
