//! Decode attention: one new query token per sequence against its KV cache, as split-KV
//! flash decoding with the combine done in the same kernel by the last CTA of each
//! (sequence, kv head).
//!
//! CTA `(b, h, s)` takes the `G = hq / hkv` query heads of kv head `h` of sequence `b`
//! (grouped-query attention: K and V are read once for the whole group) and positions
//! `[s·chunk, min((s+1)·chunk, len_b))` with `chunk = ceil(len_b / splits)`. It streams
//! those K and V rows with 16-byte `ld.global.cg` loads (`D/8` lanes per position, `U`
//! positions per lane in flight, K and V together), keeps an f32 online softmax per
//! query head and lane, combines lanes and warps, and writes its partial result
//! (unnormalised output, running max, sum) to a workspace. The CTA that finishes last
//! (an acq_rel counter per (b, h), reset by that CTA) merges the `splits` partials and
//! writes the bf16 output. Softmax runs in base 2 with `scale · log2(e)` folded into q.
//!
//! Memory-bound by design: K and V bytes dominate; the partials add
//! `2·G·splits·(D + 2)·4` bytes per (b, h), a few percent at the split counts
//! [`splits_for`] picks.
//!
//! [`decode_attention_rope`] is the same kernel with the decode step's QK-norm, RoPE and
//! KV-cache write in front (what [`crate::rope::qk_norm_rope`] does for one token per
//! sequence): each CTA rotates its own query heads from the QKV projection's output, and
//! the CTA whose split holds the new position writes its key and value rows.

// Constant-index loops on purpose, throughout: `iter_mut`/`zip`/`array::from_fn` over the
// softmax state took its address, which moved it to local memory on nvptx (a 240-byte
// stack, ~550 local loads and stores per block of positions) and kept the loops rolled.
#![allow(clippy::needless_range_loop)]

use crate::attention::math::{LOG2_E, exp2, fma, pack8, recip, unpack8, unroll};
use megaops::bf16;
use megaops::device::atomic::{self, AcqRel, Gpu, Relaxed};
use megaops::device::convert::pack_bf16x2;
use megaops::device::fence::fence;
use megaops::device::math::exp2_approx;
use megaops::device::memory::{
    ld_global_cg_v2_u32, ld_global_cg_v4_u32, ld_global_nc_v4_u32, prefetch_l2, st_global_v2_u32, st_global_v4_f32,
    st_global_v4_u32,
};
use megaops::device::shared::{self, SharedPtr};
use megaops::device::thread::{lane_id, sync_threads, sync_threads_or, thread_idx_x, warp_id};
use megaops::device::warp::{FULL_MASK, shfl_xor_sync};

/// The tile configs of [`decode_attention`] and [`decode_attention_rope`]
/// (`configs = decode_configs!`): one list, so that [`config_index`] serves both.
macro_rules! decode_configs {
    (#[$($kernel:tt)*] $($item:tt)*) => {
        #[$($kernel)*]
        #[config(D = 128, G = 1, U = 4, THREADS = 128)]
        #[config(D = 128, G = 2, U = 4, THREADS = 128)]
        #[config(D = 128, G = 4, U = 4, THREADS = 128)]
        #[config(D = 128, G = 8, U = 2, THREADS = 128)]
        #[config(D = 64, G = 1, U = 4, THREADS = 128)]
        #[config(D = 64, G = 2, U = 4, THREADS = 128)]
        #[config(D = 64, G = 4, U = 4, THREADS = 128)]
        #[config(D = 64, G = 8, U = 2, THREADS = 128)]
        #[config(D = 128, G = 3, U = 4, THREADS = 128)]
        #[config(D = 128, G = 5, U = 2, THREADS = 128)]
        #[config(D = 128, G = 6, U = 2, THREADS = 128)]
        #[config(D = 128, G = 7, U = 2, THREADS = 128)]
        #[config(D = 64, G = 3, U = 4, THREADS = 128)]
        #[config(D = 64, G = 5, U = 2, THREADS = 128)]
        #[config(D = 64, G = 6, U = 2, THREADS = 128)]
        #[config(D = 64, G = 7, U = 2, THREADS = 128)]
        $($item)*
    };
}

/// Split-KV decode attention with GQA and the combine of the splits; see the module docs.
///
/// Layouts (`D` = head dim and `G = hq / hkv` are config constants):
/// - `q`: `[batch, hq·D]` bf16, the rotated queries of the new tokens (query head `j` of
///   sequence `b` at columns `j·D ..`), e.g. [`crate::rope::qk_norm_rope`]'s `q_out`;
/// - `k_cache`, `v_cache`: `[cache_rows, hkv·D]` bf16 with sequence `b` at rows
///   `b·max_seq ..` (the layout of [`crate::rope`]); positions `0..lens[b]` are read;
/// - `lens`: `[batch]` u32, the number of cached positions of each sequence including
///   the new token (clamped to `max_seq`; 0 gives a zero output);
/// - `part_o`: at least `batch·hkv·splits·G·D` f32, `part_ml`: at least
///   `batch·hkv·splits·G·2` f32, `counters`: at least `batch·hkv` u32, zeroed once before
///   the first launch (each complete launch leaves them zero; after a failed one the
///   device re-zeroes the registered counters of a [`DecodeWorkspace`]); one
///   workspace sized for the largest shape serves smaller launches;
/// - `o`: `[batch, hq·D]` bf16, `o[b, j·D + i] = Σ_p softmax_p(scale · q_j·k_p) v_p[i]`
///   over the positions `p < lens[b]` of sequence `b`, kv head `j / G`.
///
/// Kernel tiles `(pid_b, pid_h, pid_s)` = (sequence, kv head, split): each reads the q
/// columns of its group and the whole caches (a producer that writes the caches, like
/// [`crate::rope::qk_norm_rope`], signals them as a whole), and signals the `G·D` output
/// columns of its group with `split = pid_s`, so an output data tile is ready once all
/// splits are in (the last one writes it). Configs: `D ∈ {128, 64}` × `G ∈ {1, 2, 4, 8}`,
/// 128 threads; [`config_index`] picks one (the launcher rejects a config whose `G` is not
/// `hq / hkv`, and workspace tensors sized for another shape).
///
/// # Safety
/// Pointers valid for the shapes above; `splits >= 1`; `lens[b] <= max_seq` and
/// `batch·max_seq <= cache_rows`.
#[megaops::kernel(
    block = THREADS,
    smem = (THREADS / 32) * G * (D + 2) * 4,
    tiles(pid_b = batch, pid_h = hkv, pid_s = splits),
    input(q[batch, hq * D] = [pid_b: 1, pid_h: G * D]),
    input(k_cache[cache_rows, hkv * D] = [_, _]),
    input(v_cache[cache_rows, hkv * D] = [_, _]),
    output(o[batch, hq * D] = [pid_b: 1, pid_h: G * D], split = pid_s),
    tensor(lens[batch]),
    scratch(part_o[batch * hq * splits * D]),
    scratch(part_ml[batch * hq * splits * 2]),
    scratch(counters[batch * hkv]),
    check(hq == hkv * G, "this tile config serves G = hq / hkv query heads per kv head: pick it with decode::config_index"),
    check(splits >= 1, "splits must be at least 1"),
    check(batch * max_seq <= cache_rows, "the caches need batch·max_seq rows"),
    configs = decode_configs!,
)]
pub unsafe fn decode_attention(
    q: *const bf16,
    k_cache: *const bf16,
    v_cache: *const bf16,
    lens: *const u32,
    part_o: *mut f32,
    part_ml: *mut f32,
    counters: *mut u32,
    o: *mut bf16,
    batch: u32,
    hq: u32,
    hkv: u32,
    max_seq: u32,
    cache_rows: u32,
    splits: u32,
    scale: f32,
) {
    if hq != hkv * G {
        return;
    }
    // SAFETY: pid_b < batch.
    let len = unsafe { *lens.add(pid_b as usize) }.min(max_seq);
    let chunk = len.div_ceil(splits.max(1));
    let start = (pid_s * chunk).min(len);
    let end = (start + chunk).min(len);
    // SAFETY: the kernel contract; the caches were waited for by this statement (it
    // mentions them), q too.
    unsafe {
        run_split::<{ D as usize }, { G as usize }, { U as usize }, { (THREADS / 32) as usize }, THREADS>(
            q, k_cache, v_cache, o, part_o, part_ml, counters, pid_b, pid_h, pid_s, hkv, splits, start, end, max_seq,
            scale,
        )
    };
}

/// The whole work of one CTA, kept out of line: the macro's body closure then stays
/// small enough to be inlined into the entry (a closure that is not inlined passes its
/// captures through local memory), and everything here lives in registers. Scalars
/// only: a struct argument would be passed through local memory.
///
/// # Safety
/// As for [`decode_attention`].
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn run_split<const D: usize, const G: usize, const U: usize, const NW: usize, const THREADS: u32>(
    q: *const bf16,
    k_cache: *const bf16,
    v_cache: *const bf16,
    o: *mut bf16,
    part_o: *mut f32,
    part_ml: *mut f32,
    counters: *mut u32,
    b: u32,
    h: u32,
    s: u32,
    hkv: u32,
    splits: u32,
    start: u32,
    end: u32,
    max_seq: u32,
    scale: f32,
) {
    let job = Job {
        b,
        h,
        s,
        hkv,
        splits,
        start,
        end,
        max_seq,
    };
    let ws = Workspace {
        part_o,
        part_ml,
        counters,
    };
    // SAFETY: the group's q columns of row b (kernel contract).
    let qf = unsafe { load_q::<D, G>(q, &job, scale * LOG2_E) };
    let row0 = job.b as usize * job.max_seq as usize * job.hkv as usize * D;
    // SAFETY: rows b·max_seq + p, p < len <= max_seq, of the caches.
    let state = unsafe { attend::<D, G, U, NW>(k_cache.add(row0), v_cache.add(row0), &job, &qf) };
    // SAFETY: workspace sized for (batch, hkv, splits, G, D) (kernel contract); dynamic
    // shared memory sized by the annotation.
    unsafe { finish::<D, G, NW, THREADS>(state, &job, &ws, o) };
}

/// [`decode_attention`] with the new token's QK-norm, RoPE and KV-cache write in front:
/// the decode step's [`crate::rope::qk_norm_rope`] → [`decode_attention`] pair in one
/// launch, reading the QKV projection's output directly.
///
/// CTA `(b, h, s)` waits for row `b` of `qkv`, normalises (with [`crate::rope::QK_NORM`])
/// and rotates its group's `G` query heads itself, rounds them to bf16 as `q_out` would
/// be, and attends over positions `start..end` of its split as [`decode_attention`] does.
/// The CTA whose split holds the new token's position (`slots[b] - b·max_seq`; the last
/// split when that position is past `lens[b]`) also normalises and rotates key head `h`
/// and writes it and value head `h` to cache row `slots[b]` before it attends; a slot
/// outside sequence `b`'s rows is not written. Results are bit for bit those of
/// `qk_norm_rope` followed by `decode_attention`.
///
/// Layouts: `qkv` `[batch, (hq + 2·hkv)·D]` as [`crate::rope::qk_norm_rope`] reads it;
/// `positions`, `slots` `[batch]` (as there, one token per sequence); `cos_sin`
/// `[max_pos, D]`; `q_norm`, `k_norm` `[D]`; `flags` [`crate::rope::QK_NORM`] |
/// [`crate::rope::INTERLEAVED`]; caches `[cache_rows = batch·max_seq, hkv·D]`; `lens`,
/// the workspace and `o` as [`decode_attention`].
///
/// Kernel tiles: as [`decode_attention`]. Each also signals the caches' rows of its
/// sequence and columns of its kv head (`split = pid_s`), so a consumer that reads a cache
/// whole starts once every CTA is done. Configs: [`decode_attention`]'s ([`config_index`]).
///
/// Emits what [`decode_attention`] and `qk_norm_rope` do (`ld.global.cg.v4`,
/// `ld.global.nc.v4`, `shfl.sync.bfly`, `st.global.v4`), plus, in the CTA that writes the
/// cache row, `prefetch.global.L2` of its four lines (one thread each) before the wait for
/// `qkv`, and one `bar.sync`.
///
/// # Safety
/// Pointers valid for the shapes above; `splits >= 1`, `max_pos > 0`, `lens[b] <= max_seq`.
#[megaops::kernel(
    block = THREADS,
    smem = (THREADS / 32) * G * (D + 2) * 4,
    tiles(pid_b = batch, pid_h = hkv, pid_s = splits),
    input(qkv[batch, (hq + 2 * hkv) * D] = [pid_b: 1, _]),
    output(k_cache[cache_rows, hkv * D] = [pid_b: max_seq, pid_h: D], split = pid_s),
    output(v_cache[cache_rows, hkv * D] = [pid_b: max_seq, pid_h: D], split = pid_s),
    output(o[batch, hq * D] = [pid_b: 1, pid_h: G * D], split = pid_s),
    tensor(positions[batch]),
    tensor(slots[batch]),
    tensor(lens[batch]),
    tensor(cos_sin[max_pos, D]),
    tensor(q_norm[D]),
    tensor(k_norm[D]),
    scratch(part_o[batch * hq * splits * D]),
    scratch(part_ml[batch * hq * splits * 2]),
    scratch(counters[batch * hkv]),
    check(hq == hkv * G, "this tile config serves G = hq / hkv query heads per kv head: pick it with decode::config_index"),
    check(splits >= 1, "splits must be at least 1"),
    check(max_seq > 0 && batch * max_seq == cache_rows, "the caches need exactly batch·max_seq rows (a CTA signals its sequence's rows)"),
    check(max_pos > 0, "the cos/sin table needs at least one position"),
    configs = decode_configs!,
)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn decode_attention_rope(
    qkv: *const bf16,
    positions: *const u32,
    slots: *const u32,
    lens: *const u32,
    cos_sin: *const f32,
    q_norm: *const bf16,
    k_norm: *const bf16,
    part_o: *mut f32,
    part_ml: *mut f32,
    counters: *mut u32,
    k_cache: *mut bf16,
    v_cache: *mut bf16,
    o: *mut bf16,
    batch: u32,
    hq: u32,
    hkv: u32,
    max_seq: u32,
    cache_rows: u32,
    splits: u32,
    max_pos: u32,
    flags: u32,
    eps: f32,
    scale: f32,
) {
    if hq != hkv * G {
        return;
    }
    // SAFETY: pid_b < batch.
    let (len, pos, slot) = unsafe {
        (
            (*lens.add(pid_b as usize)).min(max_seq),
            (*positions.add(pid_b as usize)).min(max_pos - 1),
            *slots.add(pid_b as usize),
        )
    };
    let chunk = len.div_ceil(splits.max(1));
    let start = (pid_s * chunk).min(len);
    let end = (start + chunk).min(len);
    // The split that reads the new token's row writes it (the last one when nobody reads it).
    let seq0 = pid_b * max_seq;
    let p_new = slot.wrapping_sub(seq0);
    let in_seq = slot >= seq0 && p_new < max_seq;
    let writes = in_seq && ((p_new >= start && p_new < end) || (pid_s + 1 == splits && p_new >= end));
    // The two lines of each cache row this CTA writes are fetched into L2, with their
    // address translation, while the producer of `qkv` still runs.
    let lane = thread_idx_x();
    if writes && lane < 4 {
        let cache = if lane < 2 { k_cache } else { v_cache };
        let at = slot as usize * (hkv * D) as usize + (pid_h * D) as usize + (lane as usize % 2) * 64;
        // SAFETY: a hint on an address inside the cache (`slot` is a row of sequence b,
        // the columns those of kv head h).
        unsafe { prefetch_l2(cache.wrapping_add(at).cast_const()) };
    }
    // SAFETY: the kernel contract; `qkv` was waited for by this statement (it mentions it);
    // the caches are this CTA's own region (rows of sequence b, kv head h).
    unsafe {
        run_rope_split::<{ D as usize }, { G as usize }, { U as usize }, { (THREADS / 32) as usize }, THREADS>(
            qkv,
            cos_sin,
            q_norm,
            k_norm,
            pos,
            flags,
            eps,
            k_cache,
            v_cache,
            o,
            part_o,
            part_ml,
            counters,
            pid_b,
            pid_h,
            pid_s,
            hq,
            hkv,
            splits,
            start,
            end,
            max_seq,
            if writes { slot } else { u32::MAX },
            scale,
        )
    };
}

/// The RoPE inputs of [`decode_attention_rope`] (built inside [`run_rope_split`], whose
/// arguments are scalars so that they stay in registers).
struct RopeIn {
    qkv: *const bf16,
    cos_sin: *const f32,
    q_norm: *const bf16,
    k_norm: *const bf16,
    /// The new token's position (clamped to the table).
    pos: u32,
    flags: u32,
    eps: f32,
}

/// One CTA of [`decode_attention_rope`]: the cache row (when `slot != u32::MAX`), the
/// group's rotated queries, then [`attend`] and [`finish`] as in [`run_split`].
///
/// # Safety
/// As for [`decode_attention_rope`]; `slot` is `u32::MAX` or a row of sequence `b` that no
/// other CTA reads.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn run_rope_split<const D: usize, const G: usize, const U: usize, const NW: usize, const THREADS: u32>(
    qkv: *const bf16,
    cos_sin: *const f32,
    q_norm: *const bf16,
    k_norm: *const bf16,
    pos: u32,
    flags: u32,
    eps: f32,
    k_cache: *mut bf16,
    v_cache: *mut bf16,
    o: *mut bf16,
    part_o: *mut f32,
    part_ml: *mut f32,
    counters: *mut u32,
    b: u32,
    h: u32,
    s: u32,
    hq: u32,
    hkv: u32,
    splits: u32,
    start: u32,
    end: u32,
    max_seq: u32,
    slot: u32,
    scale: f32,
) {
    let job = Job {
        b,
        h,
        s,
        hkv,
        splits,
        start,
        end,
        max_seq,
    };
    let ws = Workspace {
        part_o,
        part_ml,
        counters,
    };
    let rope = RopeIn {
        qkv,
        cos_sin,
        q_norm,
        k_norm,
        pos,
        flags,
        eps,
    };
    let rope = &rope;
    let (r, c) = lane_slot::<D>();
    let row = rope.qkv.wrapping_add(b as usize * (hq + 2 * hkv) as usize * D);
    // SAFETY: row `pos` of the table (clamped by the caller).
    let table = rope.cos_sin.wrapping_add(rope.pos as usize * D);
    let kv_dim = hkv as usize * D;
    if slot != u32::MAX {
        // SAFETY: key and value head h of row b of qkv; the [D] norm weights.
        let (k, v) = unsafe {
            let col = (hq + h) as usize * D + 8 * c;
            let k = rope_head::<D>(rope, ld_global_cg_v4_u32(row.add(col).cast()), rope.k_norm, table);
            (k, ld_global_cg_v4_u32(row.add(col + kv_dim).cast()))
        };
        if warp_id() == 0 && r == 0 {
            let dst = slot as usize * kv_dim + h as usize * D + 8 * c;
            // SAFETY: `slot` is a row of sequence b (caller), column range of kv head h.
            unsafe {
                st_global_v4_u32(k_cache.add(dst).cast(), k);
                st_global_v4_u32(v_cache.add(dst).cast(), v);
            }
        }
    }
    let qscale = scale * LOG2_E;
    let mut qf = [[0.0f32; 8]; G];
    unroll!(G, max 8, |g| {
        let col = (h as usize * G + g) * D + 8 * c;
        // SAFETY: query head h·G + g of row b of qkv.
        let q = unsafe { rope_head::<D>(rope, ld_global_cg_v4_u32(row.add(col).cast()), rope.q_norm, table) };
        qf[g] = unpack8(q).map(|x| x * qscale);
    });
    if slot != u32::MAX {
        // The cache row is read by `attend` below (CTA-uniform branch).
        sync_threads();
    }
    let row0 = job.b as usize * job.max_seq as usize * kv_dim;
    // SAFETY: rows b·max_seq + p, p < len <= max_seq, of the caches.
    let state = unsafe { attend::<D, G, U, NW>(k_cache.add(row0), v_cache.add(row0), &job, &qf) };
    // SAFETY: workspace sized for (batch, hkv, splits, G, D) (kernel contract); dynamic
    // shared memory sized by the annotation.
    unsafe { finish::<D, G, NW, THREADS>(state, &job, &ws, o) };
}

/// One q or k head vector of the new token, 8 elements per lane: QK-norm with `norm_w`
/// (flag [`crate::rope::QK_NORM`]), RoPE at the table row, rounded to bf16 (as
/// `qk_norm_rope` stores it). Every lane of the warp calls it.
///
/// # Safety
/// `norm_w` points to `[D]` bf16; `table` to a row of the cos/sin table.
#[inline(always)]
unsafe fn rope_head<const D: usize>(rope: &RopeIn, raw: [u32; 4], norm_w: *const bf16, table: *const f32) -> [u32; 4] {
    let lpv = (D / 8) as u32;
    let (_, c) = lane_slot::<D>();
    let mut x = unpack8(raw);
    if rope.flags & crate::rope::QK_NORM != 0 {
        // SAFETY: lane c's 8 weights of [D].
        let w = unpack8(unsafe { ld_global_nc_v4_u32(norm_w.add(8 * c).cast()) });
        x = crate::rope::head_norm(x, w, lpv, D as u32, rope.eps, true);
    }
    // SAFETY: forwarded.
    pack8(unsafe { crate::rope::rotate(x, table, c as u32, lpv, rope.flags) })
}

/// What one CTA computes.
struct Job {
    b: u32,
    h: u32,
    s: u32,
    hkv: u32,
    splits: u32,
    /// Positions `start..end` of the sequence.
    start: u32,
    end: u32,
    max_seq: u32,
}

/// The split workspace (see [`DecodeWorkspace`]).
struct Workspace {
    part_o: *mut f32,
    part_ml: *mut f32,
    counters: *mut u32,
}

/// Per-lane online-softmax state: for each query head of the group, the running max `m`
/// (base 2), the running sum `l` and the unnormalised output for this lane's 8 columns.
struct State<const G: usize> {
    m: [f32; G],
    l: [f32; G],
    acc: [[f32; 8]; G],
}

/// Lane `(r, c)` of a warp: `c = lane % (D/8)` holds columns `8c..8c+8`, `r = lane / (D/8)`
/// is the position slot.
#[inline(always)]
fn lane_slot<const D: usize>() -> (usize, usize) {
    let lpr = D / 8;
    let lane = lane_id() as usize;
    (lane / lpr, lane % lpr)
}

/// This lane's 8 columns of the group's `G` query heads, times `qscale`.
///
/// # Safety
/// `q` valid for row `job.b` of `[batch, hkv·G·D]`.
#[inline(always)]
unsafe fn load_q<const D: usize, const G: usize>(q: *const bf16, job: &Job, qscale: f32) -> [[f32; 8]; G] {
    let (_, c) = lane_slot::<D>();
    let row = job.b as usize * job.hkv as usize * G * D;
    core::array::from_fn(|g| {
        let col = (job.h as usize * G + g) * D + 8 * c;
        // SAFETY: in bounds by the caller's contract; 16-byte aligned (D % 8 == 0); `.cg`
        // after the wait.
        unpack8(unsafe { ld_global_cg_v4_u32(q.add(row + col).cast()) }).map(|x| x * qscale)
    })
}

/// Streams positions `job.start..job.end` of kv head `job.h` and returns this lane's
/// online-softmax state (positions interleaved over warps and position slots).
///
/// # Safety
/// `k`, `v` point to position 0 of the sequence; rows `< job.end` readable.
#[inline(always)]
unsafe fn attend<const D: usize, const G: usize, const U: usize, const NW: usize>(
    k: *const bf16,
    v: *const bf16,
    job: &Job,
    qf: &[[f32; 8]; G],
) -> State<G> {
    let lpr = D / 8;
    let rps = 32 / lpr;
    let (r, c) = lane_slot::<D>();
    let warp = warp_id() as usize;
    let stride = job.hkv as usize * D; // elements between positions
    let col = job.h as usize * D + 8 * c;
    let mut st = State {
        m: [f32::NEG_INFINITY; G],
        l: [0.0; G],
        acc: [[0.0; 8]; G],
    };
    let (start, end) = (job.start as usize, job.end as usize);
    // This lane's position in a block is `(warp·U + u)·rps + r`: its first position's K/V
    // addresses are computed once, position u adds `u·rps` rows, a block `NW·U·rps`.
    let step = NW * U * rps;
    let lane_pos = warp * U * rps + r;
    let mut rows = Rows {
        k: k.wrapping_add((start + lane_pos) * stride + col),
        v: v.wrapping_add((start + lane_pos) * stride + col),
        u_stride: rps * stride,
    };
    let mut p0 = start;
    while p0 < end {
        // The lane's position u of this block is in range when `u·rps < end - p0 - lane_pos`.
        let limit = (end - p0) as isize - lane_pos as isize;
        // SAFETY: only positions below `end` are read (the mask).
        unsafe { attend_block::<D, G, U>(&rows, limit, qf, &mut st) };
        rows.advance(step * stride);
        p0 += step;
    }
    // Merge the position slots of the warp: lanes c, c + lpr, ... hold the same columns.
    let mut off = lpr;
    while off < 32 {
        unroll!(G, max 8, |g| {
            let mo = shfl_xor_sync(FULL_MASK, st.m[g], off as u32);
            let lo = shfl_xor_sync(FULL_MASK, st.l[g], off as u32);
            let mut ao = [0.0f32; 8];
            for i in 0..8 {
                ao[i] = shfl_xor_sync(FULL_MASK, st.acc[g][i], off as u32);
            }
            let mn = st.m[g].max(mo);
            // With both maxima -inf, exp2 gives ~2^-125 and l, acc stay 0.
            let (a, b) = (exp2(st.m[g] - mn), exp2(mo - mn));
            st.l[g] = fma(st.l[g], a, lo * b);
            for i in 0..8 {
                st.acc[g][i] = fma(st.acc[g][i], a, ao[i] * b);
            }
            st.m[g] = mn;
        });
        off *= 2;
    }
    st
}

/// A lane's K/V addresses in [`attend`]: position u of the current block at `k + u·u_stride`.
#[derive(Clone, Copy)]
struct Rows {
    k: *const bf16,
    v: *const bf16,
    u_stride: usize,
}

impl Rows {
    /// Moves on by `elems` elements (one block of positions).
    #[inline(always)]
    fn advance(&mut self, elems: usize) {
        self.k = self.k.wrapping_add(elems);
        self.v = self.v.wrapping_add(elems);
    }
}

/// One block of [`attend`] (U positions per lane): loads K and V, the scores of the `G`
/// heads, and the online-softmax update with one rescale. Position u is read only when
/// `u·rps < limit` (`rps` positions per warp and load). (A mask-free body for whole
/// blocks beside this one took these configs past 170 registers, i.e. from three CTAs
/// per SM to two.)
///
/// # Safety
/// `rows` addresses readable positions below `limit`.
#[inline(always)]
unsafe fn attend_block<const D: usize, const G: usize, const U: usize>(
    rows: &Rows,
    limit: isize,
    qf: &[[f32; 8]; G],
    st: &mut State<G>,
) {
    let lpr = D / 8;
    let rps = 32 / lpr;
    let valid = |u: usize| ((u * rps) as isize) < limit;
    // Issue all loads of this block first (U positions per lane, K and V).
    let mut kr = [[0u32; 4]; U];
    let mut vr = [[0u32; 4]; U];
    unroll!(U, max 4, |u| {
        if valid(u) {
            // SAFETY: a position in range (caller's contract); 16-byte aligned.
            unsafe {
                kr[u] = ld_global_cg_v4_u32(rows.k.add(u * rows.u_stride).cast());
                vr[u] = ld_global_cg_v4_u32(rows.v.add(u * rows.u_stride).cast());
            }
        }
    });
    // Scores of the U positions for each head (all lanes of a position get the sum).
    let mut sc = [[f32::NEG_INFINITY; U]; G];
    unroll!(U, max 4, |u| {
        let kf = unpack8(kr[u]);
        unroll!(G, max 8, |g| {
            let mut d = 0.0f32;
            for i in 0..8 {
                d = fma(qf[g][i], kf[i], d);
            }
            let mut off = 1;
            while off < lpr {
                d += shfl_xor_sync(FULL_MASK, d, off as u32);
                off *= 2;
            }
            if valid(u) {
                sc[g][u] = d;
            }
        });
    });
    // Online softmax: one rescale per block. Every exp2 argument is ≤ 0 or -inf (a
    // finite max is subtracted), so the SFU's `ex2.approx` needs no clamp: exp2(-inf) = 0.
    let mut vf = [[0.0f32; 8]; U];
    unroll!(U, max 4, |u| {
        vf[u] = unpack8(vr[u]);
    });
    unroll!(G, max 8, |g| {
        let mut mx = st.m[g];
        unroll!(U, max 4, |u| {
            mx = mx.max(sc[g][u]);
        });
        if mx != f32::NEG_INFINITY {
            let alpha = exp2_approx(st.m[g] - mx);
            st.l[g] *= alpha;
            for i in 0..8 {
                st.acc[g][i] *= alpha;
            }
            unroll!(U, max 4, |u| {
                // Positions out of range: weight 0, and their V registers are 0.
                let pw = exp2_approx(sc[g][u] - mx);
                st.l[g] += pw;
                for i in 0..8 {
                    st.acc[g][i] = fma(pw, vf[u][i], st.acc[g][i]);
                }
            });
            st.m[g] = mx;
        }
    });
}

/// Merges the warps' states into this split's partial, and — in the last CTA of the
/// (b, h) pair — all partials into `o`.
///
/// # Safety
/// As for [`decode_attention`]; dynamic shared memory holds `NW·G·(D + 2)` f32.
#[inline(always)]
unsafe fn finish<const D: usize, const G: usize, const NW: usize, const THREADS: u32>(
    st: State<G>,
    job: &Job,
    ws: &Workspace,
    o: *mut bf16,
) {
    let smem: SharedPtr<f32> = shared::dynamic::<f32>();
    let (acc_s, ml_s) = (smem, smem.add(NW * G * D));
    let (r, c) = lane_slot::<D>();
    let warp = warp_id() as usize;
    if r == 0 {
        unroll!(G, max 8, |g| {
            let base = (warp * G + g) * D + 8 * c;
            for i in 0..8 {
                // SAFETY: slot (warp, g, col) of the buffer, one writer.
                unsafe { acc_s.add(base + i).write(st.acc[g][i]) };
            }
            if c == 0 {
                // SAFETY: as above.
                unsafe {
                    ml_s.add(2 * (warp * G + g)).write(st.m[g]);
                    ml_s.add(2 * (warp * G + g) + 1).write(st.l[g]);
                }
            }
        });
    }
    sync_threads();
    let tid = thread_idx_x() as usize;
    let pair = (job.b * job.hkv + job.h) as usize;
    let split_base = pair * job.splits as usize + job.s as usize;
    // This split's partial: 4 columns per thread and step.
    let mut e = tid;
    while e < G * D / 4 {
        let (g, col) = (4 * e / D, 4 * e % D);
        let (mut mx, mut l, mut acc) = (f32::NEG_INFINITY, 0.0f32, [0.0f32; 4]);
        for w in 0..NW {
            // SAFETY: written before the barrier.
            let (mw, lw) = unsafe { (ml_s.add(2 * (w * G + g)).read(), ml_s.add(2 * (w * G + g) + 1).read()) };
            let mn = mx.max(mw);
            let (a, b) = (exp2(mx - mn), exp2(mw - mn));
            l = fma(l, a, lw * b);
            for i in 0..4 {
                // SAFETY: as above.
                acc[i] = fma(acc[i], a, unsafe { acc_s.add((w * G + g) * D + col + i).read() } * b);
            }
            mx = mn;
        }
        if job.splits == 1 {
            // SAFETY: output columns of this group.
            unsafe { store_out::<D, G>(o, job, g, col, acc, l) };
        } else {
            // SAFETY: slot `split_base` of the workspace.
            unsafe {
                st_global_v4_f32(ws.part_o.add((split_base * G + g) * D + col), acc);
                if col == 0 {
                    st_global_v2_u32(
                        ws.part_ml.add(2 * (split_base * G + g)).cast(),
                        [mx.to_bits(), l.to_bits()],
                    );
                }
            }
        }
        e += THREADS as usize;
    }
    if job.splits == 1 {
        return;
    }
    // Publish the partial; the last CTA of the pair merges.
    sync_threads();
    let mut last = false;
    if tid == 0 {
        fence(AcqRel, Gpu);
        // SAFETY: counter `pair` of the workspace.
        let before = unsafe { atomic::add(ws.counters.add(pair), 1u32, AcqRel, Gpu) };
        last = before == job.splits - 1;
        if last {
            fence(AcqRel, Gpu);
            // SAFETY: as above; every other CTA of the pair has already counted.
            unsafe { atomic::store(ws.counters.add(pair), 0u32, Relaxed, Gpu) };
        }
    }
    if !sync_threads_or(last) {
        return;
    }
    let mut e = tid;
    while e < G * D / 4 {
        let (g, col) = (4 * e / D, 4 * e % D);
        // SAFETY: the partials of every split of this pair are complete (counter).
        let (acc, l) = unsafe { merge_splits::<D, G>(ws, pair, job.splits as usize, g, col) };
        // SAFETY: output columns of this group.
        unsafe { store_out::<D, G>(o, job, g, col, acc, l) };
        e += THREADS as usize;
    }
}

/// Merges the partials of all splits for head `g`, columns `col..col+4`: returns the
/// unnormalised output and the sum, both relative to the global max.
///
/// # Safety
/// Every split's partial of `pair` is written and visible (acquired through the counter).
#[inline(always)]
unsafe fn merge_splits<const D: usize, const G: usize>(
    ws: &Workspace,
    pair: usize,
    splits: usize,
    g: usize,
    col: usize,
) -> ([f32; 4], f32) {
    let (mut mx, mut l, mut acc) = (f32::NEG_INFINITY, 0.0f32, [0.0f32; 4]);
    let mut merge = |ml: [u32; 2], po: [u32; 4]| {
        let (ms, ls) = (f32::from_bits(ml[0]), f32::from_bits(ml[1]));
        let mn = mx.max(ms);
        let (a, b) = (exp2(mx - mn), exp2(ms - mn));
        l = fma(l, a, ls * b);
        for i in 0..4 {
            acc[i] = fma(acc[i], a, f32::from_bits(po[i]) * b);
        }
        mx = mn;
    };
    let at = |s: usize| pair * splits + s;
    let mut s = 0;
    // Four splits per step: eight independent loads in flight.
    while s + 4 <= splits {
        // SAFETY: in bounds (s + 3 < splits); written by other CTAs, read at L2.
        let loads: [([u32; 2], [u32; 4]); 4] = core::array::from_fn(|k| unsafe {
            (
                ld_global_cg_v2_u32(ws.part_ml.add(2 * (at(s + k) * G + g)).cast()),
                ld_global_cg_v4_u32(ws.part_o.add((at(s + k) * G + g) * D + col).cast()),
            )
        });
        for (ml, po) in loads {
            merge(ml, po);
        }
        s += 4;
    }
    while s < splits {
        // SAFETY: as above.
        let (ml, po) = unsafe {
            (
                ld_global_cg_v2_u32(ws.part_ml.add(2 * (at(s) * G + g)).cast()),
                ld_global_cg_v4_u32(ws.part_o.add((at(s) * G + g) * D + col).cast()),
            )
        };
        merge(ml, po);
        s += 1;
    }
    (acc, l)
}

/// Writes `acc / l` (4 columns of head `g`) as bf16; zeros when `l == 0` (empty sequence).
///
/// # Safety
/// `o` valid for row `job.b` of `[batch, hkv·G·D]`.
#[inline(always)]
unsafe fn store_out<const D: usize, const G: usize>(
    o: *mut bf16,
    job: &Job,
    g: usize,
    col: usize,
    acc: [f32; 4],
    l: f32,
) {
    let inv = if l > 0.0 { recip(l) } else { 0.0 };
    let idx = job.b as usize * job.hkv as usize * G * D + (job.h as usize * G + g) * D + col;
    let words = [
        pack_bf16x2(acc[0] * inv, acc[1] * inv),
        pack_bf16x2(acc[2] * inv, acc[3] * inv),
    ];
    // SAFETY: in bounds (caller); 8-byte aligned (col % 4 == 0).
    unsafe { st_global_v2_u32(o.add(idx).cast(), words) };
}

#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

/// Host side: config selection, split heuristic and the workspace.
#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use megaops::{Device, Result, Tensor};

    /// The tile config of `decode_attention` for head dim `d` and `hq / hkv` query heads
    /// per kv head, if there is one.
    pub fn config_index(d: u32, hq: u32, hkv: u32) -> Option<usize> {
        if hkv == 0 || !hq.is_multiple_of(hkv) {
            return None;
        }
        super::decode_attention::CONSTS
            .iter()
            .position(|c| c.D == d && c.G == hq / hkv)
    }

    /// A split count for `batch` sequences of up to `max_len` positions and `hkv` kv
    /// heads on `sms` SMs, the larger of two rules, at most 64:
    /// - one wave of about three CTAs per SM (the residency of the `G = 4`, `D = 128`
    ///   config at ~167 registers), so that no partial second wave lengthens the launch,
    ///   with at least 128 positions per split: below that a CTA's fixed cost (q load,
    ///   merge across warps, partial write) and the combine outweigh the parallelism for
    ///   a kernel timed alone;
    /// - while the CTAs fit one per SM, at least [`SHORT_SPLIT_POSITIONS`] positions per
    ///   split: inside a decode step, where the attention of a short context sits on the
    ///   critical path with most SMs idle, shorter walks per CTA shorten the step.
    pub fn splits_for(batch: u32, hkv: u32, max_len: u32, sms: u32) -> u32 {
        let pairs = (batch * hkv).max(1);
        let wave = ((3 * sms) / pairs).min(max_len.div_ceil(128));
        let short = (sms / pairs).min(max_len.div_ceil(SHORT_SPLIT_POSITIONS));
        wave.max(short).clamp(1, MAX_SPLITS)
    }

    /// Fewest positions per split that [`splits_for`]'s one-CTA-per-SM rule gives a split.
    pub const SHORT_SPLIT_POSITIONS: u32 = 48;

    /// Most splits per (sequence, kv head) that [`splits_for`] picks or a tuner may set.
    pub const MAX_SPLITS: u32 = 64;

    /// The scratch tensors of `decode_attention` for one shape: per-split partial outputs
    /// and (max, sum) pairs, and the zeroed per-(sequence, kv head) counters. One
    /// workspace can serve every layer (launches that share it are ordered by the
    /// runtime's hazard tracking).
    pub struct DecodeWorkspace {
        /// `[batch·hkv·splits·G·D]` f32.
        pub part_o: Tensor<f32>,
        /// `[batch·hkv·splits·G·2]` f32.
        pub part_ml: Tensor<f32>,
        /// `[batch·hkv]` u32, zero between launches.
        pub counters: Tensor<u32>,
        /// The split count the workspace was sized for.
        pub splits: u32,
    }

    impl DecodeWorkspace {
        /// Allocates the workspace for `batch` sequences, `hq`/`hkv` heads of dim `d` and
        /// `splits` splits.
        pub fn new(device: &Device, batch: u32, hq: u32, hkv: u32, d: u32, splits: u32) -> Result<DecodeWorkspace> {
            let n = (batch * hq * splits.max(1)) as usize;
            let counters = Tensor::zeros(device, &[(batch * hkv).max(1) as usize])?;
            // Re-zeroed by the device after a failed launch (see `Device::register_tickets`).
            device.register_tickets(&counters);
            Ok(DecodeWorkspace {
                part_o: Tensor::zeros(device, &[n * d as usize])?,
                part_ml: Tensor::zeros(device, &[n * 2])?,
                counters,
                splits: splits.max(1),
            })
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn short_contexts_split_while_one_wave_of_single_ctas_fits() {
            // 132 SMs, 8 kv heads, short decode (192 positions): 4 splits at batch 1, as
            // long as batch × 8 × splits stays within 132 CTAs; the 128-position rule beyond.
            assert_eq!(splits_for(1, 8, 192, 132), 4);
            assert_eq!(splits_for(4, 8, 192, 132), 4);
            assert_eq!(splits_for(8, 8, 192, 132), 2);
            assert_eq!(splits_for(16, 8, 192, 132), 2);
            // Long contexts keep the three-CTAs-per-SM wave.
            assert_eq!(splits_for(1, 8, 2048, 132), 16);
            assert_eq!(splits_for(1, 8, 16384, 132), 49);
            assert_eq!(splits_for(16, 8, 2048, 132), 3);
            // Never more than MAX_SPLITS, never none.
            assert_eq!(splits_for(1, 1, 1 << 20, 132), MAX_SPLITS);
            assert_eq!(splits_for(64, 64, 1, 132), 1);
        }
    }
}
