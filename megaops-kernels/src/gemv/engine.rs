//! The skinny-GEMM engine every kernel of [`super`] runs: `out[m, n] = x[m, k] · W[n, k]ᵀ`
//! on the tensor cores, with W streamed from memory straight into `mma` registers.
//!
//! # Work decomposition
//!
//! A CTA owns `BN` output columns (`BN` rows of W, per row group) and, with split-K across
//! CTAs, one of `splits` contiguous ranges of k. Its `BN / 16 × WK` warps each take 16 rows
//! (one `m16` tile) and every `WK`-th *batch* of the CTA's k range, where a batch is `U`
//! chunks of 32 k elements. Partial sums of the `WK` warps of a column meet in shared
//! memory; those of the `splits` CTAs of a column meet in an f32 workspace, summed by the
//! CTA that finishes last (atomic ticket), in a fixed order.
//!
//! # Fragments without shared memory
//!
//! `mma.m16n8k16.row.col` multiplies A (16 rows of W × 16 k) by B (16 k × 8 tokens, i.e.
//! `xᵀ`). A dot product does not care in which order its k terms come, so the k order is
//! permuted — the same way in A and B — such that each lane's fragments come from single
//! 16-byte loads: lane `(g, t) = (lane / 4, lane % 4)` loads the 8 elements
//! `[32c + 8t, 32c + 8t + 8)` of W rows `g` and `g + 8` and of x row (token) `g` (and
//! `g + 8` for the second n-tile). Words 0, 1 of those loads feed k-step 0, words 2, 3
//! k-step 1:
//!
//! ```text
//! k-step s: a = [r[2s], q[2s], r[2s+1], q[2s+1]]   (r: row g, q: row g + 8)
//!           b = [x[2s], x[2s+1]]
//! ```
//!
//! which places actual element `8t + 4s + 2h + j` at logical column `2t + 8h + j` of step
//! `s` in both A and B. Per load instruction the four lanes of a row read 64 contiguous
//! bytes; a batch reads `64 U` contiguous bytes per row.
//!
//! # Pipeline and prefetch
//!
//! Each lane double-buffers batches in registers ([`Ring`]): while batch `j` is
//! multiplied, batch `j + 1` is in flight, and the loads of `j + 2` are issued right after
//! (≈ 1.5 batches in flight on average, `RG × 2 × U` 16-byte loads per lane each). The
//! first `PF ≤ 2` batches are loaded before the kernel waits for `x` (weight prefetch,
//! paper §3.1): weights do not depend on the producer, so their latency overlaps the
//! previous kernel. (A deeper ring would need run-time indexing of register arrays, which
//! would put them in local memory.)

use crate::attention::math::unroll;
use megaops::bf16;
use megaops::device::atomic::{self, AcqRel, Gpu, Relaxed};
use megaops::device::shared::SharedPtr;
use megaops::device::{convert, fence, memory, mma, thread};

/// k elements per chunk: the quad of lanes of a row reads 4 × 8 elements, two `k16` steps.
pub const CHUNK_K: u32 = 32;
/// W rows per warp: one `m16` tile.
pub const WARP_ROWS: u32 = 16;
/// Tokens per `mma` n-tile.
pub const TILE_TOKENS: u32 = 8;
/// Largest number of tokens one pass handles (two n-tiles); larger `m` takes several
/// passes over W.
pub const GROUP_TOKENS: u32 = 16;

/// Eight bf16 (16 bytes) as four words, element `2i` in the low half of word `i`.
pub type Frag = [u32; 4];

/// One batch in registers: per row group, rows `g` and `g + 8`, `U` chunks.
pub type Slot<const RG: usize, const U: usize> = [[[Frag; U]; 2]; RG];

/// A row of a bf16 matrix as one lane reads it: its first element and how many elements
/// may be read (0 for a row past the end of the matrix, whose pointer is never
/// dereferenced).
#[derive(Clone, Copy)]
pub struct Row {
    ptr: *const bf16,
    lim: u32,
}

impl Row {
    /// Row `index` of a row-major matrix of `rows` rows of `len` elements at `base`.
    #[inline(always)]
    pub fn of(base: *const bf16, index: u32, rows: u32, len: u32) -> Row {
        Row {
            ptr: base.wrapping_add(index as usize * len as usize),
            lim: if index < rows { len } else { 0 },
        }
    }

    /// The 8 elements `[kk, kk + 8)` (zeros past the end). `FAST`: one 16-byte load, which
    /// needs a 16-byte aligned row and `kk` a multiple of 8 (then a piece is either wholly
    /// inside or wholly outside the row); otherwise eight 2-byte loads. `NC`: the load may
    /// use the read-only path (data no kernel writes while this one runs).
    ///
    /// # Safety
    /// `ptr[..lim]` is readable; with `FAST`, as stated above.
    #[inline(always)]
    pub unsafe fn load<const FAST: bool, const NC: bool>(self, kk: u32) -> Frag {
        if FAST {
            if kk < self.lim {
                let p = self.ptr.wrapping_add(kk as usize).cast::<u32>();
                // SAFETY: kk < lim, kk and lim multiples of 8, and the row 16-byte aligned
                // (caller's contract): the 16 bytes lie inside the row and are aligned.
                unsafe {
                    if NC {
                        memory::ld_global_nc_v4_u32(p)
                    } else {
                        memory::ld_global_v4_u32(p)
                    }
                }
            } else {
                [0; 4]
            }
        } else {
            let mut f = [0u32; 4];
            let mut i = 0;
            while i < 8 {
                let e = kk.wrapping_add(i as u32);
                if e < self.lim {
                    // SAFETY: e < lim, so the element is inside the readable row.
                    let bits = unsafe { self.ptr.wrapping_add(e as usize).cast::<u16>().read() };
                    f[i / 2] |= (bits as u32) << (16 * (i % 2));
                }
                i += 1;
            }
            f
        }
    }
}

/// What one lane of a warp streams: its W rows, its share of the k batches, and whether
/// the W rows allow 16-byte loads.
#[derive(Clone, Copy)]
pub struct WarpJob<const RG: usize> {
    /// Per row group, rows `g` and `g + 8` of the warp's 16.
    pub rows: [[Row; 2]; RG],
    /// First (global) batch of the warp.
    pub kb0: u32,
    /// Distance between the warp's batches (`WK`).
    pub kstep: u32,
    /// Number of batches of the warp.
    pub nb: u32,
    /// Element offset of the lane inside a chunk: `8 (lane % 4)`.
    pub lane_k: u32,
    /// Row length (the GEMM's k).
    pub k: u32,
    /// W rows are 16-byte aligned (W 16-byte aligned and `k % 8 == 0`).
    pub fast: bool,
}

/// Where a CTA sits: its first output column and its split of k.
#[derive(Clone, Copy)]
pub struct CtaJob {
    /// First output column (`pid_n * BN`).
    pub n0: u32,
    /// Split index (`pid_k`), `< splits`.
    pub split: u32,
    /// Number of k splits (CTAs per output column tile).
    pub splits: u32,
}

impl<const RG: usize> WarpJob<RG> {
    /// The job of the calling lane for a CTA with `BN = 16 · (warps / WK)` columns:
    /// `bases[rg]` is row 0 of row group `rg` (each `n × k`, row-major).
    #[inline(always)]
    pub fn new<const BN: u32, const WK: u32, const U: usize>(
        bases: [*const bf16; RG],
        n: u32,
        k: u32,
        cta: CtaJob,
    ) -> WarpJob<RG> {
        let (warp, lane) = (thread::warp_id(), thread::lane_id());
        let wn = warp % (BN / WARP_ROWS);
        let wk = warp / (BN / WARP_ROWS);
        let (g, t) = (lane / 4, lane % 4);
        let r0 = cta.n0 + wn * WARP_ROWS + g;
        let rows = core::array::from_fn(|rg| [Row::of(bases[rg], r0, n, k), Row::of(bases[rg], r0 + 8, n, k)]);
        let total = k.div_ceil(CHUNK_K * U as u32);
        let per_split = total.div_ceil(cta.splits.max(1));
        let lo = cta.split.saturating_mul(per_split).min(total);
        let hi = lo.saturating_add(per_split).min(total);
        let kb0 = lo + wk;
        let nb = if hi > kb0 { (hi - kb0).div_ceil(WK) } else { 0 };
        let mut aligned = k.is_multiple_of(8);
        let mut rg = 0;
        while rg < RG {
            aligned &= (bases[rg] as usize).is_multiple_of(16);
            rg += 1;
        }
        WarpJob {
            rows,
            kb0,
            kstep: WK,
            nb,
            lane_k: 8 * t,
            k,
            fast: aligned,
        }
    }

    /// k index of the lane's piece of chunk 0 of warp-local batch `j`.
    #[inline(always)]
    fn origin<const U: usize>(&self, j: u32) -> u32 {
        (self.kb0 + j * self.kstep) * (CHUNK_K * U as u32) + self.lane_k
    }

    /// Loads warp-local batch `j` (zeros, without touching memory, when `j >= nb`).
    ///
    /// # Safety
    /// The rows are readable as [`Row::load`] requires (with `FAST` only if `self.fast`).
    #[inline(always)]
    pub unsafe fn load<const U: usize, const FAST: bool>(&self, j: u32) -> Slot<RG, U> {
        let mut s = [[[[0u32; 4]; U]; 2]; RG];
        if j < self.nb {
            let k0 = self.origin::<U>(j);
            unroll!(RG, max 2, |rg| {
                unroll!(2, max 2, |h| {
                    unroll!(U, max 4, |u| {
                        // SAFETY: forwarded from the caller.
                        s[rg][h][u] = unsafe { self.rows[rg][h].load::<FAST, true>(k0 + CHUNK_K * u as u32) };
                    });
                });
            });
        }
        s
    }

    /// The ring with the weight prefetch done: batch 0 in slot `a` if `PF ≥ 1`, batch 1
    /// in slot `b` if `PF ≥ 2`; the other slot(s) are loaded by [`run`] after the wait.
    ///
    /// # Safety
    /// As for [`WarpJob::load`].
    #[inline(always)]
    pub unsafe fn prefetch<const U: usize, const PF: usize>(&self) -> Ring<RG, U> {
        let mut ring = Ring {
            a: [[[[0u32; 4]; U]; 2]; RG],
            b: [[[[0u32; 4]; U]; 2]; RG],
        };
        // SAFETY: forwarded from the caller.
        unsafe { self.fill(&mut ring, 0, PF) };
        ring
    }

    /// Loads batch 0 into slot `a` if `from == 0 < to` and batch 1 into slot `b` if
    /// `from ≤ 1 < to` (the ring's first pass). Only on the 16-byte path (`self.fast`):
    /// the 2-byte path streams without the ring ([`WarpJob::stream_slow`]).
    ///
    /// # Safety
    /// As for [`WarpJob::load`].
    #[inline(always)]
    pub unsafe fn fill<const U: usize>(&self, ring: &mut Ring<RG, U>, from: usize, to: usize) {
        if !self.fast {
            return;
        }
        // SAFETY (both): forwarded from the caller; the rows allow 16-byte loads.
        if from == 0 && to > 0 {
            ring.a = unsafe { self.load::<U, true>(0) };
        }
        if from <= 1 && to > 1 {
            ring.b = unsafe { self.load::<U, true>(1) };
        }
    }

    /// Multiplies warp-local batch `j` (in `slot`) with the matching pieces of the token
    /// rows `x`, accumulating into `acc[rg][nt]`. Warp-collective (`mma.sync`).
    ///
    /// # Safety
    /// Called by all 32 lanes with the same `j`; the `x` rows are readable as
    /// [`Row::load`] requires.
    #[inline(always)]
    unsafe fn mma<const U: usize, const NT: usize, const FAST: bool>(
        &self,
        j: u32,
        slot: &Slot<RG, U>,
        x: &[Row; NT],
        acc: &mut [[[f32; 4]; NT]; RG],
    ) {
        let k0 = self.origin::<U>(j);
        unroll!(U, max 4, |u| {
            let kk = k0 + CHUNK_K * u as u32;
            let mut xv = [[0u32; 4]; NT];
            unroll!(NT, max 2, |nt| {
                // SAFETY: forwarded from the caller. x may have been written by a kernel
                // in flight: plain (coherent) loads, issued after this thread's acquire.
                xv[nt] = unsafe { x[nt].load::<FAST, false>(kk) };
            });
            unroll!(RG, max 2, |rg| {
                let (r, q) = (slot[rg][0][u], slot[rg][1][u]);
                let a0 = [r[0], q[0], r[1], q[1]];
                let a1 = [r[2], q[2], r[3], q[3]];
                unroll!(NT, max 2, |nt| {
                    let v = xv[nt];
                    // SAFETY: all lanes run this with converged control flow (uniform j).
                    unsafe {
                        acc[rg][nt] = mma::mma_m16n8k16_bf16_f32(a0, [v[0], v[1]], acc[rg][nt]);
                        acc[rg][nt] = mma::mma_m16n8k16_bf16_f32(a1, [v[2], v[3]], acc[rg][nt]);
                    }
                });
            });
        });
    }

    /// Streams all of the warp's batches through the ring and returns the accumulators
    /// (C fragments: `acc[rg][nt][i]` is W row `g + 8 (i / 2)` × token `8 nt + 2t + i % 2`
    /// of the group). Batch `j` is multiplied while batches `j + 1` and (once issued)
    /// `j + 2` are in flight. On return the ring holds zeros (the last loads were past the
    /// end).
    ///
    /// # Safety
    /// Warp-collective; the ring holds batches 0 and 1 (see [`WarpJob::fill`]); memory as
    /// for [`WarpJob::load`] and `WarpJob::mma`.
    #[inline(always)]
    pub unsafe fn stream<const U: usize, const NT: usize, const FAST: bool>(
        &self,
        ring: &mut Ring<RG, U>,
        x: &[Row; NT],
    ) -> [[[f32; 4]; NT]; RG] {
        let mut acc = [[[0f32; 4]; NT]; RG];
        let mut j = 0u32;
        // SAFETY (whole loop): forwarded; `j` is the same in every lane.
        while j < self.nb {
            unsafe {
                self.mma::<U, NT, FAST>(j, &ring.a, x, &mut acc);
                ring.a = self.load::<U, FAST>(j + 2);
                if j + 1 < self.nb {
                    self.mma::<U, NT, FAST>(j + 1, &ring.b, x, &mut acc);
                }
                ring.b = self.load::<U, FAST>(j + 3);
            }
            j += 2;
        }
        acc
    }

    /// The fallback for rows that are not 16-byte aligned (`k % 8 != 0`, or W or x
    /// misaligned): the same products, one chunk at a time with 2-byte loads and no
    /// register ring, in a rolled loop (few registers, so it does not raise the
    /// kernel's register count; speed is not its purpose).
    ///
    /// # Safety
    /// Warp-collective; rows readable as [`Row::load`] requires.
    #[inline(always)]
    pub unsafe fn stream_slow<const U: usize, const NT: usize>(&self, x: &[Row; NT]) -> [[[f32; 4]; NT]; RG] {
        let mut acc = [[[0f32; 4]; NT]; RG];
        let chunks = self.nb * U as u32;
        let mut c = 0u32;
        while c < chunks {
            let kk = self.origin::<U>(c / U as u32) + CHUNK_K * (c % U as u32);
            let mut xv = [[0u32; 4]; NT];
            unroll!(NT, max 2, |nt| {
                // SAFETY: forwarded from the caller.
                xv[nt] = unsafe { x[nt].load::<false, false>(kk) };
            });
            unroll!(RG, max 2, |rg| {
                // SAFETY: forwarded from the caller.
                let (r, q) = unsafe { (self.rows[rg][0].load::<false, true>(kk), self.rows[rg][1].load::<false, true>(kk)) };
                let a0 = [r[0], q[0], r[1], q[1]];
                let a1 = [r[2], q[2], r[3], q[3]];
                unroll!(NT, max 2, |nt| {
                    let v = xv[nt];
                    // SAFETY: all lanes run this with converged control flow (uniform c).
                    unsafe {
                        acc[rg][nt] = mma::mma_m16n8k16_bf16_f32(a0, [v[0], v[1]], acc[rg][nt]);
                        acc[rg][nt] = mma::mma_m16n8k16_bf16_f32(a1, [v[2], v[3]], acc[rg][nt]);
                    }
                });
            });
            c += 1;
        }
        acc
    }
}

/// Two batches of W in registers: double buffering (one batch is multiplied while the
/// other, and then the next, are loaded).
#[derive(Clone, Copy)]
pub struct Ring<const RG: usize, const U: usize> {
    /// Even batches.
    pub a: Slot<RG, U>,
    /// Odd batches.
    pub b: Slot<RG, U>,
}

/// The x rows (tokens `t0 + g`, `t0 + g + 8`) of the calling lane for `NT` n-tiles.
#[inline(always)]
pub fn token_rows<const NT: usize>(x: *const bf16, t0: u32, m: u32, k: u32) -> [Row; NT] {
    let g = thread::lane_id() / 4;
    core::array::from_fn(|nt| Row::of(x, t0 + g + TILE_TOKENS * nt as u32, m, k))
}

/// Output element types: bf16 (activations) or f32 (logits).
pub trait OutElem: Copy {
    /// Rounds an f32 result to this type.
    fn from_f32(v: f32) -> Self;
}

impl OutElem for bf16 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        convert::f32_to_bf16(v)
    }
}

impl OutElem for f32 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
}

/// Everything a CTA needs after the input wait.
#[derive(Clone, Copy)]
pub struct Epilogue<O> {
    /// Output `[m, n]`, row-major.
    pub out: *mut O,
    /// Split-K partial sums `[splits][RG][m][n]` (unused when `splits == 1`).
    pub ws: *mut f32,
    /// Split-K tickets, one per column tile (zero between launches).
    pub counters: *mut u32,
    /// Tokens.
    pub m: u32,
    /// Output columns.
    pub n: u32,
    /// Column tile index (`pid_n`).
    pub tile: u32,
}

/// `silu(g) · u` when `SILU` (row groups 0 and 1 are gate and up), else the single row
/// group's sum.
#[inline(always)]
fn finish<const RG: usize, const SILU: bool>(v: [f32; RG]) -> f32 {
    if SILU {
        crate::attention::math::silu(v[0]) * v[RG - 1]
    } else {
        v[0]
    }
}

/// Index of `(wk, rg, token, col)` in the CTA's reduction buffer `[WK][RG][16][BN]` f32.
#[inline(always)]
fn red_index<const BN: u32, const RG: usize>(wk: u32, rg: usize, token: u32, col: u32) -> usize {
    (((wk as usize * RG + rg) * GROUP_TOKENS as usize + token as usize) * BN as usize) + col as usize
}

/// Dynamic shared memory the engine needs, in bytes: `WK × RG × 16 × BN` f32.
pub const fn smem_bytes(bn: u32, wk: u32, rg: u32) -> u32 {
    4 * GROUP_TOKENS * bn * wk * rg
}

/// The whole CTA after the input wait: streams W against every group of up to 16
/// tokens, reduces across warps and splits, and writes the output tile. `ring` holds the
/// first `PF` batches (the prefetch); the rest are loaded here. On return (after a
/// barrier) the reduction buffer still holds the last group's stashes
/// ([`column_sums`]).
///
/// # Safety
/// Called by every thread of a CTA of `2 · BN · WK` threads with `smem_bytes(BN, WK, RG)`
/// bytes of dynamic shared memory; pointers valid for the shapes in `job`/`ep` (x
/// `[m, k]`, W `RG × [n, k]`, out `[m, n]`, with splits: ws and counters as documented
/// on [`Epilogue`]).
#[inline(always)]
pub unsafe fn run<
    const BN: u32,
    const WK: u32,
    const RG: usize,
    const U: usize,
    const PF: usize,
    const SILU: bool,
    O: OutElem,
>(
    x: *const bf16,
    job: &WarpJob<RG>,
    cta: CtaJob,
    mut ring: Ring<RG, U>,
    ep: &Epilogue<O>,
) {
    let k = job.k;
    let fast = job.fast && (x as usize).is_multiple_of(16);
    let red = megaops::device::shared::dynamic::<f32>();
    let mut t0 = 0;
    let mut first = true;
    while t0 < ep.m {
        // SAFETY (whole block): forwarded from the caller.
        unsafe {
            if fast {
                job.fill::<U>(&mut ring, if first { PF } else { 0 }, 2);
            }
            if fast && ep.m - t0 <= TILE_TOKENS {
                let acc = job.stream::<U, 1, true>(&mut ring, &token_rows::<1>(x, t0, ep.m, k));
                stash::<BN, RG, 1>(red, &acc);
            } else if fast {
                let acc = job.stream::<U, 2, true>(&mut ring, &token_rows::<2>(x, t0, ep.m, k));
                stash::<BN, RG, 2>(red, &acc);
            } else {
                let acc = job.stream_slow::<U, 2>(&token_rows::<2>(x, t0, ep.m, k));
                stash::<BN, RG, 2>(red, &acc);
            }
            thread::sync_threads();
            store_group::<BN, WK, RG, SILU, O>(red, cta, ep, t0);
            // The next group overwrites the buffer.
            thread::sync_threads();
        }
        first = false;
        t0 += GROUP_TOKENS;
    }
    if cta.splits > 1 {
        // SAFETY: forwarded from the caller.
        unsafe { reduce_splits::<BN, WK, RG, SILU, O>(cta, ep) };
    }
}

/// Writes the warp's accumulators into the reduction buffer.
///
/// # Safety
/// `red` is the CTA's buffer of [`smem_bytes`]; each `(warp, element)` is written once.
#[inline(always)]
unsafe fn stash<const BN: u32, const RG: usize, const NT: usize>(red: SharedPtr<f32>, acc: &[[[f32; 4]; NT]; RG]) {
    let (warp, lane) = (thread::warp_id(), thread::lane_id());
    let (wn, wk) = (warp % (BN / WARP_ROWS), warp / (BN / WARP_ROWS));
    let (g, t) = (lane / 4, lane % 4);
    for (rg, tiles) in acc.iter().enumerate() {
        for (nt, c) in tiles.iter().enumerate() {
            for (i, v) in c.iter().enumerate() {
                let row = wn * WARP_ROWS + g + 8 * (i as u32 / 2);
                let token = TILE_TOKENS * nt as u32 + 2 * t + i as u32 % 2;
                // SAFETY: inside the buffer (row < BN, token < 16, wk < WK); written once.
                unsafe { red.add(red_index::<BN, RG>(wk, rg, token, row)).write(*v) };
            }
        }
    }
}

/// The sums over the `WK` warps along k of element `(token, col)` of the group, per row
/// group, from the reduction buffer after the barrier that follows the stashes (what the
/// engine writes for the element: `splits == 1` and, for a bf16 output, rounded).
///
/// # Safety
/// `red` is the CTA's buffer of [`smem_bytes`]; `token < 16`, `col < BN`; a barrier
/// separates this from the stashes, and none has overwritten the buffer since.
#[inline(always)]
pub unsafe fn column_sums<const BN: u32, const WK: u32, const RG: usize>(
    red: SharedPtr<f32>,
    token: u32,
    col: u32,
) -> [f32; RG] {
    let mut v = [0f32; RG];
    for (rg, v) in v.iter_mut().enumerate() {
        for wk in 0..WK {
            // SAFETY: inside the buffer (caller), written before the barrier.
            *v += unsafe { red.add(red_index::<BN, RG>(wk, rg, token, col)).read() };
        }
    }
    v
}

/// After the barrier that follows [`stash`]: each thread sums the `WK` warps' values of
/// some `(token, column)` elements of the group and writes the result (or, with split-K,
/// the CTA's partial sums).
///
/// # Safety
/// As for [`run`]; a barrier separates this from the stashes.
#[inline(always)]
unsafe fn store_group<const BN: u32, const WK: u32, const RG: usize, const SILU: bool, O: OutElem>(
    red: SharedPtr<f32>,
    cta: CtaJob,
    ep: &Epilogue<O>,
    t0: u32,
) {
    let threads = 2 * BN * WK;
    let tokens = (ep.m - t0).min(GROUP_TOKENS);
    let mut e = thread::linear_thread_idx();
    while e < tokens * BN {
        let (token, col) = (e / BN, e % BN);
        let ncol = cta.n0 + col;
        if ncol < ep.n {
            // SAFETY: token < 16, col < BN, the stashes done before the barrier (caller).
            let v = unsafe { column_sums::<BN, WK, RG>(red, token, col) };
            let (row, mn) = ((t0 + token) as usize, ep.m as usize * ep.n as usize);
            let at = row * ep.n as usize + ncol as usize;
            if cta.splits > 1 {
                for (rg, v) in v.iter().enumerate() {
                    let plane = cta.split as usize * RG + rg;
                    // SAFETY: ws holds splits × RG planes of m × n (caller's contract).
                    unsafe { ep.ws.add(plane * mn + at).write(*v) };
                }
            } else {
                // SAFETY: out is m × n (caller's contract).
                unsafe { ep.out.add(at).write(O::from_f32(finish::<RG, SILU>(v))) };
            }
        }
        e += threads;
    }
}

/// Publishes every store the CTA made before the call and takes a ticket on `counter`;
/// returns `true` (in every thread) in the CTA that takes ticket `arrivals - 1`, the last
/// of the `arrivals` CTAs sharing the counter, which then sees all their stores: thread 0
/// acquired every CTA's release and the barrier passes it on. The caller resets the
/// counter. Emits `fence.acq_rel.gpu`, `bar.sync`, `atom.acq_rel.gpu.global.add.u32` and
/// `bar.red.or`.
///
/// # Safety
/// Every thread of the CTA calls it; `counter` is valid, counts only these `arrivals`
/// CTAs, and started at 0.
#[inline(always)]
pub unsafe fn last_to_arrive(counter: *mut u32, arrivals: u32) -> bool {
    // Release: every thread's stores, then (after the barrier) one ticket.
    fence::fence(AcqRel, Gpu);
    thread::sync_threads();
    let mut last = false;
    if thread::linear_thread_idx() == 0 {
        // SAFETY: valid counter (caller's contract).
        let ticket = unsafe { atomic::global::add(counter, 1u32, AcqRel, Gpu) };
        last = ticket == arrivals - 1;
    }
    thread::sync_threads_or(last)
}

/// Split-K: publishes the CTA's partial sums and takes a ticket; the CTA that arrives last
/// for its column tile sums all splits' partials in split order (deterministic), writes
/// the output tile and re-arms the ticket counter.
///
/// # Safety
/// As for [`run`]; every thread of the CTA calls it after its partial stores.
#[inline(always)]
unsafe fn reduce_splits<const BN: u32, const WK: u32, const RG: usize, const SILU: bool, O: OutElem>(
    cta: CtaJob,
    ep: &Epilogue<O>,
) {
    let tid = thread::linear_thread_idx();
    let counter = ep.counters.wrapping_add(ep.tile as usize);
    // SAFETY: one counter per column tile, taken by its `splits` CTAs (caller's contract).
    if !unsafe { last_to_arrive(counter, cta.splits) } {
        return;
    }
    let threads = 2 * BN * WK;
    let mn = ep.m as usize * ep.n as usize;
    let total = ep.m * BN;
    let mut base = tid;
    while base < total {
        // Four elements per round, four splits per load batch: 16 loads in flight.
        let mut sums = [[0f32; RG]; 4];
        let mut at = [usize::MAX; 4];
        unroll!(4, max 4, |i| {
            let e = base + i as u32 * threads;
            let (token, ncol) = (e / BN, cta.n0 + e % BN);
            if e < total && ncol < ep.n {
                at[i] = token as usize * ep.n as usize + ncol as usize;
            }
        });
        let mut s = 0;
        while s < cta.splits {
            let batch = (cta.splits - s).min(4);
            let mut vals = [[[0f32; RG]; 4]; 4];
            unroll!(4, max 4, |q| {
                if (q as u32) < batch {
                    unroll!(4, max 4, |i| {
                        if at[i] != usize::MAX {
                            unroll!(RG, max 2, |rg| {
                                let plane = (s as usize + q) * RG + rg;
                                // SAFETY: inside ws; a strong load at GPU scope reads L2,
                                // where the other CTAs' released partials are.
                                vals[q][i][rg] = unsafe {
                                    atomic::global::load(ep.ws.add(plane * mn + at[i]), Relaxed, Gpu)
                                };
                            });
                        }
                    });
                }
            });
            // Splits in ascending order: the same sum whatever order the CTAs finished in.
            unroll!(4, max 4, |q| {
                if (q as u32) < batch {
                    unroll!(4, max 4, |i| {
                        unroll!(RG, max 2, |rg| {
                            sums[i][rg] += vals[q][i][rg];
                        });
                    });
                }
            });
            s += batch;
        }
        unroll!(4, max 4, |i| {
            if at[i] != usize::MAX {
                // SAFETY: out is m × n.
                unsafe { ep.out.add(at[i]).write(O::from_f32(finish::<RG, SILU>(sums[i]))) };
            }
        });
        base += 4 * threads;
    }
    if tid == 0 {
        // SAFETY: every split of this tile has taken its ticket; the next launch that
        // uses the counters is ordered after this one.
        unsafe { atomic::global::store(counter, 0u32, Relaxed, Gpu) };
    }
}
