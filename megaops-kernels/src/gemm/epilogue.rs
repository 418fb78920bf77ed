//! The GEMM epilogue: accumulators → bf16 → a swizzled `BM × BN` tile in shared memory →
//! 16-byte coalesced, bounds-checked stores to `C`.
//!
//! Each thread converts pairs of its f32 accumulators with `cvt.rn.bf16x2.f32`
//! ([`pack_bf16x2`]) and writes them as 4-byte words into the C tile (row-major, `BN / 8`
//! chunks per row, swizzle of [`super::tile`]: an 8×8 block written by a warp hits 32
//! different banks). After a barrier, thread `t` copies chunk `t % (BN/8)` of rows
//! `t / (BN/8) + i·(THREADS / (BN/8))`: 16-byte `ld.shared.v4` then `st.global.v4`, a
//! warp writing whole 128-byte lines of `C`. Rows past `m` and columns past `n` are not
//! written. When `n % 8 != 0` the rows of `C` are not 16-byte aligned and the copy falls
//! back to 2-byte stores of the in-bounds elements.
//!
//! The accumulator layout is that of `mma.sync.m16n8k16` (and of `wgmma`, whose
//! accumulators are the same 16×8 blocks, one 16-row slice per warp): [`Acc`]`[i][j]` of a
//! warp whose block starts at (`row`, `col`) holds rows `row + 16i + g (+8)` × columns
//! `col + 8j + 2t (+1)` with `g = lane / 4`, `t = lane % 4`.

use super::pipeline::{Acc, Tile};
use super::tile::{swizzle_bytes, unroll};
use megaops::bf16;
use megaops::device::convert::pack_bf16x2;
use megaops::device::memory::{cp_async_wait_all, st_global_v4_u32};
use megaops::device::shared::SharedPtr;
use megaops::device::thread::{lane_id, linear_thread_idx, sync_threads};

/// Where a CTA's block of `C` goes, and the shared memory it is staged in.
pub(crate) struct CTile {
    /// Shared memory for the `BM × BN` bf16 staging tile (free to overwrite).
    pub smem: SharedPtr<u8>,
    /// First row and column of the CTA's block.
    pub row0: u32,
    /// First column of the CTA's block.
    pub col0: u32,
    /// Rows of `C`.
    pub m: u32,
    /// Columns of `C`.
    pub n: u32,
}

/// Stores a CTA's `BM × BN` block of `C` from the accumulators of every warp (this
/// thread's `acc`, for the warp block at (`warp_row`, `warp_col`) within the CTA block) as
/// bf16, rounding to nearest even, then leaves the shared memory free (a barrier at the
/// end). `threads` is the number of threads that store (a constant at every call site:
/// the CTA size, or 256 of a CTA of 384, [`super::tile::copy_threads`]).
///
/// # Safety
/// All threads of the CTA call it, converged, after their last read of the
/// shared memory (it starts with `cp.async.wait_all` and a barrier); `c` is a 16-byte
/// aligned row-major `[m, n]` bf16 matrix; `dst.smem` holds `BM·BN·2` bytes; the warp
/// blocks of all warps tile the CTA block exactly; `BN / 8` is a power of two ≥ 8 that
/// divides `threads`, and `threads / (BN / 8)` is a multiple of 8 that divides `BM` (the
/// callers' `CHECK`s assert these).
#[inline(always)]
pub(crate) unsafe fn store_c<const BM: usize, const BN: usize, const MI: usize, const NI: usize>(
    dst: &CTile,
    threads: usize,
    warp_row: u32,
    warp_col: u32,
    acc: &Acc<MI, NI>,
    c: *mut bf16,
) {
    // SAFETY: forwarded; the staging writes this thread's words of its warp block.
    unsafe {
        store_c_with::<BM, BN>(dst, threads, c, || {
            stage_acc::<BN, MI, NI>(dst.smem, warp_row, warp_col, acc)
        })
    }
}

/// Writes this thread's accumulators `acc` of the warp block at (`warp_row`, `warp_col`)
/// into the swizzled `? × BN` bf16 C tile at `smem` (`cvt.rn.bf16x2.f32`, 4-byte words).
///
/// # Safety
/// `smem` holds the C tile, which nobody reads until a barrier; the lanes of a warp write
/// disjoint words (each thread its own fragment positions).
#[inline(always)]
pub(crate) unsafe fn stage_acc<const BN: usize, const MI: usize, const NI: usize>(
    smem: SharedPtr<u8>,
    warp_row: u32,
    warp_col: u32,
    acc: &Acc<MI, NI>,
) {
    let cpr = (BN / 8) as u32;
    let lane = lane_id();
    let (g, t) = (lane / 4, lane % 4);
    unroll!(i in 0..MI => {
        unroll!(j in 0..NI => {
            unroll!(h in 0..2 => {
                let row = warp_row + 16 * i as u32 + g + 8 * h as u32;
                let chunk = warp_col / 8 + j as u32;
                let word = pack_bf16x2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                // SAFETY: inside the C tile, 4-byte aligned; each word is written by
                // exactly one thread (caller).
                unsafe { smem.byte_add((swizzle_bytes(row, chunk, cpr) + 4 * t) as usize).cast::<u32>().write(word) };
            });
        });
    });
}

/// [`store_c`] with the staging step given as `stage`, which writes every thread's
/// accumulators into the C tile at `dst.smem` ([`stage_acc`], once per warp block a
/// thread holds): waits for all copies, a barrier, `stage()`, a barrier, the 16-byte
/// stores to `C`, a barrier.
///
/// # Safety
/// As for [`store_c`]; after `stage()` on every thread, the C tile is fully written.
#[inline(always)]
pub(crate) unsafe fn store_c_with<const BM: usize, const BN: usize>(
    dst: &CTile,
    threads: usize,
    c: *mut bf16,
    stage: impl Fn(),
) {
    const {
        assert!(
            BN >= 64 && (BN / 8).is_power_of_two(),
            "BN / 8 must be a power of two >= 8"
        )
    };
    let cpr = (BN / 8) as u32;
    let rows_per_iter = threads / (BN / 8);
    let tid = linear_thread_idx();
    let CTile { smem, row0, col0, m, n } = *dst;
    // Every copy has landed and every warp is past its last read of the pipeline.
    cp_async_wait_all();
    sync_threads();
    stage();
    sync_threads();
    let (r0, ch) = (tid / cpr, tid % cpr);
    let col = col0 + ch * 8;
    let from = smem.byte_add(swizzle_bytes(r0, ch, cpr) as usize);
    let aligned = n.is_multiple_of(8);
    // Threads past `threads` (a CTA of 384 stores with 256) only join the barriers.
    let rows = if tid < threads as u32 { BM / rows_per_iter } else { 0 };
    for i in 0..rows {
        let row = row0 + r0 + (i * rows_per_iter) as u32;
        if row < m && col < n {
            // SAFETY: this thread's chunk of the C tile (shifting by whole iterations
            // keeps the swizzle), written before the barrier above.
            let v = unsafe { from.byte_add(i * threads * 16).cast::<[u32; 4]>().read() };
            // SAFETY: (row, col) is inside C.
            let dst = unsafe { c.add(row as usize * n as usize + col as usize) };
            if aligned {
                // SAFETY: n % 8 == 0 and col % 8 == 0, so all 8 elements are in bounds
                // and the address is 16-byte aligned (C is).
                unsafe { st_global_v4_u32(dst.cast(), v) };
            } else {
                unroll!(e in 0..8 => {
                    if col + (e as u32) < n {
                        let bits = (v[e / 2] >> (16 * (e % 2))) as u16;
                        // SAFETY: element (row, col + e) is inside C.
                        unsafe { dst.add(e).write(bf16::from_bits(bits)) };
                    }
                });
            }
        }
    }
    // Every thread has read its part of the C tile: the shared memory is free for
    // whatever runs next in this CTA (a persistent launch's next tile).
    sync_threads();
}

impl<
    const BM: usize,
    const BN: usize,
    const BK: usize,
    const STAGES: usize,
    const WARPS_M: usize,
    const WARPS_N: usize,
    const MI: usize,
    const NI: usize,
    const NN: bool,
> Tile<BM, BN, BK, STAGES, WARPS_M, WARPS_N, MI, NI, NN>
{
    /// Stores this CTA's block of `C` (`acc` from [`Tile::mainloop`]) as bf16, rounding to
    /// nearest even (`store_c`). Reuses the pipeline's shared memory, and leaves it free
    /// (a barrier at the end).
    ///
    /// # Safety
    /// All threads of the CTA call it, converged, right after [`Tile::mainloop`]; `c` is a
    /// 16-byte aligned row-major `[m, n]` bf16 matrix.
    #[inline(always)]
    pub unsafe fn store(&self, acc: &Acc<MI, NI>, c: *mut bf16) {
        let (_, _, warp_m, warp_n) = self.thread();
        let (m, n, _) = self.dims();
        let dst = CTile {
            smem: self.smem(),
            row0: self.row0,
            col0: self.col0,
            m,
            n,
        };
        // SAFETY: forwarded; the warp blocks (WM × WN at (warp_m·WM, warp_n·WN)) tile the
        // CTA block, and CHECK asserts the C tile fits the shared memory.
        unsafe {
            store_c::<BM, BN, MI, NI>(
                &dst,
                Self::COPY,
                warp_m * Self::WM as u32,
                warp_n * Self::WN as u32,
                acc,
                c,
            )
        }
    }
}
