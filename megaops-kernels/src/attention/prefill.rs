//! Prefill attention: causal flash attention on tensor cores (`mma.sync` m16n8k16 bf16 →
//! f32, operands through `ldmatrix`), grouped-query, over the KV cache.
//!
//! The queries are `batch` sequences of `seq` tokens each, flattened to rows `0..m`
//! (`m = batch·seq`); the query of row `r = b·seq + i` sits at position
//! `start_pos + i` of sequence `b` and attends to its cached keys `0..=start_pos + i`
//! (so a prompt continued after `start_pos` cached tokens, chunked prefill, works too).
//!
//! A CTA takes `BM` consecutive rows of one query head (`NW` warps × `MT` m16 tiles of 16
//! rows) and streams key/value blocks of `BN` positions through shared memory with
//! `cp.async` (two stages: block `j + 1` loads while block `j` is used). Per block each
//! warp computes `S = Q·Kᵀ` (Q fragments with `ldmatrix.x4`, K with `ldmatrix.x4`, each
//! K fragment used for all `MT` row tiles), masks causally near the diagonal, runs the
//! online softmax in base 2 (quad shuffles for the row max), and accumulates `P·V` with P
//! converted in registers to A fragments and V read with `ldmatrix.x4.trans`. Shared
//! tiles are XOR-swizzled by 16-byte chunk (`swz`), so neither `ldmatrix` nor the
//! `cp.async` writes have bank conflicts. A row tile that straddles two sequences runs
//! once per sequence with the other rows masked.

use crate::attention::math::{LOG2_E, fma, recip, unroll};
use megaops::bf16;
use megaops::device::convert::pack_bf16x2;
use megaops::device::math::exp2_approx;
use megaops::device::memory::{cp_async_cg_16, cp_async_cg_16_zfill, cp_async_commit_group, cp_async_wait_group};
use megaops::device::mma::{ldmatrix_x4, ldmatrix_x4_trans, mma_m16n8k16_bf16_f32};
use megaops::device::shared::{self, SharedPtr};
use megaops::device::thread::{lane_id, sync_threads, thread_idx_x, warp_id};
use megaops::device::warp::{FULL_MASK, shfl_xor_sync};

/// Causal grouped-query flash attention for prefill; see the module docs.
///
/// Layouts (`D` = head dim, a config constant):
/// - `q`: `[m, hq·D]` bf16, rotated queries, `m = batch·seq` rows (sequence-major);
/// - `k_cache`, `v_cache`: `[cache_rows, hkv·D]` bf16, sequence `b` at rows
///   `b·max_seq ..` (the layout of [`crate::rope`]); positions `0..start_pos + seq` of
///   every sequence must be written;
/// - `o`: `[m, hq·D]` bf16, `o[r, j·D + i] = Σ_{p ≤ start_pos + i_r} softmax_p(scale ·
///   q_{r,j}·k_p) v_p[i]` with kv head `j / (hq / hkv)`.
///
/// Kernel tile `(pid_m, pid_h)`: rows `pid_m·BM ..` and query head `pid_h` of `q` and `o`
/// (2-D tiles, `D` columns), reading the whole caches. Configs (`prefill_attention::CONSTS`,
/// [`config_index`]): `D = 128` with `BM = 64` (4 warps) or `BM = 128` (8 warps), one m16
/// row tile per warp, `BN = 64`; `D = 64` likewise, plus `BM = 128` as 4 warps of two row
/// tiles with `BN = 32`. (Two row tiles per warp at `D = 128` halve the shared-memory
/// traffic per flop but need more than 255 registers.)
///
/// # Safety
/// Pointers valid for the shapes above; `hkv` divides `hq`; `start_pos + seq <= max_seq`;
/// `batch·max_seq <= cache_rows`; `seq > 0`.
#[megaops::kernel(
    block = THREADS,
    smem = (BM + 4 * BN) * (D * 2),
    input(q[m, hq * D] = [pid_m: BM, pid_h: D]),
    input(k_cache[cache_rows, hkv * D] = [_, _]),
    input(v_cache[cache_rows, hkv * D] = [_, _]),
    output(o[m, hq * D] = [pid_m: BM, pid_h: D]),
    check(hkv > 0 && hq.is_multiple_of(hkv), "hkv must divide hq"),
    check(seq > 0 && m.is_multiple_of(seq), "m must be batch·seq rows"),
    check(start_pos + seq <= max_seq, "start_pos + seq must fit in max_seq"),
    check(m / seq * max_seq <= cache_rows, "the caches need batch·max_seq rows"),
    check(scale > 0.0, "scale must be positive (the row max is taken before scaling)"),
)]
#[config(D = 128, BM = 64, BN = 64, MT = 1, THREADS = 128)]
#[config(D = 128, BM = 128, BN = 64, MT = 1, THREADS = 256)]
#[config(D = 64, BM = 64, BN = 64, MT = 1, THREADS = 128)]
#[config(D = 64, BM = 128, BN = 64, MT = 1, THREADS = 256)]
#[config(D = 64, BM = 128, BN = 32, MT = 2, THREADS = 128)]
pub unsafe fn prefill_attention(
    q: *const bf16,
    k_cache: *const bf16,
    v_cache: *const bf16,
    o: *mut bf16,
    m: u32,
    seq: u32,
    start_pos: u32,
    max_seq: u32,
    cache_rows: u32,
    hq: u32,
    hkv: u32,
    scale: f32,
) {
    // `D / 16` as a run-time value (seq > 0 by contract): the `Q·Kᵀ` loop over D then stays
    // a loop, which keeps ptxas from hoisting every K fragment of the block at once.
    let ksteps = if seq > 0 { D / 16 } else { 0 };
    let scale = scale * LOG2_E;
    // SAFETY: the kernel contract; this statement mentions q and the caches, so their
    // waits come before it.
    unsafe {
        run_tile::<{ D as usize }, { BN as usize }, { MT as usize }, { (THREADS / 32) as usize }>(
            q,
            k_cache,
            v_cache,
            o,
            m,
            seq,
            start_pos,
            max_seq,
            hq,
            hkv,
            ksteps,
            scale,
            pid_m * BM,
            pid_h,
        )
    };
}

/// The scalar parameters of [`prefill_attention`] (`scale` already times `log2(e)`).
#[derive(Clone, Copy)]
struct Shape {
    m: u32,
    seq: u32,
    start_pos: u32,
    max_seq: u32,
    hq: u32,
    hkv: u32,
    /// `D / 16`, opaque to the optimiser.
    ksteps: u32,
    scale: f32,
}

/// Bytes per row of a shared `[rows][D]` bf16 tile (unpadded: see [`swz`]).
const fn row_bytes(d: usize) -> usize {
    d * 2
}

/// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled `[rows][D]` bf16 tile:
/// the chunk index is XORed with `row % 8`, so the 8 rows an `ldmatrix` reads at one
/// chunk fall in 8 different 16-byte bank groups, and the two whole rows a warp's
/// `cp.async`s write stay contiguous (4 wavefronts, not the ~10 of a padded layout's
/// writes that straddle 128-byte lines). Every caller's `row % 8` is its lane's `lane % 8`
/// (the other terms are multiples of 8), so the XOR is per lane, not per row.
#[inline(always)]
fn swz<const D: usize>(row: usize, chunk: usize) -> usize {
    row * row_bytes(D) + ((chunk ^ (row % 8)) * 16)
}

/// Starts copying `rows` rows of `D` bf16 (global row stride `stride` elements) into the
/// swizzled tile at `dst`; rows `>= valid` are zero-filled. All `NW` warps call it.
///
/// Thread `tid` copies 16-byte chunk `tid % (D/8)` of rows `tid / (D/8) + i·pass`, `pass =
/// NW·32 / (D/8)` (a multiple of 8, so every row of a thread has the same swizzle): the
/// chunk and the first row are computed once, and each further copy only adds a constant
/// to both addresses (`rows` is a constant of the config after
/// inlining, so the loop unrolls into `cp.async`s with immediate offsets). Only a tile
/// that reaches past `valid` pays for the per-row bounds check and zero fill.
///
/// # Safety
/// `src` valid for `valid` rows; `dst` holds `rows·D` bf16; 16-byte aligned rows; `rows`
/// a multiple of `pass`.
#[inline(always)]
unsafe fn load_tile<const D: usize, const NW: usize>(
    dst: SharedPtr<u8>,
    src: *const bf16,
    stride: usize,
    rows: usize,
    valid: usize,
) {
    const {
        assert!(
            (NW * 32).is_multiple_of(D / 8) && (NW * 32 / (D / 8)).is_multiple_of(8),
            "a pass must cover whole rows, a multiple of the swizzle period"
        )
    };
    let chunks = D / 8;
    let pass = NW * 32 / chunks;
    let tid = thread_idx_x() as usize;
    let (row0, ch) = (tid / chunks, tid % chunks);
    let mut from = src.wrapping_add(row0 * stride + 8 * ch);
    let mut to = dst.byte_add(swz::<D>(row0, ch));
    if valid >= rows {
        for _ in 0..rows / pass {
            // SAFETY: row < rows <= valid, so `from` is in bounds; `to` is in the tile.
            unsafe { cp_async_cg_16(to, from.cast()) };
            from = from.wrapping_add(pass * stride);
            to = to.byte_add(pass * row_bytes(D));
        }
    } else {
        let mut row = row0;
        for _ in 0..rows / pass {
            let ok = row < valid;
            // SAFETY: `from` is in bounds when copied (ok), else 0 bytes are read from the
            // aligned base; `to` is in the tile.
            unsafe { cp_async_cg_16_zfill(to, if ok { from } else { src }.cast(), if ok { 16 } else { 0 }) };
            from = from.wrapping_add(pass * stride);
            to = to.byte_add(pass * row_bytes(D));
            row += pass;
        }
    }
}

/// One kernel tile, out of line (see `decode::run_split` for why; scalar arguments
/// only).
///
/// # Safety
/// As for [`prefill_attention`].
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn run_tile<const D: usize, const BN: usize, const MT: usize, const NW: usize>(
    q: *const bf16,
    k_cache: *const bf16,
    v_cache: *const bf16,
    o: *mut bf16,
    m: u32,
    seq: u32,
    start_pos: u32,
    max_seq: u32,
    hq: u32,
    hkv: u32,
    ksteps: u32,
    scale: f32,
    r0: u32,
    head: u32,
) {
    let sh = Shape {
        m,
        seq,
        start_pos,
        max_seq,
        hq,
        hkv,
        ksteps,
        scale,
    };
    let bm = NW * MT * 16;
    let smem = shared::dynamic::<u8>();
    let q_s = smem;
    // Stage `st` of K at `k_s + st·BN·row_bytes`, of V likewise (computed, not indexed:
    // a run-time index into an array of pointers would go to local memory).
    let k_s = smem.byte_add(bm * row_bytes(D));
    let v_s = smem.byte_add((bm + 2 * BN) * row_bytes(D));
    let (r0, m) = (r0 as usize, sh.m as usize);
    let q_stride = (sh.hq as usize) * D;
    let kv_stride = (sh.hkv as usize) * D;
    let kv_head = (head / (sh.hq / sh.hkv)) as usize;
    // SAFETY: rows r0.. of q, columns of this head; rows past m are zero-filled.
    unsafe {
        load_tile::<D, NW>(
            q_s,
            q.add(r0.min(m) * q_stride + head as usize * D),
            q_stride,
            bm,
            m - r0.min(m),
        )
    };
    cp_async_commit_group();
    let seq = sh.seq as usize;
    let last_row = (r0 + bm).min(m) - 1;
    let mut b = r0 / seq;
    while b <= last_row / seq {
        let seg = Segment {
            lo: r0.max(b * seq),
            hi: (r0 + bm).min((b + 1) * seq).min(m),
            pos0: sh.start_pos as isize - (b * seq) as isize,
        };
        let cache_row0 = b * sh.max_seq as usize;
        let kv = (
            k_cache.wrapping_add(cache_row0 * kv_stride + kv_head * D),
            v_cache.wrapping_add(cache_row0 * kv_stride + kv_head * D),
        );
        // SAFETY: as for the kernel; keys 0..kv_end of sequence b are in the cache.
        unsafe { attend_segment::<D, BN, MT, NW>(q_s, k_s, v_s, kv, kv_stride, &seg, r0, &sh, o, q_stride, head) };
        b += 1;
    }
}

/// Rows `lo..hi` (global row indices) of the tile belong to one sequence; the query of
/// row `r` sits at position `r + pos0`.
struct Segment {
    lo: usize,
    hi: usize,
    pos0: isize,
}

impl Segment {
    fn pos(&self, row: usize) -> isize {
        row as isize + self.pos0
    }
}

/// Flash attention of the segment's rows over keys `0..=pos(hi - 1)`, written to `o`.
///
/// # Safety
/// As for [`prefill_attention`]; every thread of the CTA calls it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn attend_segment<const D: usize, const BN: usize, const MT: usize, const NW: usize>(
    q_s: SharedPtr<u8>,
    k_s: SharedPtr<u8>,
    v_s: SharedPtr<u8>,
    (k, v): (*const bf16, *const bf16),
    kv_stride: usize,
    seg: &Segment,
    r0: usize,
    sh: &Shape,
    o: *mut bf16,
    o_stride: usize,
    head: u32,
) {
    const {
        assert!(
            (BN * (D / 8)).is_multiple_of(NW * 32),
            "a key block must be whole copy passes"
        )
    };
    let kv_end = (seg.pos(seg.hi - 1) + 1) as usize;
    let nblocks = kv_end.div_ceil(BN);
    let (warp, lane) = (warp_id() as usize, lane_id() as usize);
    let (g, t) = (lane / 4, lane % 4);
    // This warp's rows (global) and the part of them in the segment.
    let w_lo = r0 + warp * MT * 16;
    let w_hi = w_lo + MT * 16;
    let active = w_lo < seg.hi && w_hi > seg.lo;
    let first = w_lo.max(seg.lo);
    let last = w_hi.min(seg.hi).saturating_sub(1);
    let whole = w_lo >= seg.lo && w_hi <= seg.hi;

    let mut acc = [[[0.0f32; 4]; 16]; MT]; // [mt][d tile (D/8 used)][c]
    let mut mrow = [[f32::NEG_INFINITY; 2]; MT];
    let mut lrow = [[0.0f32; 2]; MT];

    // SAFETY: key rows < kv_end exist; stage 0 is free (the previous segment's last
    // block was followed by a barrier).
    unsafe {
        load_tile::<D, NW>(k_s, k, kv_stride, BN, kv_end);
        load_tile::<D, NW>(v_s, v, kv_stride, BN, kv_end);
    }
    cp_async_commit_group();
    let mut j = 0;
    let stage = BN * row_bytes(D);
    while j < nblocks {
        let (ks, vs) = (k_s.byte_add((j % 2) * stage), v_s.byte_add((j % 2) * stage));
        if j + 1 < nblocks {
            let kb = (j + 1) * BN;
            // SAFETY: the other stage was last read before the barrier that ended block j - 1.
            unsafe {
                let next = ((j + 1) % 2) * stage;
                load_tile::<D, NW>(
                    k_s.byte_add(next),
                    k.wrapping_add(kb * kv_stride),
                    kv_stride,
                    BN,
                    kv_end - kb,
                );
                load_tile::<D, NW>(
                    v_s.byte_add(next),
                    v.wrapping_add(kb * kv_stride),
                    kv_stride,
                    BN,
                    kv_end - kb,
                );
            }
            cp_async_commit_group();
            cp_async_wait_group::<1>();
        } else {
            cp_async_wait_group::<0>();
        }
        sync_threads();
        let kb = j * BN;
        // Skip blocks past this warp's last query (all masked) and inactive warps.
        if active && (kb as isize) <= seg.pos(last) {
            let rows = BlockRows { w_lo, seg, kb, g, t };
            let state = (&mut acc, &mut mrow, &mut lrow);
            // Only blocks that reach past a row's diagonal, or rows outside the segment,
            // need the mask: the others run the body without it.
            // SAFETY: the stage holds block j (waited and synchronised above).
            unsafe {
                if !whole || (kb + BN) as isize > seg.pos(first) + 1 {
                    attend_block::<D, BN, MT, true>(q_s, ks, vs, warp, lane, &rows, sh, state);
                } else {
                    attend_block::<D, BN, MT, false>(q_s, ks, vs, warp, lane, &rows, sh, state);
                }
            }
        }
        // Every warp is done with this stage before the next iteration refills it.
        sync_threads();
        j += 1;
    }
    if !active {
        return;
    }
    unroll!(MT, max 2, |mt| {
        unroll!(2, max 2, |half| {
            let mut l = lrow[mt][half];
            l += shfl_xor_sync(FULL_MASK, l, 1);
            l += shfl_xor_sync(FULL_MASK, l, 2);
            let row = w_lo + mt * 16 + half * 8 + g;
            if row >= seg.lo && row < seg.hi {
                let inv = if l > 0.0 { recip(l) } else { 0.0 };
                let base = row * o_stride + head as usize * D + 2 * t;
                unroll!(D / 8, max 16, |dn| {
                    let w = pack_bf16x2(acc[mt][dn][2 * half] * inv, acc[mt][dn][2 * half + 1] * inv);
                    // SAFETY: row < m, columns of this head; 4-byte aligned.
                    unsafe { o.add(base + dn * 8).cast::<u32>().write(w) };
                });
            }
        });
    });
}

/// Where a warp's rows sit, for the causal and segment mask of one key block.
struct BlockRows<'a> {
    /// Global row of the warp's first row.
    w_lo: usize,
    seg: &'a Segment,
    /// First key of the block.
    kb: usize,
    /// Lane / 4 and lane % 4 (the fragment row and column pair).
    g: usize,
    t: usize,
}

impl BlockRows<'_> {
    /// For the lane's row `w_lo + off + g`: the largest `c` such that key `kb + 2t + c` is
    /// visible (its position ≤ the query's); `i32::MIN` for a row outside the segment.
    fn limit(&self, off: usize) -> i32 {
        let row = self.w_lo + off + self.g;
        if row < self.seg.lo || row >= self.seg.hi {
            return i32::MIN;
        }
        (self.seg.pos(row) - (self.kb + 2 * self.t) as isize) as i32
    }
}

/// One key block of [`attend_segment`] for one warp: `S = Q·Kᵀ`, the online softmax (with
/// the causal and segment mask when `MASK`), `O += P·V`. `state` is the warp's
/// accumulators, row maxima (scaled, base 2) and row sums.
///
/// # Safety
/// `ks`, `vs` hold the block's keys and values (copies waited and the CTA synchronised);
/// the warp is converged.
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
unsafe fn attend_block<const D: usize, const BN: usize, const MT: usize, const MASK: bool>(
    q_s: SharedPtr<u8>,
    ks: SharedPtr<u8>,
    vs: SharedPtr<u8>,
    warp: usize,
    lane: usize,
    rows: &BlockRows,
    sh: &Shape,
    (acc, mrow, lrow): (&mut [[[f32; 4]; 16]; MT], &mut [[f32; 2]; MT], &mut [[f32; 2]; MT]),
) {
    let mut s = [[[0.0f32; 4]; 8]; MT]; // [mt][key tile (BN/8 used)][c]
    // S = Q·Kᵀ: per 16-wide step of D, the A fragments of the warp's row tiles,
    // then each K fragment pair (two key tiles) feeds every row tile.
    let mut kk = 0;
    while kk < sh.ksteps as usize {
        let mi = lane / 8;
        let a: [[u32; 4]; MT] = core::array::from_fn(|mt| {
            let row = warp * MT * 16 + mt * 16 + (mi % 2) * 8 + lane % 8;
            // SAFETY: rows of the Q tile; converged warp.
            unsafe { ldmatrix_x4(q_s.byte_add(swz::<D>(row, 2 * kk + mi / 2))) }
        });
        unroll!(BN / 16, max 4, |jp| {
            let key = jp * 16 + (mi / 2) * 8 + lane % 8;
            // SAFETY: rows of the K tile in shared memory; converged warp.
            let r = unsafe { ldmatrix_x4(ks.byte_add(swz::<D>(key, 2 * kk + mi % 2))) };
            unroll!(MT, max 2, |mt| {
                // SAFETY: converged warp.
                unsafe {
                    s[mt][2 * jp] = mma_m16n8k16_bf16_f32(a[mt], [r[0], r[1]], s[mt][2 * jp]);
                    s[mt][2 * jp + 1] = mma_m16n8k16_bf16_f32(a[mt], [r[2], r[3]], s[mt][2 * jp + 1]);
                }
            });
        });
        kk += 1;
    }
    // Online softmax per row (rows g and g + 8 of each m tile), in base 2 on scaled
    // scores: the row max is taken on the raw scores (scale > 0, checked at launch) and
    // every weight is one `fma` and one `ex2.approx` (exp2 of -inf is 0, and every
    // argument is ≤ 0, so no clamp is needed).
    unroll!(MT, max 2, |mt| {
        unroll!(2, max 2, |half| {
            // Key `kb + c` is masked for this row when c > lim.
            let lim = if MASK { rows.limit(mt * 16 + half * 8) } else { i32::MAX };
            let mut mx = f32::NEG_INFINITY;
            unroll!(BN / 8, max 8, |jn| {
                unroll!(2, max 2, |e| {
                    let mut x = s[mt][jn][2 * half + e];
                    if MASK && (jn * 8 + e) as i32 > lim {
                        x = f32::NEG_INFINITY;
                    }
                    s[mt][jn][2 * half + e] = x;
                    mx = mx.max(x);
                });
            });
            mx = mx.max(shfl_xor_sync(FULL_MASK, mx, 1));
            mx = mx.max(shfl_xor_sync(FULL_MASK, mx, 2));
            let m_new = mrow[mt][half].max(mx * sh.scale);
            // A row with nothing valid yet keeps weights 0 (exp2 of -inf).
            let m_use = if m_new == f32::NEG_INFINITY { 0.0 } else { m_new };
            let alpha = exp2_approx(mrow[mt][half] - m_use);
            mrow[mt][half] = m_new;
            let mut sum = 0.0f32;
            unroll!(BN / 8, max 8, |jn| {
                let p0 = exp2_approx(fma(s[mt][jn][2 * half], sh.scale, -m_use));
                let p1 = exp2_approx(fma(s[mt][jn][2 * half + 1], sh.scale, -m_use));
                sum += p0 + p1;
                s[mt][jn][2 * half] = p0;
                s[mt][jn][2 * half + 1] = p1;
            });
            lrow[mt][half] = lrow[mt][half] * alpha + sum;
            unroll!(D / 16, max 8, |dn| {
                acc[mt][2 * dn][2 * half] *= alpha;
                acc[mt][2 * dn][2 * half + 1] *= alpha;
                acc[mt][2 * dn + 1][2 * half] *= alpha;
                acc[mt][2 * dn + 1][2 * half + 1] *= alpha;
            });
        });
    });
    // P as bf16 A fragments (half the registers of S, which dies here): for key step
    // ks, a0 = row g, keys 2t, 2t+1; a1 = row g+8; a2 = row g, keys 2t+8, 2t+9;
    // a3 = row g+8.
    let mut pa = [[[0u32; 4]; 4]; MT];
    unroll!(MT, max 2, |mt| {
        unroll!(BN / 16, max 4, |ks| {
            let (lo, hi) = (s[mt][2 * ks], s[mt][2 * ks + 1]);
            pa[mt][ks] = [
                pack_bf16x2(lo[0], lo[1]),
                pack_bf16x2(lo[2], lo[3]),
                pack_bf16x2(hi[0], hi[1]),
                pack_bf16x2(hi[2], hi[3]),
            ];
        });
    });
    // O += P·V, one key step of 16 at a time.
    unroll!(BN / 16, max 4, |ks| {
        unroll!(D / 16, max 8, |dn| {
            let mi = lane / 8;
            let key = ks * 16 + (mi % 2) * 8 + lane % 8;
            // SAFETY: rows of the V tile; converged warp.
            let r = unsafe { ldmatrix_x4_trans(vs.byte_add(swz::<D>(key, 2 * dn + mi / 2))) };
            unroll!(MT, max 2, |mt| {
                // SAFETY: converged warp.
                unsafe {
                    acc[mt][2 * dn] = mma_m16n8k16_bf16_f32(pa[mt][ks], [r[0], r[1]], acc[mt][2 * dn]);
                    acc[mt][2 * dn + 1] = mma_m16n8k16_bf16_f32(pa[mt][ks], [r[2], r[3]], acc[mt][2 * dn + 1]);
                }
            });
        });
    });
}

#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

/// Host side: config selection and the longest-first CTA order.
#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use megaops::{Device, Remap, Result, Tensor};

    /// The first tile config of `prefill_attention` for head dim `d` with `bm` rows per
    /// kernel tile, if there is one.
    pub fn config_index(d: u32, bm: u32) -> Option<usize> {
        super::prefill_attention::CONSTS
            .iter()
            .position(|c| (c.D, c.BM) == (d, bm))
    }

    /// The kernel tiles of `prefill_attention` (`bm` rows, `hq` heads, `m = batch·seq`
    /// rows) ordered by decreasing causal work — the position of a tile's last row in its
    /// sequence — so the longest tiles start first and the short ones fill the tail of
    /// the last wave. Tile `t` is `pid_m·hq + pid_h` (the kernel-tile grid is row-major).
    pub fn longest_first_order(m: u32, seq: u32, bm: u32, hq: u32) -> Vec<u32> {
        let tiles_m = m.div_ceil(bm.max(1));
        let work = |pm: u32| ((pm * bm + bm - 1).min(m.saturating_sub(1))) % seq.max(1);
        let mut rows: Vec<u32> = (0..tiles_m).collect();
        rows.sort_by_key(|&pm| std::cmp::Reverse(work(pm)));
        rows.iter().flat_map(|&pm| (0..hq).map(move |h| pm * hq + h)).collect()
    }

    /// [`longest_first_order`] as a launch remap (`LaunchOptions::remap`).
    pub fn longest_first(device: &Device, m: u32, seq: u32, bm: u32, hq: u32) -> Result<Remap> {
        let order = longest_first_order(m, seq, bm, hq);
        Ok(Remap::Table(Tensor::from_slice(device, &[order.len()], &order)?))
    }
}
