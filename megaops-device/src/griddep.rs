//! Programmatic dependent launch (sm_90 and later): a kernel launched with programmatic
//! stream serialization may start before the kernel before it on its stream has ended.
//!
//! - [`launch_dependents`]: this CTA lets the launch that depends on its grid start; the
//!   dependent starts once every CTA of the grid has called it or ended.
//! - [`wait_prerequisite_grids`]: the calling thread waits until the grids its launch
//!   depends on have ended and their memory operations are visible to it.
//!
//! A kernel launched programmatically must call [`wait_prerequisite_grids`] in every
//! thread before it touches memory that stream order protects. A launch that was not made
//! programmatically has no prerequisite in flight: the wait returns at once and
//! [`launch_dependents`] has no effect. Below sm_90 (and on the CPU backend, where
//! launches on a stream run one after the other) both do nothing.

/// Lets the launch that depends on this grid programmatically start once every CTA of the
/// grid has called this or ended; a second call from the same CTA changes nothing.
///
/// Emits `griddepcontrol.launch_dependents;` on sm_90 and later; nothing below or on the
/// host.
#[inline(always)]
pub fn launch_dependents() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90"))]
    // SAFETY: only tells the scheduler that dependents may start; no memory effect.
    unsafe {
        core::arch::asm!("griddepcontrol.launch_dependents;", options(nostack))
    }
}

/// Waits until every grid this launch depends on programmatically has ended and its
/// memory operations are visible to this thread (returns at once for a launch made
/// without programmatic stream serialization).
///
/// Emits `griddepcontrol.wait;` on sm_90 and later (a memory clobber: no load or store
/// moves across it); nothing below or on the host.
#[inline(always)]
pub fn wait_prerequisite_grids() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90"))]
    // SAFETY: a wait with acquire-like effect; the asm is not `nomem`, so the compiler
    // keeps memory accesses on their side of it.
    unsafe {
        core::arch::asm!("griddepcontrol.wait;", options(nostack))
    }
}
