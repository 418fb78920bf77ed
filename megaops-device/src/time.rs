//! Sleeping and clocks.

#[cfg(not(target_arch = "nvptx64"))]
use crate::cpu::hooks;

/// Suspends the calling thread for about `ns` nanoseconds (the hardware guarantees
/// `[0, 2 * ns]`, at most 1 ms). Use it as back-off in spin loops.
///
/// Emits `nanosleep.u32 ns;` (sm_70+). Host: `hooks::sleep()` (lets the other threads of
/// the virtual GPU run; the virtual clock is the scheduler's business).
#[inline(always)]
pub fn nanosleep(ns: u32) {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: sleeping has no memory effects; not `pure` so it is never removed.
        unsafe { core::arch::asm!("nanosleep.u32 {t};", t = in(reg32) ns, options(nomem, nostack)) }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = ns;
        hooks::sleep()
    }
}

/// Nanoseconds of the GPU's global timer, comparable across SMs (use it for timeouts).
///
/// Emits `mov.u64 %rd, %globaltimer;`. The value is updated every microsecond or so
/// (the resolution is hardware dependent). Host: `hooks::global_timer_ns()`.
#[inline(always)]
pub fn global_timer() -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        let t: u64;
        // SAFETY: reading a special register; not `pure`, so every call reads it anew.
        unsafe { core::arch::asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nomem, nostack)) }
        t
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        hooks::global_timer_ns()
    }
}

/// The SM's 64-bit cycle counter (not comparable across SMs).
///
/// Emits `mov.u64 %rd, %clock64;`. Host: `hooks::clock64()`.
#[inline(always)]
pub fn clock64() -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        let t: u64;
        // SAFETY: reading a special register; not `pure`, so every call reads it anew.
        unsafe { core::arch::asm!("mov.u64 {t}, %clock64;", t = out(reg64) t, options(nomem, nostack)) }
        t
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        hooks::clock64()
    }
}
