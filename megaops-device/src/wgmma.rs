//! Hopper warpgroup tensor-core MMA (`wgmma.mma_async`, sm_90a): a warpgroup of 4 warps
//! (128 threads) multiplies a 64×16 A tile by a 16×N B tile, both read from shared memory
//! through [`SmemMatrix`] descriptors, into f32 accumulators held in registers.
//!
//! # Operands
//!
//! Both operands are **K-major** 16-bit tiles with the **128-byte swizzle**: each row (an
//! `m` row of A, an `n` row of B) is 64 elements (128 bytes) of `k`; rows are 128 bytes
//! apart, groups of 8 rows 1024 bytes apart; within a group, 16-byte chunk `c` of row `r`
//! is stored at chunk `c ^ (r % 8)`. That is `gemm::tile::swizzle(r, c, 8)` of the kernel
//! library, so a `cp.async` copy that writes that swizzle fills a tile `wgmma` reads. The
//! hardware applies the XOR to absolute shared addresses: a tile must start 1024-byte
//! aligned. A k-step of 16 elements is the 32 bytes at offset `32·ks` of each row
//! ([`SmemMatrix::offset`]).
//!
//! # Accumulators
//!
//! `m64nNk16` gives each thread `N / 2` f32, as `[[f32; 4]; N / 8]`: warp `w` of the
//! warpgroup owns rows `16w..16w + 16`; entry `[j]` of lane `(g, t) = (lane / 4, lane % 4)`
//! holds rows `16w + g, 16w + g, 16w + g + 8, 16w + g + 8` × columns
//! `8j + 2t, 8j + 2t + 1, 8j + 2t, 8j + 2t + 1` — per warp, the C fragments of `N / 8`
//! `mma.sync.m16n8` tiles side by side.
//!
//! # Ordering
//!
//! `wgmma` is asynchronous: [`wgmma_fence`] before the first `wgmma` of a batch (after any
//! other access to the accumulators), then the `wgmma`s, [`wgmma_commit_group`], and
//! [`wgmma_wait_group`] before the accumulators are read or the operand tiles are
//! overwritten. Shared memory written by ordinary stores or `cp.async` must be made
//! visible to the async proxy first: [`crate::fence::fence_proxy_async_shared_cta`] by
//! the writing threads, then a barrier.
//!
//! # Targets
//!
//! The instructions exist on `sm_90a` only. Compiled for another nvptx architecture the
//! functions trap (callers select another path with `cfg!(target_feature = "sm_90a")`).
//! On the host ([`crate::cpu`]) each thread computes its own accumulators from the shared
//! memory at issue time (every product exact, the sum rounded once to f32), and the fences
//! and waits do nothing: shared operand tiles are not overwritten before a wait, so issue
//! time and completion see the same data.

use crate::shared::SharedPtr;

/// A shared-memory operand of [`wgmma`](self): a K-major 16-bit tile with the 128-byte
/// swizzle (module docs), at byte `offset` from a 1024-byte aligned tile start.
#[derive(Clone, Copy, Debug)]
pub struct SmemMatrix {
    tile: SharedPtr<u8>,
    offset: u32,
}

impl SmemMatrix {
    /// The operand at the start of the K-major, 128-byte swizzled tile `tile`.
    ///
    /// `tile` must be 1024-byte aligned (the swizzle works on absolute addresses); the
    /// host backend checks this when the operand is used.
    #[inline(always)]
    pub fn k_major_sw128(tile: SharedPtr<u8>) -> Self {
        SmemMatrix { tile, offset: 0 }
    }

    /// The same tile `bytes` further: `32·ks` selects k-step `ks` (0..4) of each 128-byte
    /// row, `1024·q` starts `8·q` rows further down.
    #[inline(always)]
    pub fn offset(self, bytes: u32) -> Self {
        SmemMatrix {
            tile: self.tile,
            offset: self.offset + bytes,
        }
    }

    /// The 64-bit matrix descriptor: start address `>> 4` (bits 0–13), leading byte
    /// offset 16 (unused by swizzled K-major operands, bits 16–29), stride byte offset
    /// 1024 between 8-row groups (bits 32–45), base offset 0, swizzle mode 1 = 128 bytes
    /// (bits 62–63).
    #[inline(always)]
    pub fn descriptor(self) -> u64 {
        let start = (self.tile.addr().wrapping_add(self.offset) & 0x3_ffff) >> 4;
        start as u64 | (1 << 16) | ((1024u64 >> 4) << 32) | (1 << 62)
    }

    /// Element `(row, k)` (`k < 16` of the current k-step) as raw bits: the host backend's
    /// view of what the hardware reads.
    ///
    /// # Safety
    /// The tile is readable shared memory covering `row`.
    #[cfg(not(target_arch = "nvptx64"))]
    unsafe fn element(self, row: u32, k: u32) -> u16 {
        let linear = self.offset + (row / 8) * 1024 + (row % 8) * 128 + 2 * k;
        let swizzled = linear ^ (((linear >> 7) & 7) << 4);
        // SAFETY: inside the tile (caller).
        unsafe { self.tile.byte_add(swizzled as usize).cast::<u16>().read() }
    }
}

/// Orders earlier register accesses to the accumulators before the following `wgmma`s.
///
/// Emits `wgmma.fence.sync.aligned;` (sm_90a). Host: nothing.
///
/// # Safety
/// All 128 threads of the warpgroup call it, converged.
#[inline(always)]
pub unsafe fn wgmma_fence() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    // SAFETY: a warpgroup-wide ordering instruction; converged warpgroup (caller).
    unsafe {
        core::arch::asm!("wgmma.fence.sync.aligned;", options(nostack))
    }
    #[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_90a")))]
    not_sm_90a();
}

/// Closes the batch of `wgmma`s issued since the last commit into one group.
///
/// Emits `wgmma.commit_group.sync.aligned;` (sm_90a). Host: nothing.
///
/// # Safety
/// All 128 threads of the warpgroup call it, converged.
#[inline(always)]
pub unsafe fn wgmma_commit_group() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    // SAFETY: as for `wgmma_fence`.
    unsafe {
        core::arch::asm!("wgmma.commit_group.sync.aligned;", options(nostack))
    }
    #[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_90a")))]
    not_sm_90a();
}

/// Waits until at most `N` (0..=7) committed groups of this warpgroup are in flight: the
/// accumulators of the older ones are written and their shared operands free.
///
/// Emits `wgmma.wait_group.sync.aligned N;` (sm_90a). Host: the `wgmma`s already ran
/// when issued; the wait converges the warp (a warp collective over all 32 lanes), as
/// `.sync.aligned` does, so that one lane speaking for its warp after the wait (say,
/// arriving on an [`crate::mbarrier::MBarrier`] that frees the operands) does so only once
/// every lane has read them.
///
/// # Safety
/// All 128 threads of the warpgroup call it, converged.
#[inline(always)]
pub unsafe fn wgmma_wait_group<const N: u32>() {
    const { assert!(N <= 7, "wgmma.wait_group takes 0..=7") };
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    // SAFETY: as for `wgmma_fence`.
    unsafe {
        core::arch::asm!("wgmma.wait_group.sync.aligned {n};", n = const N, options(nostack))
    }
    #[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_90a")))]
    not_sm_90a();
    #[cfg(not(target_arch = "nvptx64"))]
    crate::cpu::hooks::warp_exchange(u32::MAX, ());
}

#[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_90a")))]
#[inline(always)]
fn not_sm_90a() {
    // SAFETY: aborts the kernel; a caller on this architecture broke the module contract.
    unsafe { core::arch::nvptx::trap() }
}

/// Host backend of the `wgmma` functions: this thread's `acc += A·Bᵀ` entries for a
/// 64×`n`×16 step, from the operand tiles as they are now.
#[cfg(not(target_arch = "nvptx64"))]
fn wgmma_host(acc: &mut [f32], a: SmemMatrix, b: SmemMatrix, n: u32) {
    use crate::mma::layout::bf16_bits_to_f32;
    for (what, m) in [("A", a), ("B", b)] {
        if !m.tile.addr().is_multiple_of(1024) {
            crate::cpu::hooks::trap(&format!("wgmma: operand {what} tile is not 1024-byte aligned"));
        }
    }
    let tid = crate::thread::linear_thread_idx();
    let (warp, lane) = ((tid / 32) % 4, tid % 32);
    let (g, t) = (lane / 4, lane % 4);
    for j in 0..n / 8 {
        for e in 0..4 {
            let row = 16 * warp + g + 8 * (e / 2);
            let col = 8 * j + 2 * t + e % 2;
            let slot = &mut acc[(4 * j + e) as usize];
            let mut sum = *slot as f64;
            for k in 0..16 {
                // SAFETY: the caller of the `wgmma` function guarantees both tiles.
                let (x, y) = unsafe { (a.element(row, k), b.element(col, k)) };
                sum += bf16_bits_to_f32(x) as f64 * bf16_bits_to_f32(y) as f64;
            }
            *slot = sum as f32;
        }
    }
}

macro_rules! wgmma_bf16 {
    ($(#[$doc:meta])* $name:ident, $n:literal, $n8:literal, $first:literal $($i:literal)*) => {
        $(#[$doc])*
        #[doc = concat!("\n\nEmits `{ .reg .pred p; setp.ne.b32 p, 1, 0; wgmma.mma_async.sync.aligned.m64n", $n,
            "k16.f32.bf16.bf16 {d0..d", $n, "/2}, a_desc, b_desc, p, 1, 1, 0, 0; }` (sm_90a): ",
            "`acc += A·Bᵀ` with A 64×16 and B ", $n, "×16, both K-major (transpose flags 0).")]
        ///
        /// # Safety
        /// All 128 threads of the warpgroup call it, converged, with the same operands,
        /// after [`wgmma_fence`]; both tiles are shared memory laid out as the module docs
        /// say (A: 64 rows, B: N rows from the descriptors' starts), not written until a
        /// [`wgmma_wait_group`] covers this call; `acc` is not read or written by other
        /// instructions until then either.
        #[inline(always)]
        pub unsafe fn $name(acc: &mut [[f32; 4]; $n8], a: SmemMatrix, b: SmemMatrix) {
            #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
            {
                let d = acc.as_flattened_mut();
                // SAFETY: the caller's contract (module docs, this function's Safety).
                unsafe {
                    core::arch::asm!(
                        concat!(
                            "{{ .reg .pred p; setp.ne.b32 p, {one}, 0; wgmma.mma_async.sync.aligned.m64n", $n,
                            "k16.f32.bf16.bf16 {{{", $first, "}" $(, ", {", $i, "}")*,
                            "}}, {a}, {b}, p, 1, 1, 0, 0; }}"
                        ),
                        inout(reg32) d[$first],
                        $(inout(reg32) d[$i],)*
                        a = in(reg64) a.descriptor(),
                        b = in(reg64) b.descriptor(),
                        one = in(reg32) 1u32,
                        options(nostack),
                    );
                }
            }
            #[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_90a")))]
            {
                let _ = (acc, a, b);
                not_sm_90a();
            }
            #[cfg(not(target_arch = "nvptx64"))]
            wgmma_host(acc.as_flattened_mut(), a, b, $n);
        }
    };
}

wgmma_bf16!(
    /// `acc += A·Bᵀ` for a 64×128×16 step of a warpgroup, bf16 operands from shared memory,
    /// f32 accumulators (64 per thread, layout in the module docs).
    wgmma_m64n128k16_bf16, 128, 16,
    0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
);

wgmma_bf16!(
    /// `acc += A·Bᵀ` for a 64×256×16 step of a warpgroup, bf16 operands from shared memory,
    /// f32 accumulators (128 per thread, layout in the module docs).
    wgmma_m64n256k16_bf16, 256, 32,
    0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
    64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
    96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_fields() {
        // Host addresses are not shared-window addresses; only the field layout is checked.
        let buf = [0u8; 16];
        // SAFETY: a host pointer wrapped for address arithmetic only.
        let tile = unsafe { SharedPtr::from_ptr(buf.as_ptr() as *mut u8) };
        let d = SmemMatrix::k_major_sw128(tile).offset(32).descriptor();
        assert_eq!(d >> 62, 1, "128-byte swizzle");
        assert_eq!((d >> 32) & 0x3fff, 64, "stride byte offset 1024 >> 4");
        assert_eq!((d >> 16) & 0x3fff, 1, "leading byte offset 16 >> 4");
        assert_eq!(d & 0x3fff, ((tile.addr() + 32) & 0x3_ffff) as u64 >> 4);
        assert_eq!((d >> 49) & 7, 0, "base offset");
    }
}
