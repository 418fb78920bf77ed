//! RMSNorm, alone and fused with the residual add of a decoder layer.
//!
//! A Llama-3 / Qwen3 decoder layer keeps a bf16 residual stream `h` and normalises it
//! before attention and before the MLP:
//!
//! ```text
//! y   = rmsnorm(h) · w_attn          (rmsnorm, first layer; or add_rmsnorm with the previous MLP)
//! h'  = h + attn_out;  y = rmsnorm(h') · w_mlp      (add_rmsnorm)
//! h'' = h' + mlp_out;  y = rmsnorm(h'') · w_next     (add_rmsnorm)
//! ```
//!
//! so [`add_rmsnorm`] takes the sublayer output `x` and the residual `res`, writes the new
//! residual `res_out = bf16(x + res)` and `y = bf16(res_out · rstd · w)` with
//! `rstd = 1 / sqrt(mean(res_out²) + eps)`, all arithmetic in f32 on the bf16-rounded sum
//! (the value the residual stream stores, as in Hugging Face's bf16 models).
//!
//! Both kernels: one CTA per kernel tile of `BM` rows (processed one after the other by
//! the whole CTA); any hidden size `h`. When `h` is a multiple of 8 and every pointer is
//! 16-byte aligned, rows move as 16-byte vectors (`ld.global.cg.v4` for the synchronised
//! inputs, `ld.global.nc.v4` for the weight) and up to `V · THREADS · 8` elements of a row
//! stay in registers between the two passes; longer rows re-read their tail from L2, and
//! other shapes take a scalar path. In-place use is allowed with plain tensors
//! (`res_out` may be `res`, `y` may be `x`): every thread reads its elements before it
//! writes them.

use crate::attention::math::{fma, pack8, rsqrt, unpack8, unroll};
use megaops::bf16;
use megaops::device::memory::{ld_global_cg_v4_u32, ld_global_nc_v4_u32, st_global_v4_u32};
use megaops::device::static_shared;
use megaops::device::thread::{lane_id, sync_threads, thread_idx_x, warp_id};
use megaops::device::warp::warp_reduce_sum_f32;

/// The tile configs of [`rmsnorm`] and [`add_rmsnorm`] (`configs = norm_configs!`): one
/// list, so that one config choice serves both.
macro_rules! norm_configs {
    (#[$($kernel:tt)*] $($item:tt)*) => {
        #[$($kernel)*]
        #[config(BM = 1, THREADS = 256, V: usize = 4)]
        #[config(BM = 4, THREADS = 256, V: usize = 4)]
        $($item)*
    };
}

/// `y = rmsnorm(x) · w` over rows of `h` elements: `y[r, i] = x[r, i] · rstd_r · w[i]`,
/// `rstd_r = 1 / sqrt(mean_i(x[r, i]²) + eps)`, f32 arithmetic, bf16 in and out.
///
/// Layouts: `x`, `y`: `[m, h]` row-major bf16; `w`: `[h]` bf16 (a weight: read before the
/// wait for `x`'s data tiles is over, through the read-only path).
///
/// Kernel tile `pid_m`: rows `pid_m·BM ..` of `x` and `y`. Configs: `BM = 1` (decode:
/// one CTA per token) and `BM = 4` (prefill: fewer, longer CTAs).
///
/// # Safety
/// Pointers valid for the shapes above; `h > 0`.
#[megaops::kernel(
    block = THREADS,
    input(x[m, h] = [pid_m: BM, _]),
    output(y[m, h] = [pid_m: BM, _]),
    tensor(w[h]),
    check(h > 0, "the hidden size h must be positive"),
    configs = norm_configs!,
)]
pub unsafe fn rmsnorm(x: *const bf16, w: *const bf16, y: *mut bf16, m: u32, h: u32, eps: f32) {
    let row0 = pid_m * BM;
    let rows = BM.min(m - row0);
    let mut r = 0;
    while r < rows {
        let off = ((row0 + r) as usize) * (h as usize);
        // SAFETY: row `row0 + r < m` of `x` and `y` (kernel contract).
        unsafe {
            norm_row::<THREADS, V>(
                Row {
                    x: x.add(off),
                    res: core::ptr::null(),
                    res_out: core::ptr::null_mut(),
                },
                w,
                y.add(off),
                h,
                eps,
            )
        };
        r += 1;
    }
}

/// The fused residual add and RMSNorm of a decoder layer: `res_out = bf16(x + res)` and
/// `y = bf16(res_out · rstd · w)`, `rstd = 1 / sqrt(mean(res_out²) + eps)` per row, f32
/// arithmetic on the bf16-rounded sum (see the module docs).
///
/// Layouts: `x` (the sublayer output), `res` (residual stream in), `res_out` (residual
/// stream out), `y`: `[m, h]` row-major bf16; `w`: `[h]` bf16.
///
/// Kernel tile `pid_m`: rows `pid_m·BM ..` of all four tensors; both outputs are signalled
/// per kernel tile. Configs: `BM = 1` and `BM = 4`, as [`rmsnorm`].
///
/// # Safety
/// Pointers valid for the shapes above; `h > 0`.
#[megaops::kernel(
    block = THREADS,
    input(x[m, h] = [pid_m: BM, _]),
    input(res[m, h] = [pid_m: BM, _]),
    output(y[m, h] = [pid_m: BM, _]),
    output(res_out[m, h] = [pid_m: BM, _]),
    tensor(w[h]),
    check(h > 0, "the hidden size h must be positive"),
    configs = norm_configs!,
)]
pub unsafe fn add_rmsnorm(
    x: *const bf16,
    res: *const bf16,
    w: *const bf16,
    y: *mut bf16,
    res_out: *mut bf16,
    m: u32,
    h: u32,
    eps: f32,
) {
    let row0 = pid_m * BM;
    let rows = BM.min(m - row0);
    let mut r = 0;
    while r < rows {
        let off = ((row0 + r) as usize) * (h as usize);
        // SAFETY: row `row0 + r < m` of every tensor (kernel contract).
        unsafe {
            norm_row::<THREADS, V>(
                Row {
                    x: x.add(off),
                    res: res.add(off),
                    res_out: res_out.add(off),
                },
                w,
                y.add(off),
                h,
                eps,
            )
        };
        r += 1;
    }
}

/// The input side of one row: `x`, and optionally the residual `res` to add and where the
/// sum goes (`res_out`); both null for a plain RMSNorm.
#[derive(Clone, Copy)]
struct Row {
    x: *const bf16,
    res: *const bf16,
    res_out: *mut bf16,
}

impl Row {
    fn fused(&self) -> bool {
        !self.res.is_null()
    }
}

/// Normalises one row of `h` elements with the whole CTA (every thread must call it).
///
/// # Safety
/// The row pointers are valid for `h` elements; `THREADS` is the CTA size.
#[inline(always)]
unsafe fn norm_row<const THREADS: u32, const V: usize>(row: Row, w: *const bf16, y: *mut bf16, h: u32, eps: f32) {
    let addrs = row.x as usize | row.res as usize | row.res_out as usize | w as usize | y as usize;
    if h.is_multiple_of(8) && addrs.is_multiple_of(16) {
        // SAFETY: forwarded; alignment checked above.
        unsafe { norm_row_vec::<THREADS, V>(row, w, y, h, eps) }
    } else {
        // SAFETY: forwarded.
        unsafe { norm_row_scalar::<THREADS>(row, w, y, h, eps) }
    }
}

/// Loads vector `k` (elements `8k..8k+8`) of the row, adds the residual and stores the
/// sum when fused; returns the (bf16-rounded) values as packed words.
///
/// # Safety
/// `8k + 8 <= h`, 16-byte aligned pointers.
#[inline(always)]
unsafe fn load_sum(row: Row, k: usize) -> [u32; 4] {
    // SAFETY: in bounds and aligned (caller); inputs were waited for, so `.cg` (L2) loads
    // see the producer's data.
    unsafe {
        let a = ld_global_cg_v4_u32(row.x.add(8 * k).cast());
        if !row.fused() {
            return a;
        }
        let b = ld_global_cg_v4_u32(row.res.add(8 * k).cast());
        let (a, b) = (unpack8(a), unpack8(b));
        let s = pack8(core::array::from_fn(|i| a[i] + b[i]));
        st_global_v4_u32(row.res_out.add(8 * k).cast(), s);
        s
    }
}

/// `Σ v²` of eight packed bf16.
#[inline(always)]
fn sum_sq(v: [u32; 4]) -> f32 {
    let f = unpack8(v);
    let mut s = 0.0;
    for x in f {
        s = fma(x, x, s);
    }
    s
}

/// Writes `bf16(v · rstd · w)` for vector `k`.
///
/// # Safety
/// As for [`load_sum`].
#[inline(always)]
unsafe fn store_norm(v: [u32; 4], w: *const bf16, y: *mut bf16, k: usize, rstd: f32) {
    // SAFETY: in bounds and aligned (caller); `w` is a weight nobody writes meanwhile.
    unsafe {
        let wv = unpack8(ld_global_nc_v4_u32(w.add(8 * k).cast()));
        let f = unpack8(v);
        st_global_v4_u32(
            y.add(8 * k).cast(),
            pack8(core::array::from_fn(|i| f[i] * rstd * wv[i])),
        );
    }
}

/// [`norm_row`] on 16-byte vectors.
///
/// # Safety
/// As for [`norm_row`], with `h % 8 == 0` and 16-byte aligned pointers.
#[inline(always)]
unsafe fn norm_row_vec<const THREADS: u32, const V: usize>(row: Row, w: *const bf16, y: *mut bf16, h: u32, eps: f32) {
    let tid = thread_idx_x() as usize;
    let nvec = (h / 8) as usize;
    let step = THREADS as usize;
    let mut stash = [[0u32; 4]; V];
    let mut ss = 0.0f32;
    // Pass 1: the first V vectors of each thread stay in registers (copies of the code
    // per `v`, so the stash is never indexed at run time), the rest are re-read.
    unroll!(V, max 8, |v| {
        let k = v * step + tid;
        if k < nvec {
            // SAFETY: k < nvec.
            stash[v] = unsafe { load_sum(row, k) };
            ss += sum_sq(stash[v]);
        }
    });
    let mut k = V * step + tid;
    while k < nvec {
        // SAFETY: k < nvec.
        ss += sum_sq(unsafe { load_sum(row, k) });
        k += step;
    }
    let rstd = rsqrt(block_sum::<THREADS>(ss) / h as f32 + eps);
    // Pass 2.
    unroll!(V, max 8, |v| {
        let k = v * step + tid;
        if k < nvec {
            // SAFETY: k < nvec.
            unsafe { store_norm(stash[v], w, y, k, rstd) };
        }
    });
    let mut k = V * step + tid;
    while k < nvec {
        // SAFETY: k < nvec; the sum at `res_out` was written by this thread in pass 1
        // (program order makes it visible to this load).
        let v = unsafe {
            if row.fused() {
                ld_global_cg_v4_u32(row.res_out.add(8 * k).cast())
            } else {
                ld_global_cg_v4_u32(row.x.add(8 * k).cast())
            }
        };
        // SAFETY: k < nvec.
        unsafe { store_norm(v, w, y, k, rstd) };
        k += step;
    }
}

/// [`norm_row`] one element at a time (any `h`, any alignment).
///
/// # Safety
/// As for [`norm_row`].
#[inline(always)]
unsafe fn norm_row_scalar<const THREADS: u32>(row: Row, w: *const bf16, y: *mut bf16, h: u32, eps: f32) {
    let tid = thread_idx_x() as usize;
    let (h, step) = (h as usize, THREADS as usize);
    let value = |i: usize| -> bf16 {
        // SAFETY: i < h; volatile loads are not served from a stale L1 line.
        unsafe {
            let a = core::ptr::read_volatile(row.x.add(i));
            if row.fused() {
                let b = core::ptr::read_volatile(row.res.add(i));
                bf16::from_f32(to_f32(a) + to_f32(b))
            } else {
                a
            }
        }
    };
    let mut ss = 0.0f32;
    let mut i = tid;
    while i < h {
        let v = value(i);
        if row.fused() {
            // SAFETY: i < h.
            unsafe { row.res_out.add(i).write(v) };
        }
        ss += to_f32(v) * to_f32(v);
        i += step;
    }
    let rstd = rsqrt(block_sum::<THREADS>(ss) / h as f32 + eps);
    let mut i = tid;
    while i < h {
        // SAFETY: i < h; `res_out[i]` was written by this thread above.
        let v = unsafe {
            if row.fused() {
                core::ptr::read_volatile(row.res_out.add(i))
            } else {
                value(i)
            }
        };
        // SAFETY: i < h.
        unsafe { y.add(i).write(bf16::from_f32(to_f32(v) * rstd * to_f32(*w.add(i)))) };
        i += step;
    }
}

/// bf16 → f32 (exact).
#[inline(always)]
fn to_f32(x: bf16) -> f32 {
    crate::attention::math::bf16_bits_to_f32(x.to_bits())
}

/// Sum of `v` over the CTA, returned to every thread (same bits everywhere). Contains two
/// barriers: every thread of the CTA must call it.
#[inline(always)]
pub(crate) fn block_sum<const THREADS: u32>(v: f32) -> f32 {
    let partial = static_shared!(BLOCK_SUM: [f32; 32]);
    let v = warp_reduce_sum_f32(v);
    let warps = THREADS.div_ceil(32) as usize;
    if lane_id() == 0 {
        // SAFETY: one writer per warp slot; read only after the barrier.
        unsafe { partial.at(warp_id() as usize).write(v) };
    }
    sync_threads();
    let mut total = 0.0;
    for i in 0..warps {
        // SAFETY: written before the barrier; nobody writes until the next barrier.
        total += unsafe { partial.at(i).read() };
    }
    // The next call overwrites the slots only after everyone has read them.
    sync_threads();
    total
}
