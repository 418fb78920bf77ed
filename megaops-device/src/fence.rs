//! Memory fences.
//!
//! `fence(AcqRel, Gpu)` is the light-weight fence the MegaOps signal uses before its
//! release reduction; `fence(Sc, Gpu)` restores sequential consistency and is what CUDA's
//! `__threadfence()` is: CUDA emits `membar.gl`, which on sm_70 and later is a synonym of
//! `fence.sc.gpu` (PTX ISA, "membar/fence": *"On sm_70 and higher membar is a synonym for
//! fence.sc, and the membar levels cta, gl and sys are synonymous with the fence scopes
//! cta, gpu and sys"*).

pub use crate::atomic::ordering::{AcqRel, Cta, FenceOrdering, Gpu, Sc, Scope, Sys};

/// A fence with ordering `O` (`AcqRel` or `Sc`) at scope `S` (`Cta`, `Gpu` or `Sys`).
///
/// Emits `fence.{acq_rel|sc}.{cta|gpu|sys};`. Host: `core::sync::atomic::fence` with
/// `AcqRel` / `SeqCst`.
#[inline(always)]
pub fn fence<O: FenceOrdering, S: Scope>(_order: O, _scope: S) {
    #[cfg(target_arch = "nvptx64")]
    {
        // The markers are constants: this match folds to the one instruction.
        match (O::SC, S::LEVEL) {
            // SAFETY (all arms): a fence only constrains memory ordering.
            (false, 0) => unsafe { core::arch::asm!("fence.acq_rel.cta;", options(nostack)) },
            (false, 1) => unsafe { core::arch::asm!("fence.acq_rel.gpu;", options(nostack)) },
            (false, _) => unsafe { core::arch::asm!("fence.acq_rel.sys;", options(nostack)) },
            (true, 0) => unsafe { core::arch::asm!("fence.sc.cta;", options(nostack)) },
            (true, 1) => unsafe { core::arch::asm!("fence.sc.gpu;", options(nostack)) },
            (true, _) => unsafe { core::arch::asm!("fence.sc.sys;", options(nostack)) },
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        core::sync::atomic::fence(O::HOST)
    }
}

/// CUDA's `__threadfence()`: `fence.sc.gpu;` (see the module docs).
#[inline(always)]
pub fn threadfence() {
    fence(Sc, Gpu)
}

/// CUDA's `__threadfence_block()`: `fence.sc.cta;`.
#[inline(always)]
pub fn threadfence_block() {
    fence(Sc, Cta)
}

/// CUDA's `__threadfence_system()`: `fence.sc.sys;`.
#[inline(always)]
pub fn threadfence_system() {
    fence(Sc, Sys)
}

/// Orders this thread's earlier generic-proxy accesses to shared memory (ordinary
/// `st.shared`) before later async-proxy accesses (`cp.async.bulk`/TMA, `wgmma` reading
/// shared memory), and vice versa.
///
/// Emits `fence.proxy.async.shared::cta;` on sm_90 and later. Earlier architectures have
/// no async proxy, so there it emits nothing. Host: a compiler fence (the CPU backend has
/// one proxy).
#[inline(always)]
pub fn fence_proxy_async_shared_cta() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90"))]
    {
        // SAFETY: a fence only constrains memory ordering.
        unsafe { core::arch::asm!("fence.proxy.async.shared::cta;", options(nostack)) }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst)
    }
}
