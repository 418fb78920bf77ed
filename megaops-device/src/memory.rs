//! Vector loads and stores of global memory, L2 prefetch, and `cp.async` copies from global
//! to shared memory with commit/wait groups.
//!
//! # Alignment
//!
//! A `v4` access moves 16 bytes and needs a 16-byte aligned address, a `v2` access 8 bytes
//! and 8-byte alignment; `cp.async` of N bytes needs both addresses N-aligned. A misaligned
//! address is a fault on the GPU ("misaligned address"); the host implementation checks
//! alignment and traps with the same message, so the CPU backend catches the bug too.
//!
//! # Cache operators
//!
//! - plain (`ld.global.v4.u32`): cached in L1 and L2;
//! - `.nc` (`ld.global.nc.v4.u32`): the read-only (texture) path; only for data that no
//!   thread writes while the kernel runs;
//! - `.cg` (`ld.global.cg.v4.u32`): L2 only, bypassing L1.
//!
//! # Reading data another kernel produced
//!
//! Plain loads are correct for a synchronised input after its wait; `.cg` is not needed
//! for correctness (it remains a cache-policy choice, e.g. to keep streamed data out of
//! L1). By the PTX memory model (PTX ISA, "Memory Consistency Model"): the producer's
//! stores precede its `fence.acq_rel.gpu` + `red.relaxed.gpu` (a release pattern), the
//! consumer thread's `ld.relaxed.gpu` that observes the signal followed by its own
//! `fence.acq_rel.gpu` is an acquire pattern that synchronises with it, so the stores
//! *happen before* every later memory operation of that thread in program order — weak
//! (plain) loads included, since causality order covers all of them. The hardware keeps
//! that promise by invalidating the SM's L1 at a GPU-scope acquire, so a line pulled into
//! L1 before the wait cannot be read stale after it. This holds because the injected wait
//! is per thread (every thread that reads acquires itself) and is inline assembly with a
//! memory clobber, so the compiler cannot move the loads above it. It does **not** hold
//! for:
//! - `.nc` loads (the read-only path is not coherent with writes made while the kernel
//!   runs): never use them for a synchronised input;
//! - loads issued *before* the wait (a `#[prefetch]` statement, a value kept from an
//!   earlier read): only for data no kernel in flight writes;
//! - reads through the async proxy (`cp.async.bulk` / TMA) of data written through the
//!   generic proxy: they need `fence.proxy.async` after the acquire. (`cp.async` without
//!   `.bulk` is a generic-proxy access and is covered.)
//!
//! `examples/tests/memory_model.rs` (`gpu_plain_loads_after_the_acquire_never_read_stale_data`)
//! stress-tests exactly this on the GPU: every thread loads its element before the wait
//! (often the previous cycle's value) and again, plainly, after it.
//!
//! The pointers are generic pointers to global memory; the device code converts them with
//! `cvta.to.global.u64` (as CUDA does; `ptxas` folds it).
//!
//! # `cp.async`
//!
//! `cp_async_*` start an asynchronous copy; [`cp_async_commit_group`] closes the current
//! group; [`cp_async_wait_group::<N>`](cp_async_wait_group) waits until at most `N` groups
//! of this thread are pending; then a barrier makes the data visible to the other threads.
//! On the host the copy is done synchronously, and commit/wait do nothing.

use crate::shared::SharedPtr;

/// Traps (host) when `p` is not `align`-aligned, as the GPU would fault.
#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
fn check_align(p: usize, align: usize, what: &str) {
    if !p.is_multiple_of(align) {
        crate::cpu::hooks::trap(what);
    }
}

macro_rules! ld_global_v4 {
    ($(#[$doc:meta])* $name:ident, $cop:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `p` points to 16 readable bytes of global memory and is 16-byte aligned.
        #[inline(always)]
        pub unsafe fn $name(p: *const u32) -> [u32; 4] {
            #[cfg(target_arch = "nvptx64")]
            {
                let (x, y, z, w): (u32, u32, u32, u32);
                // SAFETY: the caller guarantees a valid, aligned global address.
                unsafe {
                    core::arch::asm!(
                        concat!("{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; ld.global", $cop,
                            ".v4.u32 {{{x}, {y}, {z}, {w}}}, [ga]; }}"),
                        x = out(reg32) x, y = out(reg32) y, z = out(reg32) z, w = out(reg32) w,
                        p = in(reg64) p, options(readonly, nostack),
                    );
                }
                [x, y, z, w]
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                check_align(p as usize, 16, concat!(stringify!($name), ": misaligned address (needs 16 bytes)"));
                crate::cpu::hooks::check_read(p.cast(), 16);
                // SAFETY: the caller guarantees 16 valid bytes; alignment checked above.
                unsafe { p.cast::<[u32; 4]>().read() }
            }
        }
    };
}

ld_global_v4!(
    /// Loads 16 bytes (cached in L1 and L2). Emits `ld.global.v4.u32`.
    ld_global_v4_u32, ""
);
ld_global_v4!(
    /// Loads 16 bytes through the read-only path. Emits `ld.global.nc.v4.u32`.
    ///
    /// Only for data no thread writes while the kernel runs.
    ld_global_nc_v4_u32, ".nc"
);
ld_global_v4!(
    /// Loads 16 bytes from L2, bypassing L1. Emits `ld.global.cg.v4.u32`.
    ///
    /// A cache-policy choice: after the acquire that synchronises with a producer, plain
    /// loads are as correct (see the module docs).
    ld_global_cg_v4_u32, ".cg"
);

macro_rules! ld_global_v2 {
    ($(#[$doc:meta])* $name:ident, $cop:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `p` points to 8 readable bytes of global memory and is 8-byte aligned.
        #[inline(always)]
        pub unsafe fn $name(p: *const u32) -> [u32; 2] {
            #[cfg(target_arch = "nvptx64")]
            {
                let (x, y): (u32, u32);
                // SAFETY: the caller guarantees a valid, aligned global address.
                unsafe {
                    core::arch::asm!(
                        concat!("{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; ld.global", $cop,
                            ".v2.u32 {{{x}, {y}}}, [ga]; }}"),
                        x = out(reg32) x, y = out(reg32) y, p = in(reg64) p, options(readonly, nostack),
                    );
                }
                [x, y]
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                check_align(p as usize, 8, concat!(stringify!($name), ": misaligned address (needs 8 bytes)"));
                crate::cpu::hooks::check_read(p.cast(), 8);
                // SAFETY: the caller guarantees 8 valid bytes; alignment checked above.
                unsafe { p.cast::<[u32; 2]>().read() }
            }
        }
    };
}

ld_global_v2!(
    /// Loads 8 bytes (cached in L1 and L2). Emits `ld.global.v2.u32`.
    ld_global_v2_u32, ""
);
ld_global_v2!(
    /// Loads 8 bytes through the read-only path. Emits `ld.global.nc.v2.u32`.
    ld_global_nc_v2_u32, ".nc"
);
ld_global_v2!(
    /// Loads 8 bytes from L2, bypassing L1. Emits `ld.global.cg.v2.u32`.
    ld_global_cg_v2_u32, ".cg"
);

/// Stores 16 bytes. Emits `st.global.v4.u32`.
///
/// # Safety
/// `p` points to 16 writable bytes of global memory and is 16-byte aligned.
#[inline(always)]
pub unsafe fn st_global_v4_u32(p: *mut u32, v: [u32; 4]) {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: the caller guarantees a valid, aligned global address.
        unsafe {
            core::arch::asm!(
                "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; st.global.v4.u32 [ga], {{{x}, {y}, {z}, {w}}}; }}",
                x = in(reg32) v[0], y = in(reg32) v[1], z = in(reg32) v[2], w = in(reg32) v[3],
                p = in(reg64) p, options(nostack),
            );
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        check_align(p as usize, 16, "st_global_v4_u32: misaligned address (needs 16 bytes)");
        // SAFETY: the caller guarantees 16 valid bytes; alignment checked above.
        unsafe { p.cast::<[u32; 4]>().write(v) }
    }
}

/// Stores 8 bytes. Emits `st.global.v2.u32`.
///
/// # Safety
/// `p` points to 8 writable bytes of global memory and is 8-byte aligned.
#[inline(always)]
pub unsafe fn st_global_v2_u32(p: *mut u32, v: [u32; 2]) {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: the caller guarantees a valid, aligned global address.
        unsafe {
            core::arch::asm!(
                "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; st.global.v2.u32 [ga], {{{x}, {y}}}; }}",
                x = in(reg32) v[0], y = in(reg32) v[1], p = in(reg64) p, options(nostack),
            );
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        check_align(p as usize, 8, "st_global_v2_u32: misaligned address (needs 8 bytes)");
        // SAFETY: the caller guarantees 8 valid bytes; alignment checked above.
        unsafe { p.cast::<[u32; 2]>().write(v) }
    }
}

/// Loads 16 bytes as four `f32` ([`ld_global_v4_u32`] with a bit cast).
///
/// # Safety
/// As for [`ld_global_v4_u32`].
#[inline(always)]
pub unsafe fn ld_global_v4_f32(p: *const f32) -> [f32; 4] {
    // SAFETY: forwarded from the caller.
    unsafe { ld_global_v4_u32(p.cast()) }.map(f32::from_bits)
}

/// Stores four `f32` as 16 bytes ([`st_global_v4_u32`] with a bit cast).
///
/// # Safety
/// As for [`st_global_v4_u32`].
#[inline(always)]
pub unsafe fn st_global_v4_f32(p: *mut f32, v: [f32; 4]) {
    // SAFETY: forwarded from the caller.
    unsafe { st_global_v4_u32(p.cast(), v.map(f32::to_bits)) }
}

/// Hints that the line holding `p` will be read soon: fetches it into L2.
///
/// Emits `prefetch.global.L2 [p];`. Host: nothing.
///
/// # Safety
/// `p` is a global-memory address (prefetching does not fault, but a pointer into
/// another state space is undefined behaviour in PTX).
#[inline(always)]
pub unsafe fn prefetch_l2<T>(p: *const T) {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: a cache hint on a global address (caller's contract).
        unsafe {
            core::arch::asm!(
                "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; prefetch.global.L2 [ga]; }}",
                p = in(reg64) p, options(readonly, nostack),
            );
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = p;
    }
}

macro_rules! cp_async {
    ($(#[$doc:meta])* $name:ident, $cop:literal, $n:literal) => {
        $(#[$doc])*
        #[doc = concat!("\n\nEmits `cp.async.", $cop, ".shared.global [dst], [src], ", $n,
            ";`. Host: a synchronous copy.")]
        ///
        /// # Safety
        #[doc = concat!("`dst` is ", $n, " bytes of the CTA's shared memory and `src` ", $n,
            " readable bytes of global memory, both ", $n, "-byte aligned; nobody touches `dst` until a ",
            "[`cp_async_wait_group`] / [`cp_async_wait_all`] covering this copy has returned.")]
        #[inline(always)]
        pub unsafe fn $name(dst: SharedPtr<u8>, src: *const u8) {
            #[cfg(target_arch = "nvptx64")]
            {
                // SAFETY: the caller guarantees valid, aligned addresses.
                unsafe {
                    core::arch::asm!(
                        concat!("{{ .reg .b64 ga; cvta.to.global.u64 ga, {s}; cp.async.", $cop,
                            ".shared.global [{d}], [ga], ", $n, "; }}"),
                        d = in(reg32) dst.addr(), s = in(reg64) src, options(nostack),
                    );
                }
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                check_align(src as usize, $n, concat!(stringify!($name), ": misaligned source address"));
                check_align(dst.as_ptr() as usize, $n, concat!(stringify!($name), ": misaligned shared address"));
                crate::cpu::hooks::check_read(src, $n);
                // SAFETY: the caller guarantees both ranges; they do not overlap (different
                // state spaces).
                unsafe { core::ptr::copy_nonoverlapping(src, dst.as_ptr(), $n) }
            }
        }
    };
}

cp_async!(
    /// Copies 16 bytes from global to shared memory asynchronously, caching in L2 only.
    cp_async_cg_16, "cg", 16
);
cp_async!(
    /// Copies 16 bytes from global to shared memory asynchronously, caching in L1 and L2.
    cp_async_ca_16, "ca", 16
);
cp_async!(
    /// Copies 8 bytes from global to shared memory asynchronously (L1 and L2).
    cp_async_ca_8, "ca", 8
);
cp_async!(
    /// Copies 4 bytes from global to shared memory asynchronously (L1 and L2).
    cp_async_ca_4, "ca", 4
);

/// Copies the first `src_size` (0..=16) of 16 bytes from global to shared memory
/// asynchronously and fills the rest of the 16 destination bytes with zeros: loads edge
/// tiles without reading past the end of a tensor (`src_size = 0` reads nothing).
///
/// Emits `cp.async.cg.shared.global [dst], [src], 16, src_size;`. Host: a synchronous copy
/// of `src_size` bytes and a zero fill.
///
/// # Safety
/// As for [`cp_async_cg_16`], except that only `src_size` bytes of `src` need to be
/// readable (`src` must still be 16-byte aligned); `src_size <= 16`.
#[inline(always)]
pub unsafe fn cp_async_cg_16_zfill(dst: SharedPtr<u8>, src: *const u8, src_size: u32) {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: the caller guarantees valid, aligned addresses and `src_size <= 16`.
        unsafe {
            core::arch::asm!(
                "{{ .reg .b64 ga; cvta.to.global.u64 ga, {s}; cp.async.cg.shared.global [{d}], [ga], 16, {n}; }}",
                d = in(reg32) dst.addr(), s = in(reg64) src, n = in(reg32) src_size, options(nostack),
            );
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        check_align(src as usize, 16, "cp_async_cg_16_zfill: misaligned source address");
        check_align(
            dst.as_ptr() as usize,
            16,
            "cp_async_cg_16_zfill: misaligned shared address",
        );
        if src_size > 16 {
            crate::cpu::hooks::trap("cp_async_cg_16_zfill: src_size > 16");
        }
        let n = src_size as usize;
        crate::cpu::hooks::check_read(src, n);
        // SAFETY: the caller guarantees `n` readable source bytes and 16 writable
        // destination bytes.
        unsafe {
            core::ptr::copy_nonoverlapping(src, dst.as_ptr(), n);
            core::ptr::write_bytes(dst.as_ptr().add(n), 0, 16 - n);
        }
    }
}

/// Closes the group of this thread's `cp.async` copies issued since the last commit.
///
/// Emits `cp.async.commit_group;`. Host: nothing (copies are synchronous).
#[inline(always)]
pub fn cp_async_commit_group() {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: bookkeeping of this thread's asynchronous copies.
        unsafe { core::arch::asm!("cp.async.commit_group;", options(nostack)) }
    }
}

/// Waits until at most `N` of this thread's committed `cp.async` groups are pending (so
/// with `N = stages - 1` the oldest stage has landed). Other threads see the data after a
/// barrier.
///
/// Emits `cp.async.wait_group N;`. Host: nothing.
#[inline(always)]
pub fn cp_async_wait_group<const N: u32>() {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: waits for this thread's asynchronous copies; a memory clobber, so no
        // shared-memory read is moved above it.
        unsafe { core::arch::asm!("cp.async.wait_group {n};", n = const N, options(nostack)) }
    }
}

/// Waits until all of this thread's `cp.async` copies have completed.
///
/// Emits `cp.async.wait_all;`. Host: nothing.
#[inline(always)]
pub fn cp_async_wait_all() {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: as for `cp_async_wait_group`.
        unsafe { core::arch::asm!("cp.async.wait_all;", options(nostack)) }
    }
}
