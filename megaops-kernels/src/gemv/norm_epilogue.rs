//! [`gemv_add_rmsnorm`]: a projection with the decoder layer's residual add and RMSNorm
//! *behind* it, finished by the CTA of the launch that takes the last ticket, so that the
//! normalised rows reach the next projection without a kernel in between.

use super::engine::{self, CtaJob, Epilogue, GROUP_TOKENS, WarpJob};
use crate::attention::math::{pack8, rsqrt, unpack8, unroll};
use megaops::bf16;
use megaops::device::atomic::{self, Gpu, Relaxed};
use megaops::device::memory::{ld_global_cg_v4_u32, ld_global_nc_v4_u32, st_global_v4_u32};
use megaops::device::shared::{self, SharedPtr};
use megaops::device::static_shared;
use megaops::device::thread::{lane_id, linear_thread_idx, sync_threads, warp_id};
use megaops::device::warp::warp_reduce_sum_f32;

/// Dynamic shared memory of [`gemv_add_rmsnorm`], bytes: the engine's reduction buffer,
/// then `16 × BN` f32 squares of the CTA's residual sums.
pub const fn smem_bytes(bn: u32, wk: u32) -> u32 {
    engine::smem_bytes(bn, wk, 1) + 4 * GROUP_TOKENS * bn
}

/// `y = x · Wᵀ` followed by the residual add and RMSNorm of the whole output:
/// `res_out = bf16(bf16(y) + res)`, `xn = bf16(res_out · rstd · norm_w)` with
/// `rstd = 1 / sqrt(mean(res_out²) + eps)` per row (as
/// [`norm::add_rmsnorm`](crate::norm::add_rmsnorm), up to the order of the f32 sum of
/// squares), in one launch.
///
/// Every CTA computes its `BN` columns of `y` as [`gemv`](super::gemv) does (into the
/// scratch `y`), adds the residual to them and writes those columns of `res_out`, and
/// writes each row's sum of squares over them to `partials`; then it takes a ticket
/// ([`engine::last_to_arrive`]). The CTA that takes the last one adds each row's partial
/// sums (in CTA order, the same bits every run), and writes every row of `xn` from
/// `res_out`, then resets the ticket. Both outputs are signalled by every CTA
/// (`split = pid_n`), so a consumer sees them ready once the last CTA has signalled. The
/// first `PF` batches of W are loaded before the waits; the residual `res`, written kernels
/// earlier, is waited for before `x`.
///
/// Layouts (row-major): `x` `[m, k]` (the sublayer input, e.g. attention's output);
/// `w` `[n, k]`; `res`, `res_out`, `xn` `[m, n]`; `norm_w` `[n]`; scratch: `y` `[m, n]`
/// bf16, `partials` `[m, n.div_ceil(BN)]` f32 and `ticket` one u32, **zero before the first
/// launch** (each complete launch leaves it zero; register it with
/// `Device::register_tickets` so that a failed launch does not leave it set). At most 16
/// rows and `m · n ≤ NORM_PROLOGUE_MAX_ELEMS`. Configs: [`gemv`](super::gemv)'s.
///
/// Emits what [`gemv`](super::gemv) does, then `ld.global.cg` of the residual,
/// `st.global`, `shfl.sync.bfly`, `fence.acq_rel.gpu`, `atom.acq_rel.gpu.global.add.u32`
/// and `bar.red.or`, and in the last CTA `ld.global.cg.v4` / `ld.global.nc.v4` /
/// `st.global.v4` (scalar when `n % 8 != 0` or a pointer is not 16-byte aligned).
///
/// # Safety
/// Pointers valid for the shapes above; no other launch that may run at the same time
/// uses the scratch.
#[megaops::kernel(
    block = 2 * BN * WK,
    smem = crate::gemv::norm_epilogue::smem_bytes(BN, WK),
    min_ctas = MIN_CTAS,
    tiles(pid_n = n.div_ceil(BN)),
    input(res[m, n] = [_, _]),
    input(x[m, k] = [_, _]),
    output(xn[m, n] = [_, _], split = pid_n),
    output(res_out[m, n] = [_, _], split = pid_n),
    tensor(w[n, k]),
    tensor(norm_w[n]),
    scratch(y[m * n]),
    scratch(partials[m * n.div_ceil(BN)]),
    scratch(ticket[1]),
    check(n > 0, "the output width n must be positive"),
    check(m <= 16, "the norm behind the projection takes at most 16 rows"),
    check(m * n <= crate::gemv::NORM_PROLOGUE_MAX_ELEMS, "one CTA normalises the whole output: m · n must be at most gemv::NORM_PROLOGUE_MAX_ELEMS"),
    configs = gemv_configs!,
)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemv_add_rmsnorm(
    x: *const bf16,
    w: *const bf16,
    res: *const bf16,
    norm_w: *const bf16,
    y: *mut bf16,
    partials: *mut f32,
    ticket: *mut u32,
    xn: *mut bf16,
    res_out: *mut bf16,
    m: u32,
    n: u32,
    k: u32,
    eps: f32,
) {
    let cta = CtaJob {
        n0: pid_n * BN,
        split: 0,
        splits: 1,
    };
    let job = WarpJob::<1>::new::<BN, WK, U>([w], n, k, cta);
    #[prefetch]
    // SAFETY: `w` is `[n, k]` (kernel contract); rows past `n` are not read.
    let ring = unsafe { job.prefetch::<U, PF>() };
    // The residual was written kernels ago: waiting for it here costs no time on the path
    // from `x`'s producer.
    let residual = res;
    let ep = Epilogue {
        out: y,
        ws: core::ptr::null_mut(),
        counters: core::ptr::null_mut(),
        m,
        n,
        tile: pid_n,
    };
    let ctas = n.div_ceil(BN);
    // SAFETY: a CTA of 2·BN·WK threads with smem_bytes(BN, WK) bytes (the annotation);
    // pointers valid for the shapes (kernel contract); no split, so no workspace; m ≤ 16,
    // so the reduction buffer holds the whole output tile after it.
    unsafe {
        engine::run::<BN, WK, 1, U, PF, false, bf16>(x, &job, cta, ring, &ep);
        add_residual::<BN, WK>(residual, res_out, partials, cta.n0, pid_n, ctas, m, n);
    }
    // SAFETY: every thread calls it after its stores; one ticket for the launch's `ctas`
    // CTAs (kernel contract).
    if unsafe { engine::last_to_arrive(ticket, ctas) } {
        // SAFETY: the last CTA alone writes `xn`, from `res_out` and `partials`, complete
        // and acquired by the ticket.
        unsafe {
            normalise::<{ 2 * BN * WK }>(res_out, partials, norm_w, xn, ctas, m, n, eps);
            if linear_thread_idx() == 0 {
                // Every CTA has taken its ticket; the next launch is ordered after this one.
                atomic::global::store(ticket, 0u32, Relaxed, Gpu);
            }
        }
    }
}

/// The CTA's columns `n0 .. n0 + BN` of the residual sum: `res_out = bf16(bf16(y) + res)`
/// with `y` from the engine's reduction buffer (the bits the engine stored), and per row
/// the sum of their squares into `partials[row · ctas + tile]`. Ends with a barrier.
///
/// # Safety
/// Every thread of a CTA of `2 · BN · WK` threads calls it right after [`engine::run`]
/// with `m ≤ 16`; `res`, `res_out` `[m, n]`, `partials` `[m, ctas]`; the CTA's dynamic
/// shared memory is [`smem_bytes`]`(BN, WK)`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn add_residual<const BN: u32, const WK: u32>(
    res: *const bf16,
    res_out: *mut bf16,
    partials: *mut f32,
    n0: u32,
    tile: u32,
    ctas: u32,
    m: u32,
    n: u32,
) {
    let threads = 2 * BN * WK;
    let red = shared::dynamic::<f32>();
    let squares: SharedPtr<f32> = red.add((engine::smem_bytes(BN, WK, 1) / 4) as usize);
    let mut e = linear_thread_idx();
    while e < GROUP_TOKENS * BN {
        let (token, col) = (e / BN, e % BN);
        let ncol = n0 + col;
        let mut sq = 0.0f32;
        if token < m && ncol < n {
            let at = token as usize * n as usize + ncol as usize;
            // SAFETY: token < m ≤ 16 and col < BN (the engine's buffer, after its barrier);
            // `at` inside `[m, n]`; `res` was waited for, so a plain load sees it.
            unsafe {
                let y = bf16::from_f32(engine::column_sums::<BN, WK, 1>(red, token, col)[0]);
                let h = bf16::from_f32(y.to_f32() + res.add(at).read().to_f32());
                res_out.add(at).write(h);
                let f = h.to_f32();
                sq = f * f;
            }
        }
        // SAFETY: e < 16 · BN, inside the squares region; read after the barrier.
        unsafe { squares.add(e as usize).write(sq) };
        e += threads;
    }
    sync_threads();
    // Warp `w` sums rows w, w + warps, …: lane `l` columns l, l + 32, … (BN ≤ 128).
    let (warps, lane) = (threads / 32, lane_id());
    let mut row = warp_id();
    while row < m {
        let mut s = 0.0f32;
        let mut col = lane;
        while col < BN {
            // SAFETY: written before the barrier.
            s += unsafe { squares.add((row * BN + col) as usize).read() };
            col += 32;
        }
        let s = warp_reduce_sum_f32(s);
        if lane == 0 {
            // SAFETY: row < m, tile < ctas.
            unsafe { partials.add((row * ctas + tile) as usize).write(s) };
        }
        row += warps;
    }
}

/// The last CTA: each row's `rstd` from its `ctas` partial sums (lane `l` adds partials
/// `l, l + 32, …` in order, then a butterfly: the same bits every run), then
/// `xn = bf16(res_out · rstd · norm_w)` for all `m · n` elements.
///
/// # Safety
/// Every thread of a CTA of `THREADS` threads calls it; `res_out`, `xn` `[m, n]`,
/// `partials` `[m, ctas]` complete and acquired; `m ≤ 16`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn normalise<const THREADS: u32>(
    res_out: *const bf16,
    partials: *const f32,
    norm_w: *const bf16,
    xn: *mut bf16,
    ctas: u32,
    m: u32,
    n: u32,
    eps: f32,
) {
    let rstd = static_shared!(NORM_AFTER_RSTD: [f32; 16]);
    let (warps, lane) = (THREADS / 32, lane_id());
    let mut row = warp_id();
    while row < m {
        let mut s = 0.0f32;
        let mut c = lane;
        while c < ctas {
            // SAFETY: inside `[m, ctas]`; a strong load at GPU scope reads L2, where the
            // other CTAs' released partials are.
            s += unsafe { atomic::global::load(partials.add((row * ctas + c) as usize), Relaxed, Gpu) };
            c += 32;
        }
        let total = warp_reduce_sum_f32(s);
        if lane == 0 {
            // SAFETY: row < 16; read after the barrier.
            unsafe { rstd.at(row as usize).write(rsqrt(total / n as f32 + eps)) };
        }
        row += warps;
    }
    sync_threads();
    let tid = linear_thread_idx() as usize;
    let addrs = res_out as usize | norm_w as usize | xn as usize;
    if n.is_multiple_of(8) && addrs.is_multiple_of(16) {
        let (nvec, row_vecs) = ((m * n / 8) as usize, (n / 8) as usize);
        let step = THREADS as usize;
        let mut base = tid;
        while base < nvec {
            // Four vectors a thread per round: their loads in flight together.
            let mut h = [[0u32; 4]; 4];
            let mut wv = [[0u32; 4]; 4];
            unroll!(4, max 4, |i| {
                let v = base + i * step;
                if v < nvec {
                    // SAFETY: vector v inside `[m, n]`, aligned (checked); the weight's
                    // vector `v mod (n / 8)` inside `[n]`.
                    unsafe {
                        h[i] = ld_global_cg_v4_u32(res_out.add(8 * v).cast());
                        wv[i] = ld_global_nc_v4_u32(norm_w.add(8 * (v % row_vecs)).cast());
                    }
                }
            });
            unroll!(4, max 4, |i| {
                let v = base + i * step;
                if v < nvec {
                    // SAFETY: row < m ≤ 16, written before the barrier.
                    let r = unsafe { rstd.at(v / row_vecs).read() };
                    let (f, wf) = (unpack8(h[i]), unpack8(wv[i]));
                    // SAFETY: as for the loads.
                    unsafe { st_global_v4_u32(xn.add(8 * v).cast(), pack8(core::array::from_fn(|j| f[j] * r * wf[j]))) };
                }
            });
            base += 4 * step;
        }
    } else {
        let total = (m * n) as usize;
        let mut i = tid;
        while i < total {
            // SAFETY: i < m · n; row < m ≤ 16.
            unsafe {
                let r = rstd.at(i / n as usize).read();
                let h = core::ptr::read_volatile(res_out.add(i)).to_f32();
                let wf = (*norm_w.add(i % n as usize)).to_f32();
                xn.add(i).write(bf16::from_f32(h * r * wf));
            }
            i += THREADS as usize;
        }
    }
}
