//! Static and dynamic shared memory through `SharedPtr`.
//!
//! [`shared_static_a`] and [`shared_static_b`] both declare a static shared variable
//! named `TILE`: their PTX symbols must still differ (the PTX would not assemble
//! otherwise).

use crate::global_id;
use megaops_device::shared::{self, SharedPtr};
use megaops_device::static_shared;
use megaops_device::thread::*;

/// Threads per CTA of [`shared_static_a`].
pub const STATIC_A_BLOCK: u32 = 256;

/// Thread `t` stores `t ^ 0xa5a5` into a static `[u32; 256]`, and after `sync_threads`
/// writes the value of thread `255 - t` to `out[global_id]`.
///
/// Launch: block `(256, 1, 1)`, any 1-D grid. `out`: one word per thread.
///
/// # Safety
/// `out` is valid for the writes above; the block has 256 threads.
pub unsafe fn shared_static_a(out: *mut u32) {
    let tile = static_shared!(TILE: [u32; 256]);
    let t = thread_idx_x() as usize;
    // SAFETY: t < 256; each slot written by one thread, read after the barrier.
    unsafe { tile.at(t).write(t as u32 ^ 0xa5a5) };
    sync_threads();
    // SAFETY: 255 - t < 256, written before the barrier.
    let v = unsafe { tile.at(255 - t).read() };
    // SAFETY: in bounds by the launch contract.
    unsafe { out.add(global_id() as usize).write(v) };
}
entry!(shared_static_a(out: *mut u32));

/// Threads per CTA of [`shared_static_b`].
pub const STATIC_B_BLOCK: u32 = 64;

/// A static `TILE` of 64 `f32` (16-byte aligned through its type): thread `t` stores
/// `t / 2`; after `sync_threads`, threads `t < 16` read elements `4t..4t+4` with one
/// `ld.shared.v4.b32` and write their bits to `out[global_id * 4..]`, the others write
/// `[t; 4]`.
///
/// Launch: block `(64, 1, 1)`, any 1-D grid. `out`: four words per thread.
///
/// # Safety
/// `out` is valid for the writes above; the block has 64 threads.
pub unsafe fn shared_static_b(out: *mut u32) {
    /// 64 floats, aligned for vector access.
    #[repr(C, align(16))]
    struct Tile([f32; 64]);
    let tile: SharedPtr<Tile> = static_shared!(TILE: Tile);
    let elems: SharedPtr<f32> = tile.cast();
    let t = thread_idx_x() as usize;
    // SAFETY: t < 64; read after the barrier.
    unsafe { elems.add(t).write(t as f32 / 2.0) };
    sync_threads();
    let words = if t < 16 {
        // SAFETY: 16-byte aligned (the type's alignment), elements 4t..4t+4 < 64.
        unsafe { elems.add(4 * t).cast::<[f32; 4]>().read() }.map(f32::to_bits)
    } else {
        [t as u32; 4]
    };
    for (i, w) in words.into_iter().enumerate() {
        // SAFETY: in bounds by the launch contract.
        unsafe { out.add(global_id() as usize * 4 + i).write(w) };
    }
}
entry!(shared_static_b(out: *mut u32));

/// Threads per CTA of [`shared_dynamic`].
pub const DYNAMIC_BLOCK: u32 = 64;
/// Dynamic shared memory [`shared_dynamic`] must be launched with, in bytes.
pub const DYNAMIC_BYTES: u32 = 2048;
/// Words [`shared_dynamic`] writes per thread.
pub const DYNAMIC_WORDS: usize = 8;

/// Exercises dynamic shared memory and every `SharedPtr` access path. Thread `t` owns the
/// 32-byte slot `t` of the dynamic shared memory and writes, then (after `sync_threads`)
/// reads slot `(t + 1) % 64` (written by thread `u = (t+1) % 64`):
///
/// | word | value | path |
/// | --- | --- | --- |
/// | 0 | `dynamic_size_bytes()` (2048) | `%dynamic_smem_size` |
/// | 1 | `u · 10 + 1` | `st.shared.b32` / `ld.shared.b32` |
/// | 2 | `u + 0x100` | generic store through `as_ptr()` (bytes 4..6, as `u16`), `ld.shared.b16` |
/// | 3 | `u ^ 0x5a` | `st.shared.u8` (byte 6), generic load |
/// | 4, 5 | low/high word of `(u << 40) \| u` | `st/ld.shared.b64` at byte 8 |
/// | 6 | `u · 3` | `[u32; 2]` at byte 16 (`v2`), sum of its two words `u` and `2u` |
/// | 7 | 1 iff the base is 16-byte aligned and `from_ptr(as_ptr(p)) == p` | |
///
/// Launch: block `(64, 1, 1)`, dynamic shared memory 2048 bytes, any 1-D grid. `out`:
/// eight words per thread.
///
/// # Safety
/// `out` is valid for the writes above; the launch is as described.
pub unsafe fn shared_dynamic(out: *mut u32) {
    let base = shared::dynamic::<u8>();
    let t = thread_idx_x() as usize;
    let n = block_dim_x() as usize;
    let slot = |i: usize| base.byte_add(32 * i);
    let mine = slot(t);
    // SAFETY: slot t (32 bytes) is this thread's alone until the barrier, and is
    // inside the 2048 bytes of the launch; each offset is aligned for its type.
    unsafe {
        mine.cast::<u32>().write(t as u32 * 10 + 1);
        mine.byte_add(4).cast::<u16>().as_ptr().write_volatile(t as u16 + 0x100);
        mine.byte_add(6).write(t as u8 ^ 0x5a);
        mine.byte_add(8).cast::<u64>().write((t as u64) << 40 | t as u64);
        mine.byte_add(16).cast::<[u32; 2]>().write([t as u32, 2 * t as u32]);
    }
    sync_threads();
    let theirs = slot((t + 1) % n);
    // SAFETY: slot (t+1) % n was completely written before the barrier.
    let (w1, w2, w3, w64, v2) = unsafe {
        (
            theirs.cast::<u32>().read(),
            theirs.byte_add(4).cast::<u16>().read() as u32,
            theirs.byte_add(6).as_ptr().read_volatile() as u32,
            theirs.byte_add(8).cast::<u64>().read(),
            theirs.byte_add(16).cast::<[u32; 2]>().read(),
        )
    };
    // SAFETY: `as_ptr` of a shared pointer is a generic pointer into shared memory.
    let round_trip = unsafe { SharedPtr::from_ptr(mine.as_ptr()) } == mine;
    let words = [
        shared::dynamic_size_bytes(),
        w1,
        w2,
        w3,
        w64 as u32,
        (w64 >> 32) as u32,
        v2[0] + v2[1],
        (base.is_aligned_to(16) && round_trip) as u32,
    ];
    for (i, w) in words.into_iter().enumerate() {
        // SAFETY: in bounds by the launch contract.
        unsafe { out.add(global_id() as usize * DYNAMIC_WORDS + i).write(w) };
    }
}
entry!(shared_dynamic(out: *mut u32));

/// CPU references.
#[cfg(not(target_arch = "nvptx64"))]
pub mod reference {
    use super::*;

    /// What [`shared_static_a`] writes for `ctas` CTAs.
    pub fn shared_static_a(ctas: u32) -> Vec<u32> {
        (0..ctas)
            .flat_map(|_| (0..STATIC_A_BLOCK).map(|t| (255 - t) ^ 0xa5a5))
            .collect()
    }

    /// What [`shared_static_b`] writes for `ctas` CTAs.
    pub fn shared_static_b(ctas: u32) -> Vec<u32> {
        let per_thread = |t: u32| {
            if t < 16 {
                core::array::from_fn(|i| ((4 * t + i as u32) as f32 / 2.0).to_bits())
            } else {
                [t; 4]
            }
        };
        (0..ctas)
            .flat_map(|_| (0..STATIC_B_BLOCK).flat_map(per_thread))
            .collect()
    }

    /// What [`shared_dynamic`] writes for `ctas` CTAs.
    pub fn shared_dynamic(ctas: u32) -> Vec<u32> {
        let n = DYNAMIC_BLOCK;
        let per_thread = |t: u32| {
            let u = (t + 1) % n;
            let w64 = (u as u64) << 40 | u as u64;
            [
                DYNAMIC_BYTES,
                u * 10 + 1,
                u + 0x100,
                (u as u8 ^ 0x5a) as u32,
                w64 as u32,
                (w64 >> 32) as u32,
                3 * u,
                1,
            ]
        };
        (0..ctas).flat_map(|_| (0..n).flat_map(per_thread)).collect()
    }
}
