//! `cp.async` copies from global to shared memory, with commit/wait groups and zero fill.

use crate::global_id;
use megaops_device::memory::*;
use megaops_device::shared;
use megaops_device::thread::*;

/// Threads per CTA of [`cp_async_copy`].
pub const CP_BLOCK: u32 = 64;
/// Bytes of `src` one CTA of [`cp_async_copy`] reads.
pub const CP_SRC_BYTES: usize = CP_BLOCK as usize * 64;
/// Dynamic shared memory [`cp_async_copy`] must be launched with, in bytes.
pub const CP_SMEM_BYTES: u32 = CP_BLOCK * 64;
/// Words [`cp_async_copy`] writes per thread.
pub const CP_WORDS: usize = 16;

/// Each thread `t` copies its 64-byte chunk `src[64t..64t+64]` (of its CTA's block of
/// `src`) to its slot of dynamic shared memory, in four `cp.async` groups:
///
/// 0. bytes 0..16 with `cp.async.cg ... 16`;
/// 1. bytes 16..32 with `cp.async.ca ... 16`;
/// 2. bytes 32..40 with `cp.async.ca ... 8` and 40..44 with `cp.async.ca ... 4`
///    (44..48 stay as they were: zeroed here first);
/// 3. bytes 48..64 with `cp.async.cg ... 16, src_size` where `src_size = t % 17`
///    (the rest zero-filled).
///
/// After `cp.async.wait_group 2` the thread reads back its own group 0 (words 0..4 of its
/// output); after `cp.async.wait_all` and `sync_threads` it reads bytes 16..64 of the
/// slot of thread `(t + 1) % 64` (words 4..16).
///
/// Launch: block `(64, 1, 1)`, dynamic shared memory [`CP_SMEM_BYTES`], any 1-D grid.
/// `src`: [`CP_SRC_BYTES`] per CTA, 16-byte aligned. `out`: 16 words per thread.
///
/// # Safety
/// `src` and `out` are valid for the accesses above; the launch is as described.
pub unsafe fn cp_async_copy(src: *const u8, out: *mut u32) {
    let t = thread_idx_x() as usize;
    let src = src.wrapping_add(block_idx_x() as usize * CP_SRC_BYTES + 64 * t);
    let slot = |i: usize| shared::dynamic::<u8>().byte_add(64 * i);
    let mine = slot(t);
    // SAFETY: `mine` is this thread's 64-byte, 64-byte aligned slot inside the
    // launch's dynamic shared memory; `src` has 64 readable, aligned bytes; nobody touches
    // a destination before the wait that covers it.
    unsafe {
        mine.byte_add(44).cast::<u32>().write(0);
        cp_async_cg_16(mine, src);
        cp_async_commit_group();
        cp_async_ca_16(mine.byte_add(16), src.add(16));
        cp_async_commit_group();
        cp_async_ca_8(mine.byte_add(32), src.add(32));
        cp_async_ca_4(mine.byte_add(40), src.add(40));
        cp_async_commit_group();
        cp_async_cg_16_zfill(mine.byte_add(48), src.add(48), (t % 17) as u32);
        cp_async_commit_group();
    }
    cp_async_wait_group::<2>();
    // SAFETY: group 0 of this thread has completed.
    let own = unsafe { mine.cast::<[u32; 4]>().read() };
    cp_async_wait_all();
    sync_threads();
    let theirs = slot((t + 1) % CP_BLOCK as usize);
    let mut words = [0u32; CP_WORDS];
    words[..4].copy_from_slice(&own);
    for k in 0..12 {
        // SAFETY: all groups of all threads completed before the barrier.
        words[4 + k] = unsafe { theirs.byte_add(16 + 4 * k).cast::<u32>().read() };
    }
    for (i, w) in words.into_iter().enumerate() {
        // SAFETY: in bounds by the launch contract.
        unsafe { out.add(global_id() as usize * CP_WORDS + i).write(w) };
    }
}
entry!(cp_async_copy(src: *const u8, out: *mut u32));

/// CPU references.
#[cfg(not(target_arch = "nvptx64"))]
pub mod reference {
    use super::*;

    /// What [`cp_async_copy`] writes for input `src` (`ctas ×` [`CP_SRC_BYTES`] bytes).
    pub fn cp_async_copy(src: &[u8]) -> Vec<u32> {
        let word = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let mut out = Vec::new();
        for cta in src.chunks(CP_SRC_BYTES) {
            let n = CP_BLOCK as usize;
            // The slot each thread ends up with.
            let slots: Vec<[u8; 64]> = (0..n)
                .map(|t| {
                    let mut s = [0u8; 64];
                    s[..44].copy_from_slice(&cta[64 * t..64 * t + 44]);
                    let keep = t % 17;
                    s[48..48 + keep].copy_from_slice(&cta[64 * t + 48..64 * t + 48 + keep]);
                    s
                })
                .collect();
            for t in 0..n {
                out.extend((0..4).map(|k| word(&slots[t], 4 * k)));
                out.extend((0..12).map(|k| word(&slots[(t + 1) % n], 16 + 4 * k)));
            }
        }
        out
    }
}
