//! The sm_90a GEMM mainloop: a `STAGES`-deep `cp.async` pipeline into 128-byte swizzled
//! shared memory, read directly by Hopper's warpgroup MMA (`wgmma.mma_async`,
//! [`megaops::device::wgmma`]). No `ldmatrix`, no fragments in registers: the tensor cores
//! read both operands from shared memory, so a CTA of two warpgroups keeps a 128×256 (or
//! 128×128) tile's accumulators in registers and the shared-memory bandwidth of
//! `ldmatrix` stops being the limit that `mma.sync` hits on Hopper.
//!
//! # Tiling
//!
//! `BM = 64·W` rows for `W` (1 to 3) warpgroups (`THREADS = 128·W`), `BN` of 128 or 256 columns,
//! `BK = 64` (one 128-byte row of k per tile row, the swizzle's width). Warpgroup `w`
//! computes rows `64w..64w + 64` × all `BN` columns with `m64nBNk16` steps, four per
//! k-tile; warp `i` of the CTA thus holds rows `16i..16i + 16` of the block, the layout of
//! the `mma.sync` epilogue (`epilogue::store_c`, one 16-row block per warp).
//!
//! # Shared memory
//!
//! `STAGES` A tiles (`BM × 64`), then `STAGES` B tiles (`BN × 64`), each K-major with the
//! 128-byte swizzle: [`super::tile::swizzle`] with 8 chunks per row is exactly the
//! hardware's pattern, so the `cp.async` copies of `pipeline::copy_k_rows` write
//! what `wgmma` reads. The swizzle is applied by the hardware to absolute addresses, so the
//! stages start at the first 1024-byte boundary of the dynamic shared memory (the launch
//! asks for 1024 bytes more, [`WgTile::SMEM_BYTES`]).
//!
//! # Schedule (k-tile `kt`, `P = STAGES - 2` k-tiles copied ahead)
//!
//! ```text
//! prologue: B of k-tiles 0..P (may run before the input wait: weights), then A of
//!           0..P, one commit group per k-tile
//! for each k-tile kt:
//!   cp.async.wait_group(P - 1)          k-tile kt has landed (this thread's copies)
//!   fence.proxy.async.shared::cta       ... and is visible to the async proxy
//!   bar.sync                            ... for every thread's copies
//!   cp.async k-tile kt+P into the stage of kt-2; commit
//!   wgmma.fence; 4 × wgmma (k-steps); wgmma.commit_group
//!   wgmma.wait_group(1)                 this warpgroup's k-tile kt-1 is done
//! wgmma.wait_group(0)
//! ```
//!
//! The stage of `kt - 2` is free at iteration `kt`: every warpgroup passed this
//! iteration's barrier after its `wait_group(1)` of iteration `kt - 1`, which completed
//! its `wgmma`s of `kt - 2`. One k-tile of MMAs stays in flight across the barrier, and
//! the copies of k-tile `kt + P` are issued before k-tile `kt`'s MMAs, so they have `P`
//! k-tiles of MMAs to land. With `BM = 192` (three warpgroups) the first 256 threads copy
//! and store; the third warpgroup only computes.
//!
//! # Warp specialisation (`WS = true`)
//!
//! The CTA gets one more warpgroup, the producer, which does nothing but copy; the `BM /
//! 64` consumer warpgroups only wait, compute and release. Each stage has two
//! [`MBarrier`]s in static shared memory: *full* (expects the producer's 128 threads) and
//! *empty* (expects one arrival per consumer warp).
//!
//! ```text
//! producer, k-tile kt in stage s = kt % STAGES, round r = kt / STAGES:
//!   r > 0: wait empty[s] for round r - 1      the consumers are done with the stage
//!   cp.async A (and W past the prefetched first STAGES k-tiles) into stage s
//!   cp.async.mbarrier.arrive.noinc full[s]    arrives when this thread's copies land
//! consumer, k-tile kt:
//!   wait full[s] for round r; fence.proxy.async.shared::cta
//!   wgmma.fence; 4 × wgmma; wgmma.commit_group; wgmma.wait_group(1)
//!   lane 0 of each warp: arrive empty[stage of kt - 1]
//! ```
//!
//! No CTA-wide barrier runs in the mainloop, the consumers issue no copies (so their
//! registers hold the 128×256 accumulators with room to spare under the 168 a CTA of 384
//! threads allows), and the producer runs up to `STAGES` k-tiles ahead. The barriers'
//! waits are bounded ([`MBarrier::wait_parity`]).
//!
//! # Edges
//!
//! As in [`super::pipeline`]: copies past `m`, `n` or `k` are zero-filled, the epilogue
//! stores in-bounds elements only; `k % 8 == 0`.

use super::epilogue::{CTile, stage_acc, store_c_with};
use super::pipeline::{copy_k_rows, copy_k_rows_interior, next_stage};
use super::tile::{copy_threads, unroll};
use megaops::bf16;
use megaops::device::fence::fence_proxy_async_shared_cta;
use megaops::device::mbarrier::MBarrier;
use megaops::device::memory::{cp_async_commit_group, cp_async_wait_group};
use megaops::device::shared::{self, SharedPtr};
use megaops::device::static_shared;
use megaops::device::thread::{lane_id, linear_thread_idx, sync_threads};
use megaops::device::warp::shfl_sync;
use megaops::device::wgmma::{
    SmemMatrix, wgmma_commit_group, wgmma_fence, wgmma_m64n128k16_bf16, wgmma_m64n256k16_bf16, wgmma_wait_group,
};

/// k elements per k-tile: one 128-byte swizzle row.
const BK: usize = 64;

/// One CTA's view of a `wgmma` GEMM tile (NT: `C = A·Wᵀ`, `W[n, k]`).
///
/// Const parameters: the CTA tile `BM × BN` (`BM` 64 or 128, `BN` 128 or 256), pipeline
/// depth `STAGES` (3..=8), `N8 = BN / 8` (spelled by the caller, as Rust cannot compute
/// array lengths from const parameters), and `ON`: whether the tile is used at all. A
/// kernel whose config does not use this path names the type with `ON = false`, and then
/// no constraint is checked. Invalid combinations with `ON` fail to compile
/// ([`WgTile::CHECK`]).
pub struct WgTile<
    const BM: usize,
    const BN: usize,
    const STAGES: usize,
    const N8: usize,
    const WS: bool,
    const ON: bool,
> {
    smem: SharedPtr<u8>,
    m: u32,
    n: u32,
    k: u32,
    row0: u32,
    col0: u32,
    ktiles: u32,
    tid: u32,
}

impl<const BM: usize, const BN: usize, const STAGES: usize, const N8: usize, const WS: bool, const ON: bool>
    WgTile<BM, BN, STAGES, N8, WS, ON>
{
    /// Threads that issue `wgmma`: one warpgroup per 64 rows.
    const CONSUMERS: usize = BM / 64 * 128;
    /// Threads per CTA: the consumers, plus the producer warpgroup when warp-specialised.
    pub const THREADS: usize = Self::CONSUMERS + if WS { 128 } else { 0 };
    /// Threads that copy tiles: the producer warpgroup, or [`copy_threads`] of the
    /// consumers (256 of 384).
    const COPY: usize = if WS { 128 } else { copy_threads(Self::CONSUMERS) };
    /// The first copying thread.
    const COPY0: u32 = if WS { Self::CONSUMERS as u32 } else { 0 };
    /// Threads that store `C` (consumers only: they hold the accumulators).
    const STORE: usize = copy_threads(Self::CONSUMERS);
    /// k-tiles of W that [`WgTile::prefetch_b`] requests: every stage when
    /// warp-specialised (all are free at the start), else the `STAGES - 2` the
    /// synchronous schedule copies ahead.
    const PREFETCH: usize = if WS { STAGES } else { STAGES - 2 };
    /// Bytes of one A stage.
    const A_STAGE: usize = BM * BK * 2;
    /// Bytes of one B stage.
    const B_STAGE: usize = BN * BK * 2;
    /// Dynamic shared memory the kernel must be launched with: the stages plus 1024
    /// bytes to align them.
    pub const SMEM_BYTES: usize = (Self::A_STAGE + Self::B_STAGE) * STAGES + 1024;

    /// Compile-time checks of the configuration (evaluated when the tile is created).
    pub const CHECK: () = {
        if ON {
            assert!(
                BM == 64 || BM == 128 || BM == 192,
                "BM must be 64, 128 or 192 (one warpgroup per 64 rows)"
            );
            assert!(
                BN == 128 || BN == 256,
                "BN must be 128 or 256 (m64n128k16 / m64n256k16)"
            );
            assert!(N8 * 8 == BN, "N8 must be BN / 8");
            assert!(STAGES >= 3 && STAGES <= 8, "STAGES must be 3..=8");
            assert!(
                !WS || BM <= 128,
                "a warp-specialised tile has at most two consumer warpgroups"
            );
            assert!(
                BM.is_multiple_of(Self::COPY / 8) && BN.is_multiple_of(Self::COPY / 8),
                "tiles not covered by whole copy iterations"
            );
            assert!(
                BM * BN * 2 <= Self::SMEM_BYTES - 1024,
                "the epilogue's C tile must fit in the pipeline's shared memory"
            );
        }
    };

    /// The tile `(pid_m, pid_n)` of an `m × n × k` GEMM, in the CTA's dynamic shared memory
    /// (which must hold [`Self::SMEM_BYTES`]).
    #[inline(always)]
    pub fn new(pid_m: u32, pid_n: u32, m: u32, n: u32, k: u32) -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::CHECK;
        let raw = shared::dynamic::<u8>();
        let pad = raw.addr().wrapping_neg() % 1024;
        WgTile {
            smem: raw.byte_add(pad as usize),
            m,
            n,
            k,
            row0: pid_m * BM as u32,
            col0: pid_n * BN as u32,
            ktiles: k.div_ceil(BK as u32),
            tid: linear_thread_idx(),
        }
    }

    /// Byte offset of A stage `s`.
    #[inline(always)]
    fn a_stage(s: u32) -> u32 {
        s * Self::A_STAGE as u32
    }

    /// Byte offset of B stage `s`.
    #[inline(always)]
    fn b_stage(s: u32) -> u32 {
        (STAGES * Self::A_STAGE) as u32 + s * Self::B_STAGE as u32
    }

    /// Starts the copies of A's k-tile `kt` into stage `stage` (no commit).
    ///
    /// # Safety
    /// As for [`WgTile::mainloop`].
    #[inline(always)]
    unsafe fn load_a(&self, a: *const bf16, stage: u32, kt: u32) {
        let to = self.smem.byte_add(Self::a_stage(stage) as usize);
        let tid = self.tid.wrapping_sub(Self::COPY0);
        if WS && self.row0 + BM as u32 <= self.m && (kt + 1) * BK as u32 <= self.k {
            // SAFETY: forwarded; COPY / 8 rows per copy iteration is 16 or 32, a multiple
            // of the swizzle's 8 rows; the tile is interior.
            unsafe { copy_k_rows_interior::<BM, BK>(to, tid, Self::COPY, a, self.row0, self.k, kt) }
        } else {
            // SAFETY: as above, without the interior condition.
            unsafe { copy_k_rows::<BM, BK>(to, tid, Self::COPY, a, self.row0, self.m, self.k, kt) }
        }
    }

    /// Starts the copies of W's k-tile `kt` into stage `stage` (no commit).
    ///
    /// # Safety
    /// As for [`WgTile::mainloop`].
    #[inline(always)]
    unsafe fn load_b(&self, b: *const bf16, stage: u32, kt: u32) {
        let to = self.smem.byte_add(Self::b_stage(stage) as usize);
        let tid = self.tid.wrapping_sub(Self::COPY0);
        if WS && self.col0 + BN as u32 <= self.n && (kt + 1) * BK as u32 <= self.k {
            // SAFETY: as in `load_a`.
            unsafe { copy_k_rows_interior::<BN, BK>(to, tid, Self::COPY, b, self.col0, self.k, kt) }
        } else {
            // SAFETY: as in `load_a`.
            unsafe { copy_k_rows::<BN, BK>(to, tid, Self::COPY, b, self.col0, self.n, self.k, kt) }
        }
    }

    /// Starts the copies of W's first k-tiles (`Self::PREFETCH`; uncommitted: they join
    /// the first commit group, or the first full barrier, of [`WgTile::mainloop`]). Call it
    /// before the wait for A, so the weights stream in while the producer of A finishes
    /// (paper §3.2).
    ///
    /// # Safety
    /// All threads of the CTA call it, with the same `b`, as for [`WgTile::mainloop`].
    #[inline(always)]
    pub unsafe fn prefetch_b(&self, b: *const bf16) {
        unroll!(s in 0..Self::PREFETCH => {
            if (s as u32) < self.ktiles {
                // SAFETY: forwarded; stage `s` is untouched until the mainloop's first wait.
                unsafe { self.load_b(b, s as u32, s as u32) };
            }
        });
    }

    /// The warp-specialised schedule (module docs, "Warp specialisation"): the last
    /// warpgroup copies, the others compute; stages are handed over through a full and an
    /// empty [`MBarrier`] each.
    ///
    /// # Safety
    /// As for [`WgTile::mainloop`].
    #[inline(always)]
    unsafe fn mainloop_specialised(&self, a: *const bf16, b: *const bf16) -> [[f32; 4]; N8] {
        let mut acc = [[0.0f32; 4]; N8];
        let bars = static_shared!(GEMM_STAGE_BARRIERS: [u64; 16]).cast::<u64>();
        // SAFETY: 2·STAGES <= 16 barriers (CHECK) of the CTA's static shared memory, used
        // only here; initialised by thread 0 before the barrier below.
        let full = |s: u32| unsafe { MBarrier::at(bars.add(s as usize)) };
        // SAFETY: as above.
        let empty = |s: u32| unsafe { MBarrier::at(bars.add(8 + s as usize)) };
        // SAFETY (whole body): the caller's contract covers every copy; full barriers
        // order each stage's copies before its MMAs, empty barriers its MMAs before the
        // next copies into it (module docs).
        unsafe {
            if self.tid == 0 {
                unroll!(s in 0..STAGES => {
                    full(s as u32).init(Self::COPY as u32);
                    empty(s as u32).init((Self::CONSUMERS / 32) as u32);
                });
            }
            sync_threads();
            let (mut stage, mut parity) = (0u32, 0u32);
            // The warpgroup as a warp-uniform value (broadcast from lane 0): ptxas then
            // sees the role branch as uniform and keeps the `wgmma`s pipelined instead of
            // serialising them for a possibly divergent warpgroup.
            let warpgroup = shfl_sync(u32::MAX, self.tid / 128, 0);
            if warpgroup >= (Self::CONSUMERS / 128) as u32 {
                // Producer: refill each stage once its MMAs are done.
                for kt in 0..self.ktiles {
                    if kt >= STAGES as u32 {
                        empty(stage).wait_parity(parity ^ 1);
                    }
                    self.load_a(a, stage, kt);
                    if kt >= Self::PREFETCH as u32 {
                        self.load_b(b, stage, kt);
                    }
                    full(stage).arrive_on_copies();
                    (stage, parity) = advance::<STAGES>(stage, parity);
                }
                return acc;
            }
            // Consumers.
            let mut previous = 0u32;
            for kt in 0..self.ktiles {
                full(stage).wait_parity(parity);
                fence_proxy_async_shared_cta();
                self.mma_ktile(&mut acc, stage, warpgroup);
                // k-tile kt - 1's MMAs are done: its stage may be refilled (one arrival
                // per warp).
                wgmma_wait_group::<1>();
                if kt > 0 && lane_id() == 0 {
                    empty(previous).arrive();
                }
                previous = stage;
                (stage, parity) = advance::<STAGES>(stage, parity);
            }
            wgmma_wait_group::<0>();
        }
        acc
    }

    /// Issues warpgroup `warpgroup`'s MMAs of the k-tile in stage `stage` as one group:
    /// `wgmma.fence`, `BK / 16` steps over the stage's A rows `64·warpgroup..+64` and all of
    /// its B tile, `wgmma.commit_group`.
    ///
    /// # Safety
    /// The stage's copies have landed and are visible to the async proxy; all 128 threads
    /// of the warpgroup call it, converged.
    #[inline(always)]
    unsafe fn mma_ktile(&self, acc: &mut [[f32; 4]; N8], stage: u32, warpgroup: u32) {
        let a_tile = self
            .smem
            .byte_add((Self::a_stage(stage) + warpgroup * 64 * 128) as usize);
        let b_tile = self.smem.byte_add(Self::b_stage(stage) as usize);
        let (am, bm) = (SmemMatrix::k_major_sw128(a_tile), SmemMatrix::k_major_sw128(b_tile));
        // SAFETY: the caller's contract.
        unsafe {
            wgmma_fence();
            unroll!(ks in 0..BK / 16 => {
                Self::step(acc, am.offset(32 * ks as u32), bm.offset(32 * ks as u32));
            });
            wgmma_commit_group();
        }
    }

    /// One `m64nBNk16` step: `acc += A·Bᵀ` for the operands `a`, `b`.
    ///
    /// # Safety
    /// As for the `wgmma` functions ([`megaops::device::wgmma`]).
    #[inline(always)]
    unsafe fn step(acc: &mut [[f32; 4]; N8], a: SmemMatrix, b: SmemMatrix) {
        // N8 is 16 or 32 (CHECK): exactly one of the conversions succeeds, decided at
        // compile time.
        if let Ok(acc) = <&mut [[f32; 4]; 16]>::try_from(&mut acc[..]) {
            // SAFETY: forwarded.
            unsafe { wgmma_m64n128k16_bf16(acc, a, b) }
        } else if let Ok(acc) = <&mut [[f32; 4]; 32]>::try_from(&mut acc[..]) {
            // SAFETY: forwarded.
            unsafe { wgmma_m64n256k16_bf16(acc, a, b) }
        }
    }

    /// Runs the pipeline over all of `k` and returns this thread's accumulators (rows
    /// `16·warp..+16` of the block, all `BN` columns; layout of [`megaops::device::wgmma`]).
    /// Every `wgmma` has completed on return; the `cp.async` copies past the end of `k` may
    /// still be in flight (the epilogue waits for them).
    ///
    /// # Safety
    /// All threads of the CTA call it, converged, after [`WgTile::prefetch_b`] with the same
    /// `b`. `a` is a 16-byte aligned row-major `[m, k]` bf16 matrix, `b` a 16-byte aligned
    /// `[n, k]` one, `k % 8 == 0`; the CTA was launched with [`Self::THREADS`] threads and at
    /// least [`Self::SMEM_BYTES`] of dynamic shared memory.
    #[inline(always)]
    pub unsafe fn mainloop(&self, a: *const bf16, b: *const bf16) -> [[f32; 4]; N8] {
        // SAFETY: forwarded.
        unsafe {
            if WS {
                self.mainloop_specialised(a, b)
            } else {
                self.mainloop_synchronous(a, b)
            }
        }
    }

    /// The schedule without warp specialisation (module docs, "Schedule").
    ///
    /// # Safety
    /// As for [`WgTile::mainloop`].
    #[inline(always)]
    unsafe fn mainloop_synchronous(&self, a: *const bf16, b: *const bf16) -> [[f32; 4]; N8] {
        let mut acc = [[0.0f32; 4]; N8];
        let ahead = STAGES as u32 - 2;
        let warpgroup = self.tid / 128;
        // SAFETY (whole body): the caller's contract covers every copy; the schedule in the
        // module docs orders copies, fences, barriers and the MMAs' reads.
        unsafe {
            unroll!(s in 0..STAGES - 2 => {
                if (s as u32) < self.ktiles {
                    self.load_a(a, s as u32, s as u32);
                }
                cp_async_commit_group();
            });
            let (mut read, mut write) = (0u32, ahead);
            let mut kt = 0;
            while kt < self.ktiles {
                wait_ahead::<STAGES>();
                fence_proxy_async_shared_cta();
                sync_threads();
                let next = kt + ahead;
                if next < self.ktiles {
                    self.load_a(a, write, next);
                    self.load_b(b, write, next);
                }
                cp_async_commit_group();
                self.mma_ktile(&mut acc, read, warpgroup);
                wgmma_wait_group::<1>();
                read = next_stage::<STAGES>(read);
                write = next_stage::<STAGES>(write);
                kt += 1;
            }
            wgmma_wait_group::<0>();
        }
        acc
    }

    /// Stores this CTA's block of `C` (`acc` from [`WgTile::mainloop`]) as bf16, rounding to
    /// nearest even (`store_c`); reuses the pipeline's shared memory and leaves it free.
    ///
    /// # Safety
    /// All threads of the CTA call it, converged, right after [`WgTile::mainloop`]; `c` is a
    /// 16-byte aligned row-major `[m, n]` bf16 matrix.
    #[inline(always)]
    pub unsafe fn store(&self, acc: &[[f32; 4]; N8], c: *mut bf16) {
        let dst = CTile {
            smem: self.smem,
            row0: self.row0,
            col0: self.col0,
            m: self.m,
            n: self.n,
        };
        let row = 16 * (self.tid / 32);
        // Staged in blocks of 16 × 128 columns (`stage_acc` unrolls at most 16 n8 tiles).
        // Inlined by force: with a plain and a traced entry per config the closure has two
        // callers, and left out of line it would take the accumulators through local memory.
        let stage = #[inline(always)]
        || {
            if self.tid >= Self::CONSUMERS as u32 {
                return; // the producer warpgroup holds no accumulators
            }
            unroll!(h in 0..N8 / 16 => {
                if let Ok(half) = <&[[f32; 4]; 16]>::try_from(&acc[16 * h..16 * h + 16]) {
                    // SAFETY: this thread's fragment positions of its warp's rows.
                    unsafe { stage_acc::<BN, 1, 16>(self.smem, row, 128 * h as u32, core::array::from_ref(half)) };
                }
            });
        };
        // SAFETY: forwarded; warp `i` owns rows 16i..16i+16 × all BN columns, so the warp
        // blocks tile the CTA block; CHECK asserts the C tile fits.
        unsafe { store_c_with::<BM, BN>(&dst, Self::STORE, c, stage) }
    }
}

/// The stage after `stage` and the parity of its round (flips when the stages wrap).
#[inline(always)]
fn advance<const STAGES: usize>(stage: u32, parity: u32) -> (u32, u32) {
    let next = next_stage::<STAGES>(stage);
    (next, if next == 0 { parity ^ 1 } else { parity })
}

/// `cp.async.wait_group STAGES-3`: of the `STAGES - 2` k-tiles copied ahead, the oldest
/// has landed (for this thread).
#[inline(always)]
fn wait_ahead<const STAGES: usize>() {
    match STAGES {
        3 => cp_async_wait_group::<0>(),
        4 => cp_async_wait_group::<1>(),
        5 => cp_async_wait_group::<2>(),
        6 => cp_async_wait_group::<3>(),
        7 => cp_async_wait_group::<4>(),
        _ => cp_async_wait_group::<5>(),
    }
}
