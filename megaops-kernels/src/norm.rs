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
//! Both kernels: one CTA per kernel tile of `BM` rows; any hidden size `h`. A tile of fewer
//! rows than the CTA has warps is processed one row after the other by the whole CTA (a
//! block-wide sum, two barriers a row); a tile of at least as many rows, by one warp per
//! row (a butterfly sum, no barrier), each warp's loads of a batch of its row issued
//! together. When `h` is a multiple of 8 and every pointer is 16-byte aligned, rows move
//! as 16-byte vectors (`ld.global.cg.v4` for the synchronised inputs, `ld.global.nc.v4`
//! for the weight) and up to `V · THREADS · 8` (whole CTA) or `V · 256` (one warp)
//! elements of a row stay in registers between the two passes; longer rows re-read their
//! tail from L2, and other shapes take a scalar path. In-place use is allowed with plain tensors
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
        #[config(BM = 1, THREADS = 32, V: usize = 8)]
        #[config(BM = 8, THREADS = 256, V: usize = 8)]
        #[config(BM = 16, THREADS = 256, V: usize = 8)]
        $($item)*
    };
}

/// `y = rmsnorm(x) · w` over rows of `h` elements: `y[r, i] = x[r, i] · rstd_r · w[i]`,
/// `rstd_r = 1 / sqrt(mean_i(x[r, i]²) + eps)`, f32 arithmetic, bf16 in and out.
///
/// Layouts: `x`, `y`: `[m, h]` row-major bf16; `w`: `[h]` bf16 (a weight: read before the
/// wait for `x`'s data tiles is over, through the read-only path).
///
/// Kernel tile `pid_m`: rows `pid_m·BM ..` of `x` and `y`. Configs: the whole CTA on a
/// row, `BM = 1` (decode: one CTA per token) and `BM = 4` (fewer, longer CTAs); one warp
/// per row, `BM = 1` with one warp a CTA, and `BM = 8` and `16` with eight.
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
    let row = |off: usize| Row {
        x: x.wrapping_add(off),
        res: core::ptr::null(),
        res_out: core::ptr::null_mut(),
    };
    // SAFETY: rows `row0 .. row0 + rows` (< m) of `x` and `y` (kernel contract).
    unsafe { norm_rows::<BM, THREADS, V>(row, w, y, row0, rows, h, eps) };
}

/// The fused residual add and RMSNorm of a decoder layer: `res_out = bf16(x + res)` and
/// `y = bf16(res_out · rstd · w)`, `rstd = 1 / sqrt(mean(res_out²) + eps)` per row, f32
/// arithmetic on the bf16-rounded sum (see the module docs).
///
/// Layouts: `x` (the sublayer output), `res` (residual stream in), `res_out` (residual
/// stream out), `y`: `[m, h]` row-major bf16; `w`: `[h]` bf16.
///
/// Kernel tile `pid_m`: rows `pid_m·BM ..` of all four tensors; both outputs are signalled
/// per kernel tile. Configs as [`rmsnorm`]'s.
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
    let row = |off: usize| Row {
        x: x.wrapping_add(off),
        res: res.wrapping_add(off),
        res_out: res_out.wrapping_add(off),
    };
    // SAFETY: rows `row0 .. row0 + rows` (< m) of every tensor (kernel contract).
    unsafe { norm_rows::<BM, THREADS, V>(row, w, y, row0, rows, h, eps) };
}

/// Normalises rows `row0 .. row0 + rows` of `h` elements (`row(off)`: the row pointers at
/// element offset `off`; `y` the output's base): with the whole CTA one row after the
/// other ([`norm_row`]) when `BM` is below the CTA's warp count, else with one warp per
/// row ([`norm_row_warp`]; warp `w` takes rows `w, w + warps, …`), which needs no barrier.
///
/// # Safety
/// The rows are valid for `h` elements each; every thread of the CTA calls it.
#[inline(always)]
unsafe fn norm_rows<const BM: u32, const THREADS: u32, const V: usize>(
    row: impl Fn(usize) -> Row,
    w: *const bf16,
    y: *mut bf16,
    row0: u32,
    rows: u32,
    h: u32,
    eps: f32,
) {
    let warps = THREADS / 32;
    let (mut r, step) = if BM >= warps { (warp_id(), warps) } else { (0, 1) };
    while r < rows {
        let off = ((row0 + r) as usize) * (h as usize);
        // SAFETY: row `row0 + r < m` (caller).
        unsafe {
            if BM >= warps {
                norm_row_warp::<V>(row(off), w, y.add(off), h, eps)
            } else {
                norm_row::<THREADS, V>(row(off), w, y.add(off), h, eps)
            }
        };
        r += step;
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

/// Normalises one row of `h` elements with one warp (every lane must call it; no
/// barrier): on 16-byte vectors (`h % 8 == 0`, aligned pointers) in batches of `V`
/// vectors a lane, whose `x` and `res` loads are all issued before any sum is formed, so
/// a batch costs one memory round trip; the first batch's sums stay in registers for the
/// second pass, later batches re-read theirs (`res_out`, or `x` when not fused). The row
/// sum is a butterfly (`shfl.sync.bfly`). Other shapes take [`norm_row_scalar_warp`].
///
/// Emits `ld.global.cg.v4` (`x`, `res`, the re-reads), `ld.global.nc.v4` (`w`) and
/// `st.global.v4`.
///
/// # Safety
/// The row pointers are valid for `h` elements; the warp is converged.
#[inline(always)]
unsafe fn norm_row_warp<const V: usize>(row: Row, w: *const bf16, y: *mut bf16, h: u32, eps: f32) {
    let addrs = row.x as usize | row.res as usize | row.res_out as usize | w as usize | y as usize;
    if !(h.is_multiple_of(8) && addrs.is_multiple_of(16)) {
        // SAFETY: forwarded.
        unsafe { norm_row_scalar_warp(row, w, y, h, eps) };
        return;
    }
    let lane = lane_id() as usize;
    let nvec = (h / 8) as usize;
    let batch = 32 * V;
    let mut stash = [[0u32; 4]; V];
    let mut ss = 0.0f32;
    let mut base = 0;
    while base < nvec {
        let mut a = [[0u32; 4]; V];
        let mut b = [[0u32; 4]; V];
        unroll!(V, max 8, |v| {
            let k = base + 32 * v + lane;
            if k < nvec {
                // SAFETY: k < nvec; the inputs were waited for, so `.cg` (L2) loads see
                // the producer's data.
                unsafe {
                    a[v] = ld_global_cg_v4_u32(row.x.add(8 * k).cast());
                    if row.fused() {
                        b[v] = ld_global_cg_v4_u32(row.res.add(8 * k).cast());
                    }
                }
            }
        });
        unroll!(V, max 8, |v| {
            let k = base + 32 * v + lane;
            if k < nvec {
                let s = if row.fused() {
                    let (fa, fb) = (unpack8(a[v]), unpack8(b[v]));
                    let s = pack8(core::array::from_fn(|i| fa[i] + fb[i]));
                    // SAFETY: k < nvec.
                    unsafe { st_global_v4_u32(row.res_out.add(8 * k).cast(), s) };
                    s
                } else {
                    a[v]
                };
                ss += sum_sq(s);
                if base == 0 {
                    stash[v] = s;
                }
            }
        });
        base += batch;
    }
    let rstd = rsqrt(warp_reduce_sum_f32(ss) / h as f32 + eps);
    let mut base = 0;
    while base < nvec {
        let mut s = [[0u32; 4]; V];
        let mut wv = [[0u32; 4]; V];
        unroll!(V, max 8, |v| {
            let k = base + 32 * v + lane;
            if k < nvec {
                // SAFETY: k < nvec; `w` is a weight nobody writes meanwhile; `res_out[k]`
                // was written by this lane in the first pass (program order), and `x[k]`
                // is read before this lane writes `y[k]` (in-place use).
                unsafe {
                    wv[v] = ld_global_nc_v4_u32(w.add(8 * k).cast());
                    s[v] = if base == 0 {
                        stash[v]
                    } else if row.fused() {
                        ld_global_cg_v4_u32(row.res_out.add(8 * k).cast())
                    } else {
                        ld_global_cg_v4_u32(row.x.add(8 * k).cast())
                    };
                }
            }
        });
        unroll!(V, max 8, |v| {
            let k = base + 32 * v + lane;
            if k < nvec {
                let (f, wf) = (unpack8(s[v]), unpack8(wv[v]));
                // SAFETY: k < nvec.
                unsafe {
                    st_global_v4_u32(
                        y.add(8 * k).cast(),
                        pack8(core::array::from_fn(|i| f[i] * rstd * wf[i])),
                    )
                };
            }
        });
        base += batch;
    }
}

/// [`norm_row_warp`] one element a lane at a time (any `h`, any alignment).
///
/// # Safety
/// As for [`norm_row_warp`].
#[inline(always)]
unsafe fn norm_row_scalar_warp(row: Row, w: *const bf16, y: *mut bf16, h: u32, eps: f32) {
    let lane = lane_id() as usize;
    let h = h as usize;
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
    let mut i = lane;
    while i < h {
        let v = value(i);
        if row.fused() {
            // SAFETY: i < h.
            unsafe { row.res_out.add(i).write(v) };
        }
        ss += to_f32(v) * to_f32(v);
        i += 32;
    }
    let rstd = rsqrt(warp_reduce_sum_f32(ss) / h as f32 + eps);
    let mut i = lane;
    while i < h {
        // SAFETY: i < h; `res_out[i]` was written by this lane above.
        let v = unsafe {
            if row.fused() {
                core::ptr::read_volatile(row.res_out.add(i))
            } else {
                value(i)
            }
        };
        // SAFETY: i < h.
        unsafe { y.add(i).write(bf16::from_f32(to_f32(v) * rstd * to_f32(*w.add(i)))) };
        i += 32;
    }
}

/// The fused residual add and RMSNorm of rows `0..m` with one warp per row (warp `w` of
/// the CTA's `THREADS / 32` takes rows `w, w + warps, …`), for a kernel that normalises
/// its own copy of its input: `sum = bf16(x + res)` is written to `y` (and to `res_out`
/// unless it is null), then `y = bf16(sum · rstd · w)` overwrites it, `rstd` as in
/// [`add_rmsnorm`] (the same values up to the order of the f32 sum of squares). Ends with
/// a barrier, after which every thread of the CTA may read `y`.
///
/// Emits `ld.global.cg.v4` for `x` and `res`, `ld.global.nc.v4` for `w`, `st.global.v4`,
/// `shfl.sync.bfly` for the row sum and one `bar.sync` (scalar loads and stores when `h`
/// is not a multiple of 8 or a pointer is not 16-byte aligned).
///
/// # Safety
/// Called by every thread of a CTA of `THREADS` threads; `x`, `res` and `y` (and `res_out`
/// unless null) are valid for `[m, h]` row-major, `w` for `[h]`; no other CTA touches `y`
/// while the CTA runs.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn add_rmsnorm_by_warps<const THREADS: u32>(
    x: *const bf16,
    res: *const bf16,
    w: *const bf16,
    y: *mut bf16,
    res_out: *mut bf16,
    m: u32,
    h: u32,
    eps: f32,
) {
    let warps = THREADS / 32;
    let lane = lane_id() as usize;
    let addrs = x as usize | res as usize | res_out as usize | w as usize | y as usize;
    let vec = h.is_multiple_of(8) && addrs.is_multiple_of(16);
    if vec && h.is_multiple_of(CHUNK) && (m as u64) * ((h / CHUNK) as u64) <= MAX_CHUNKS as u64 {
        // SAFETY: forwarded; the shape and alignment conditions were checked above.
        unsafe { add_rmsnorm_by_chunks::<THREADS>(x, res, w, y, res_out, m, h, eps) };
        return;
    }
    let mut r = warp_id();
    while r < m {
        let off = r as usize * h as usize;
        // SAFETY (whole row): row `r < m` of every `[m, h]` tensor (caller's contract);
        // `y` holds the sum between the two passes and each element is read back by the
        // lane that wrote it (program order).
        unsafe {
            let row = Row {
                x: x.add(off),
                res: res.add(off),
                res_out: y.add(off),
            };
            let copy = if res_out.is_null() { res_out } else { res_out.add(off) };
            let mut ss = 0.0f32;
            if vec {
                let nvec = (h / 8) as usize;
                let mut k = lane;
                while k < nvec {
                    let s = load_sum(row, k);
                    if !copy.is_null() {
                        st_global_v4_u32(copy.add(8 * k).cast(), s);
                    }
                    ss += sum_sq(s);
                    k += 32;
                }
                let rstd = rsqrt(warp_reduce_sum_f32(ss) / h as f32 + eps);
                let mut k = lane;
                while k < nvec {
                    let v = ld_global_cg_v4_u32(row.res_out.add(8 * k).cast());
                    store_norm(v, w, row.res_out, k, rstd);
                    k += 32;
                }
            } else {
                let mut i = lane;
                while i < h as usize {
                    let a = core::ptr::read_volatile(row.x.add(i));
                    let b = core::ptr::read_volatile(row.res.add(i));
                    let v = bf16::from_f32(to_f32(a) + to_f32(b));
                    row.res_out.add(i).write_volatile(v);
                    if !copy.is_null() {
                        copy.add(i).write(v);
                    }
                    ss += to_f32(v) * to_f32(v);
                    i += 32;
                }
                let rstd = rsqrt(warp_reduce_sum_f32(ss) / h as f32 + eps);
                let mut i = lane;
                while i < h as usize {
                    let v = core::ptr::read_volatile(row.res_out.add(i));
                    row.res_out
                        .add(i)
                        .write(bf16::from_f32(to_f32(v) * rstd * to_f32(*w.add(i))));
                    i += 32;
                }
            }
        }
        r += warps;
    }
    sync_threads();
}

/// Elements of one warp's chunk in [`add_rmsnorm_by_chunks`]: 32 lanes × 8.
const CHUNK: u32 = 256;
/// Most chunks [`add_rmsnorm_by_chunks`] takes (its shared-memory partial sums).
const MAX_CHUNKS: usize = 64;

/// [`add_rmsnorm_by_warps`] when `h` is a multiple of 256, the pointers are 16-byte aligned
/// and the rows are at most 64 chunks of 256 elements: the chunks are spread over all warps
/// (chunk `c` to warp `c mod warps`), each warp loads two chunks' `x`, `res` and weight
/// vectors before it uses any (one L2 round trip for both), writes the sums and its
/// chunks' sums of squares (shared memory, one slot per chunk); after a barrier every row's
/// `rstd` adds its chunks' slots in order (the same bits for every CTA size), and the
/// normalised values are written from registers (later chunks re-read their sums).
///
/// # Safety
/// As [`add_rmsnorm_by_warps`], with the conditions above.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn add_rmsnorm_by_chunks<const THREADS: u32>(
    x: *const bf16,
    res: *const bf16,
    w: *const bf16,
    y: *mut bf16,
    res_out: *mut bf16,
    m: u32,
    h: u32,
    eps: f32,
) {
    const V: usize = 2;
    let warps = THREADS / 32;
    let (warp, lane) = (warp_id(), lane_id() as usize);
    let per_row = h / CHUNK;
    let chunks = m * per_row;
    let partial = static_shared!(NORM_PARTIALS: [f32; MAX_CHUNKS]);
    // Element of chunk `c` this lane takes (the rows are contiguous, `h` a multiple of the
    // chunk: a chunk lies in row `c / per_row`).
    let elem = |c: u32| c as usize * CHUNK as usize + 8 * lane;
    let mut kept = [[0u32; 4]; V];
    let mut kept_w = [[0u32; 4]; V];
    let mut first = warp;
    while first < chunks {
        let mut a = [[0u32; 4]; V];
        let mut b = [[0u32; 4]; V];
        let mut wv = [[0u32; 4]; V];
        unroll!(V, max 2, |v| {
            let c = first + v as u32 * warps;
            if c < chunks {
                let e = elem(c);
                // SAFETY: `e + 8 ≤ m · h` and 16-byte aligned (caller); the weight index
                // `e mod h` is inside `[h]`.
                unsafe {
                    a[v] = ld_global_cg_v4_u32(x.add(e).cast());
                    b[v] = ld_global_cg_v4_u32(res.add(e).cast());
                    wv[v] = ld_global_nc_v4_u32(w.add(e % h as usize).cast());
                }
            }
        });
        unroll!(V, max 2, |v| {
            let c = first + v as u32 * warps;
            // `c` is the same in every lane: the whole warp takes the branch (the shuffle).
            if c < chunks {
                let e = elem(c);
                let (fa, fb) = (unpack8(a[v]), unpack8(b[v]));
                let sum = pack8(core::array::from_fn(|i| fa[i] + fb[i]));
                // SAFETY: as for the loads.
                unsafe {
                    st_global_v4_u32(y.add(e).cast(), sum);
                    if !res_out.is_null() {
                        st_global_v4_u32(res_out.add(e).cast(), sum);
                    }
                }
                let ss = warp_reduce_sum_f32(sum_sq(sum));
                if lane == 0 {
                    // SAFETY: one writer per chunk slot (`c < chunks ≤ MAX_CHUNKS`); read
                    // after the barrier.
                    unsafe { partial.at(c as usize).write(ss) };
                }
                if first == warp {
                    kept[v] = sum;
                    kept_w[v] = wv[v];
                }
            }
        });
        first += V as u32 * warps;
    }
    sync_threads();
    let rstd = |row: u32| {
        let mut total = 0.0f32;
        for i in 0..per_row {
            // SAFETY: written before the barrier; nobody writes until the next call.
            total += unsafe { partial.at((row * per_row + i) as usize).read() };
        }
        rsqrt(total / h as f32 + eps)
    };
    let mut first = warp;
    while first < chunks {
        unroll!(V, max 2, |v| {
            let c = first + v as u32 * warps;
            if c < chunks {
                let e = elem(c);
                let (sum, wv) = if first == warp {
                    (kept[v], kept_w[v])
                } else {
                    // SAFETY: as for the loads; `y[e..]` holds this lane's sum (program
                    // order).
                    unsafe {
                        (
                            ld_global_cg_v4_u32(y.add(e).cast()),
                            ld_global_nc_v4_u32(w.add(e % h as usize).cast()),
                        )
                    }
                };
                let r = rstd(c / per_row);
                let (f, wf) = (unpack8(sum), unpack8(wv));
                // SAFETY: as for the loads.
                unsafe {
                    st_global_v4_u32(
                        y.add(e).cast(),
                        pack8(core::array::from_fn(|i| f[i] * r * wf[i])),
                    )
                };
            }
        });
        first += V as u32 * warps;
    }
    // The slots are read again by the next call only after this barrier; the normalised
    // rows are visible to the whole CTA after it.
    sync_threads();
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
