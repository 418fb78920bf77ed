//! Decode GEMV / skinny GEMM on the tensor cores: `y[m, n] = x[m, k] · W[n, k]ᵀ` for
//! `m = 1…16` tokens (any `m` works; above 16 W is streamed once per 16 tokens), weights
//! as PyTorch `Linear` stores them, bf16 in, f32 accumulation.
//!
//! | kernel | computes | output |
//! |---|---|---|
//! | [`gemv`] | `x · Wᵀ` (also the fused QKV projection: W = `[W_q; W_k; W_v]`) | bf16 `[m, n]` |
//! | [`gemv_splitk`] | the same, k split over `splits` CTAs per column tile | bf16 `[m, n]` |
//! | [`gate_up_silu`] | `silu(x · W_gateᵀ) · (x · W_upᵀ)` (SwiGLU MLP input) | bf16 `[m, inter]` |
//! | [`gate_up_silu_splitk`] | the same with split-K | bf16 `[m, inter]` |
//! | [`add_rmsnorm_gemv`] | `rmsnorm(x + res) · Wᵀ` (and `x + res`) | bf16 `[m, n]`, `[m, k]` |
//! | [`add_rmsnorm_gate_up_silu`] | `gate_up_silu` of `rmsnorm(x + res)` (and `x + res`) | bf16 `[m, inter]`, `[m, k]` |
//! | [`gemv_add_rmsnorm`] | `rmsnorm(x · Wᵀ + res)` (and `x · Wᵀ + res`), the norm in the last CTA | bf16 `[m, n]`, `[m, n]` |
//! | [`lm_head`] | `x · W_vocabᵀ`, logits for sampling | **f32** `[m, vocab]` |
//!
//! # Kernel tiling
//!
//! Kernel tile `pid_n` computes output columns `pid_n·BN .. +BN` for **all `m` rows**
//! (`[_, pid_n: BN]`) and reads `x` whole (`[_, _]`: it waits until every data tile of
//! `x` is ready, then reads all of it). With split-K the grid gains `pid_k` (`splits`
//! CTAs per column tile, each a contiguous range of k); every one of them signals the
//! column tile (`split = pid_k`), so consumers see it ready only when all have. The weights
//! are plain tensors: the first `PF` batches of W are loaded *before* the wait for `x`
//! (`#[prefetch]`, paper §3.1), so they stream while the producer of `x` still runs.
//!
//! Columns are processed in order (`pid_n` ascending), so with a column data tiling of the
//! output (`Grid<M, 128>`: one head per data tile) the consumers of the first columns (q
//! of a QKV projection) start while the last ones (v) are still being computed.
//!
//! # How (see [`engine`])
//!
//! 16 rows of W are the A operand of `mma.sync.m16n8k16` and `xᵀ` the B operand (one or
//! two n-tiles of 8 tokens). k is permuted identically in A and B so that every lane's
//! fragments are single 16-byte loads straight from global memory (`ld.global.nc.v4` for
//! W, `ld.global.v4` for x, which a kernel in flight may produce; x stays hot in L1/L2).
//! No shared memory on the main path; each lane double-buffers batches of `U × 32` k in
//! registers. Partial sums of the `WK` warps that split a column tile's k meet in
//! shared memory; with split-K, the `splits` CTAs of a column tile write f32 partial sums
//! to a workspace and the last to finish (atomic ticket, `fence.acq_rel.gpu`) adds them in
//! split order, writes the tile and re-arms its counter.
//!
//! Shapes: any `m, n, k ≥ 0`. The fast path (16-byte loads) needs `k % 8 == 0` and W, x
//! 16-byte aligned (true for whole tensors); otherwise every load is split into 2-byte
//! loads (correct, slow).
//!
//! # Configs (`LaunchOptions::config(i)`)
//!
//! [`gemv`] and [`gemv_splitk`] (`THREADS = 2·BN·WK`; a batch is `U × 32` k; each lane
//! has 1–2 batches of `2 U` 16-byte loads in flight):
//!
//! | i | BN | WK | U | threads | PF | W bytes in flight / CTA | for |
//! |---|---|---|---|---|---|---|---|
//! | 0 | 128 | 1 | 4 | 256 | 2 | 32–64 KiB | large n (LM head, gate+up, QKV of big models) |
//! | 1 | 64 | 2 | 4 | 256 | 2 | 32–64 KiB | medium n |
//! | 2 | 32 | 4 | 4 | 256 | 2 | 32–64 KiB | small n |
//! | 3 | 16 | 8 | 4 | 256 | 2 | 32–64 KiB | very small n (o/down projections of small models) |
//! | 4 | 64 | 1 | 4 | 128 | 2 | 16–32 KiB | many small CTAs |
//! | 5 | 128 | 1 | 2 | 256 | 2 | 16–32 KiB | fewer registers, more CTAs per SM |
//! | 6 | 64 | 2 | 2 | 256 | 2 | 16–32 KiB | fewer registers, medium n |
//! | 7 | 128 | 1 | 4 | 256 | 0 | 32–64 KiB | config 0 without weight prefetch (ablation) |
//! | 8–14 | | | | | | | configs 0–6 with launch bounds (`MIN_CTAS`) |
//!
//! Configs 0–7 carry no launch bounds (`MIN_CTAS = 0`): `ptxas` may use up to 255
//! registers (about 165 today, one 256-thread CTA per SM), which only CTAs of at most 256
//! threads are guaranteed to get. Configs 8–14 are the same tiles bounded to two CTAs per
//! SM (three for the 128-thread config 12), i.e. at most 128 (168) registers, without
//! spills: twice the weight loads in flight per SM, which a GEMV running alone turns into
//! bandwidth; but the waiting CTAs of a GEMV that overlaps its producer then take twice
//! the SM room from it. The planner ([`plan::Placement`]) gives bounded configs to GEMVs
//! that run alone and unbounded ones to GEMVs beside a running producer.
//!
//! [`gate_up_silu`], [`gate_up_silu_splitk`] (two row groups per warp, `U = 2`): see their
//! docs. Use [`plan`] to pick a config and split for a shape.
//!
//! # PTX features
//!
//! `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` (sm_80+), `ld.global.nc.v4.u32`,
//! `ld.global.v4.u32`, `bar.sync` / `bar.red.or`, and for split-K `fence.acq_rel.gpu`,
//! `atom.acq_rel.gpu.global.add.u32`, `ld.relaxed.gpu.global.f32`.

pub mod engine;
#[cfg(not(target_arch = "nvptx64"))]
pub mod plan;

use engine::{CtaJob, Epilogue, WarpJob};
use megaops::bf16;

/// The tile configs of [`gemv`] and [`gemv_splitk`] (`configs = gemv_configs!`): one
/// list, so that the planner launches the split kernel with the plain kernel's config.
/// Table in the [module docs](self).
macro_rules! gemv_configs {
    (#[$($kernel:tt)*] $($item:tt)*) => {
        #[$($kernel)*]
        #[config(BN = 128, WK = 1, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 0)]
        #[config(BN = 64, WK = 2, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 0)]
        #[config(BN = 32, WK = 4, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 0)]
        #[config(BN = 16, WK = 8, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 0)]
        #[config(BN = 64, WK = 1, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 0)]
        #[config(BN = 128, WK = 1, U: usize = 2, PF: usize = 2, MIN_CTAS: u32 = 0)]
        #[config(BN = 64, WK = 2, U: usize = 2, PF: usize = 2, MIN_CTAS: u32 = 0)]
        #[config(BN = 128, WK = 1, U: usize = 4, PF: usize = 0, MIN_CTAS: u32 = 0)]
        #[config(BN = 128, WK = 1, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 2)]
        #[config(BN = 64, WK = 2, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 2)]
        #[config(BN = 32, WK = 4, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 2)]
        #[config(BN = 16, WK = 8, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 2)]
        #[config(BN = 64, WK = 1, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 3)]
        #[config(BN = 128, WK = 1, U: usize = 2, PF: usize = 2, MIN_CTAS: u32 = 2)]
        #[config(BN = 64, WK = 2, U: usize = 2, PF: usize = 2, MIN_CTAS: u32 = 2)]
        $($item)*
    };
}

/// The tile configs of [`add_rmsnorm_gemv`]: [`gemv`]'s without configs 8 and 10, whose
/// 128-register bound the prologue makes spill (the planner maps a plain config to the
/// fused one of the same shape, [`plan::fuse_add_norm`]).
macro_rules! add_norm_gemv_configs {
    (#[$($kernel:tt)*] $($item:tt)*) => {
        #[$($kernel)*]
        #[config(BN = 128, WK = 1, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 0)]
        #[config(BN = 64, WK = 2, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 0)]
        #[config(BN = 32, WK = 4, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 0)]
        #[config(BN = 16, WK = 8, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 0)]
        #[config(BN = 64, WK = 1, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 0)]
        #[config(BN = 128, WK = 1, U: usize = 2, PF: usize = 2, MIN_CTAS: u32 = 0)]
        #[config(BN = 64, WK = 2, U: usize = 2, PF: usize = 2, MIN_CTAS: u32 = 0)]
        #[config(BN = 128, WK = 1, U: usize = 4, PF: usize = 0, MIN_CTAS: u32 = 0)]
        #[config(BN = 64, WK = 2, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 2)]
        #[config(BN = 16, WK = 8, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 2)]
        #[config(BN = 64, WK = 1, U: usize = 4, PF: usize = 2, MIN_CTAS: u32 = 3)]
        #[config(BN = 128, WK = 1, U: usize = 2, PF: usize = 2, MIN_CTAS: u32 = 2)]
        #[config(BN = 64, WK = 2, U: usize = 2, PF: usize = 2, MIN_CTAS: u32 = 2)]
        $($item)*
    };
}

mod norm_epilogue;
#[cfg(not(target_arch = "nvptx64"))]
pub use norm_epilogue::gemv_add_rmsnorm;

/// The tile configs of [`gate_up_silu`] and [`gate_up_silu_splitk`]
/// (`configs = gate_up_configs!`); table in [`gate_up_silu`]'s docs.
macro_rules! gate_up_configs {
    (#[$($kernel:tt)*] $($item:tt)*) => {
        #[$($kernel)*]
        #[config(BN = 64, WK = 1, U: usize = 2, PF: usize = 2)]
        #[config(BN = 64, WK = 2, U: usize = 2, PF: usize = 2)]
        #[config(BN = 32, WK = 4, U: usize = 2, PF: usize = 2)]
        #[config(BN = 16, WK = 8, U: usize = 2, PF: usize = 2)]
        $($item)*
    };
}

/// `y = x · Wᵀ` (bf16 out): `y[i, j] = Σ_k x[i, k] · w[j, k]`, f32 accumulation, one
/// rounding to bf16. The fused QKV projection is this kernel with `w = [W_q; W_k; W_v]`
/// (`n = n_q + 2 n_kv`).
///
/// Layouts (row-major): `x` `[m, k]`, `w` `[n, k]` (a weight: never written while the kernel
/// may run; its first batches are read before the wait for `x`), `y` `[m, n]`.
///
/// Kernel tile `pid_n`: columns `pid_n·BN .. +BN` of `y`, all rows; reads `x` whole and
/// rows `pid_n·BN .. +BN` of `w`. Configs: see the [module docs](self).
///
/// # Safety
/// Pointers valid for the shapes above.
#[megaops::kernel(
    block = 2 * BN * WK,
    smem = engine::smem_bytes(BN, WK, 1),
    min_ctas = MIN_CTAS,
    input(x[m, k] = [_, _]),
    output(y[m, n] = [_, pid_n: BN]),
    tensor(w[n, k]),
    configs = gemv_configs!,
)]
pub unsafe fn gemv(x: *const bf16, w: *const bf16, y: *mut bf16, m: u32, n: u32, k: u32) {
    let cta = CtaJob {
        n0: pid_n * BN,
        split: 0,
        splits: 1,
    };
    let job = WarpJob::<1>::new::<BN, WK, U>([w], n, k, cta);
    #[prefetch]
    // SAFETY: `w` is `[n, k]` (kernel contract); rows past `n` are not read.
    let ring = unsafe { job.prefetch::<U, PF>() };
    let ep = Epilogue {
        out: y,
        ws: core::ptr::null_mut(),
        counters: core::ptr::null_mut(),
        m,
        n,
        tile: pid_n,
    };
    // SAFETY: a CTA of 2·BN·WK threads with smem_bytes(BN, WK, 1) bytes (the annotation);
    // pointers valid for the shapes (kernel contract); no split, so no workspace.
    unsafe { engine::run::<BN, WK, 1, U, PF, false, bf16>(x, &job, cta, ring, &ep) };
}

/// [`gemv`] with k split over `splits` CTAs per column tile, for shapes with few column
/// tiles (small `n`): each CTA multiplies a contiguous `1/splits` of k, writes f32
/// partial sums to `ws`, and the last CTA of the tile (atomic ticket on
/// `counters[pid_n]`) adds the `splits` partials in order, writes `y` and resets the
/// counter to 0.
///
/// Layouts: as [`gemv`]; `ws`: f32 `[splits, m, n]` scratch; `counters`: u32
/// `[n.div_ceil(BN)]`, **zero before the first launch** (each complete launch leaves them
/// zero; after a failed one the device re-zeroes counters registered with
/// `Device::register_tickets`, as the workspace's are).
/// Two launches that may run at the same time need separate `ws` and `counters`
/// ([`plan::SplitWorkspace`] sizes them).
///
/// Kernel tile `(pid_n, pid_k)`: columns `pid_n·BN .. +BN` of `y`, k range `pid_k` of
/// `splits`; every `pid_k` signals the column tile (`split = pid_k`). Configs: as
/// [`gemv`].
///
/// # Safety
/// Pointers valid for the shapes above; `splits ≥ 1`.
#[megaops::kernel(
    block = 2 * BN * WK,
    smem = engine::smem_bytes(BN, WK, 1),
    min_ctas = MIN_CTAS,
    tiles(pid_n = n.div_ceil(BN), pid_k = splits),
    input(x[m, k] = [_, _]),
    output(y[m, n] = [_, pid_n: BN], split = pid_k),
    tensor(w[n, k]),
    scratch(ws[splits * m * n]),
    scratch(counters[n.div_ceil(BN)]),
    configs = gemv_configs!,
)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemv_splitk(
    x: *const bf16,
    w: *const bf16,
    y: *mut bf16,
    ws: *mut f32,
    counters: *mut u32,
    m: u32,
    n: u32,
    k: u32,
    splits: u32,
) {
    let cta = CtaJob {
        n0: pid_n * BN,
        split: pid_k,
        splits,
    };
    let job = WarpJob::<1>::new::<BN, WK, U>([w], n, k, cta);
    #[prefetch]
    // SAFETY: `w` is `[n, k]` (kernel contract); rows past `n` are not read.
    let ring = unsafe { job.prefetch::<U, PF>() };
    let ep = Epilogue {
        out: y,
        ws,
        counters,
        m,
        n,
        tile: pid_n,
    };
    // SAFETY: CTA shape and shared memory from the annotation; pointers, workspace and
    // zeroed counters as documented (kernel contract).
    unsafe { engine::run::<BN, WK, 1, U, PF, false, bf16>(x, &job, cta, ring, &ep) };
}

/// The SwiGLU MLP input in one launch: `h[i, j] = silu(g) · u` with
/// `g = Σ_k x[i, k] · w[j, k]` (gate) and `u = Σ_k x[i, k] · w[inter + j, k]` (up),
/// `silu(g) = g / (1 + e^-g)`, f32 arithmetic, one rounding to bf16. Equivalent to
/// [`gemv`] into `[m, 2·inter]` followed by `elementwise::silu_mul`, without the
/// round trip of the `[m, 2·inter]` intermediate.
///
/// Layouts: `x` `[m, k]`; `w_gate_up` `[2·inter, k]`, the gate rows then the up rows (as
/// vLLM's merged `gate_up_proj`); `h` `[m, inter]`.
///
/// Kernel tile `pid_n`: columns `pid_n·BN .. +BN` of `h`, all rows; reads `x` whole and gate
/// rows and up rows `pid_n·BN .. +BN` (each warp multiplies 16 gate and the matching 16 up
/// rows against the same x fragments). Configs (`THREADS = 2·BN·WK`, `U = 2`):
///
/// | i | BN | WK | threads | PF |
/// |---|---|---|---|---|
/// | 0 | 64 | 1 | 128 | 2 |
/// | 1 | 64 | 2 | 256 | 2 |
/// | 2 | 32 | 4 | 256 | 2 |
/// | 3 | 16 | 8 | 256 | 2 |
///
/// # Safety
/// Pointers valid for the shapes above.
#[megaops::kernel(
    block = 2 * BN * WK,
    smem = engine::smem_bytes(BN, WK, 2),
    input(x[m, k] = [_, _]),
    output(h[m, inter] = [_, pid_n: BN]),
    tensor(w_gate_up[2 * inter, k]),
    configs = gate_up_configs!,
)]
pub unsafe fn gate_up_silu(x: *const bf16, w_gate_up: *const bf16, h: *mut bf16, m: u32, inter: u32, k: u32) {
    let cta = CtaJob {
        n0: pid_n * BN,
        split: 0,
        splits: 1,
    };
    let up = w_gate_up.wrapping_add(inter as usize * k as usize);
    let job = WarpJob::<2>::new::<BN, WK, U>([w_gate_up, up], inter, k, cta);
    #[prefetch]
    // SAFETY: `w_gate_up` is `[2·inter, k]` (kernel contract); rows past `inter` of either
    // half are not read.
    let ring = unsafe { job.prefetch::<U, PF>() };
    let ep = Epilogue {
        out: h,
        ws: core::ptr::null_mut(),
        counters: core::ptr::null_mut(),
        m,
        n: inter,
        tile: pid_n,
    };
    // SAFETY: CTA shape and shared memory from the annotation; pointers valid (kernel
    // contract); no split.
    unsafe { engine::run::<BN, WK, 2, U, PF, true, bf16>(x, &job, cta, ring, &ep) };
}

/// [`gate_up_silu`] with k split over `splits` CTAs per column tile (see
/// [`gemv_splitk`] for the protocol): the partial gate and up sums go to `ws`, and the
/// last CTA applies `silu(g) · u` to the totals.
///
/// Layouts: as [`gate_up_silu`]; `ws`: f32 `[splits, 2, m, inter]`; `counters`: u32
/// `[inter.div_ceil(BN)]`, zero before the first launch (left zero by each launch).
///
/// Kernel tile `(pid_n, pid_k)`: columns `pid_n·BN .. +BN` of `h`, k range `pid_k`;
/// `split = pid_k`. Configs: as [`gate_up_silu`].
///
/// # Safety
/// Pointers valid for the shapes above; `splits ≥ 1`.
#[megaops::kernel(
    block = 2 * BN * WK,
    smem = engine::smem_bytes(BN, WK, 2),
    tiles(pid_n = inter.div_ceil(BN), pid_k = splits),
    input(x[m, k] = [_, _]),
    output(h[m, inter] = [_, pid_n: BN], split = pid_k),
    tensor(w_gate_up[2 * inter, k]),
    scratch(ws[splits * m * inter]),
    scratch(counters[inter.div_ceil(BN)]),
    configs = gate_up_configs!,
)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn gate_up_silu_splitk(
    x: *const bf16,
    w_gate_up: *const bf16,
    h: *mut bf16,
    ws: *mut f32,
    counters: *mut u32,
    m: u32,
    inter: u32,
    k: u32,
    splits: u32,
) {
    let cta = CtaJob {
        n0: pid_n * BN,
        split: pid_k,
        splits,
    };
    let up = w_gate_up.wrapping_add(inter as usize * k as usize);
    let job = WarpJob::<2>::new::<BN, WK, U>([w_gate_up, up], inter, k, cta);
    #[prefetch]
    // SAFETY: `w_gate_up` is `[2·inter, k]` (kernel contract).
    let ring = unsafe { job.prefetch::<U, PF>() };
    let ep = Epilogue {
        out: h,
        ws,
        counters,
        m,
        n: inter,
        tile: pid_n,
    };
    // SAFETY: CTA shape and shared memory from the annotation; pointers, workspace and
    // zeroed counters as documented (kernel contract).
    unsafe { engine::run::<BN, WK, 2, U, PF, true, bf16>(x, &job, cta, ring, &ep) };
}

/// Rows of the normalised input an add + RMSNorm prologue may hold per CTA: the fused
/// kernels ([`add_rmsnorm_gemv`], [`add_rmsnorm_gate_up_silu`]) are meant for
/// `m · k ≤ NORM_PROLOGUE_MAX_ELEMS`, where every CTA's copy of the norm costs less than a
/// kernel boundary (the planner, [`plan::fuse_add_norm`], applies the bound).
pub const NORM_PROLOGUE_MAX_ELEMS: u32 = 16 * 1024;

/// [`gemv`] with the decoder layer's residual add and RMSNorm in front:
/// `res_out = bf16(x + res)`, `xn = bf16(res_out · rstd · norm_w)` (as
/// [`norm::add_rmsnorm`](crate::norm::add_rmsnorm)), `y = xn · wᵀ`, in one launch.
///
/// Every CTA normalises all `m` rows itself (one warp per row) into its own slot of the
/// scratch `xn` (`[n.div_ceil(BN), m, k]` bf16) and streams W against it, so no kernel
/// between the sublayer's output and the projection is needed; CTA 0 also writes the new
/// residual stream `res_out`, which every CTA signals (`split = pid_n`: consumers see it
/// ready when the whole launch has passed its prologue). The first `PF` batches of W are
/// loaded before the wait for `x` and `res`, as in [`gemv`].
///
/// Layouts (row-major): `x` (the sublayer output), `res` (residual in), `res_out`
/// (residual out): `[m, k]`; `norm_w` `[k]`; `w` `[n, k]`; `y` `[m, n]`. Configs: those
/// of [`gemv`] (module docs) but its configs 8 and 10, which spill with the prologue.
///
/// Emits what [`gemv`] does, plus the prologue's `ld.global.cg.v4`, `st.global.v4` and
/// `shfl.sync.bfly` (see `norm::add_rmsnorm_by_warps`) and one `bar.sync`.
///
/// # Safety
/// Pointers valid for the shapes above; `k > 0`.
#[megaops::kernel(
    block = 2 * BN * WK,
    smem = engine::smem_bytes(BN, WK, 1),
    min_ctas = MIN_CTAS,
    tiles(pid_n = n.div_ceil(BN)),
    input(x[m, k] = [_, _]),
    input(res[m, k] = [_, _]),
    output(y[m, n] = [_, pid_n: BN]),
    output(res_out[m, k] = [_, _], split = pid_n),
    tensor(norm_w[k]),
    tensor(w[n, k]),
    scratch(xn[n.div_ceil(BN) * m * k]),
    check(k > 0, "the hidden size k must be positive"),
    configs = add_norm_gemv_configs!,
)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn add_rmsnorm_gemv(
    x: *const bf16,
    res: *const bf16,
    norm_w: *const bf16,
    w: *const bf16,
    y: *mut bf16,
    res_out: *mut bf16,
    xn: *mut bf16,
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
    // SAFETY: the CTA's slot of `xn` (kernel contract: one slot per column tile); the
    // residual goes out once, from CTA 0.
    let slot = unsafe { norm_prologue::<{ 2 * BN * WK }>(x, res, norm_w, xn, res_out, pid_n, m, k, eps) };
    let ep = Epilogue {
        out: y,
        ws: core::ptr::null_mut(),
        counters: core::ptr::null_mut(),
        m,
        n,
        tile: pid_n,
    };
    // SAFETY: a CTA of 2·BN·WK threads with smem_bytes(BN, WK, 1) bytes (the annotation);
    // `slot` is `[m, k]`, written before the prologue's barrier; no split.
    unsafe { engine::run::<BN, WK, 1, U, PF, false, bf16>(slot, &job, cta, ring, &ep) };
}

/// [`gate_up_silu`] with the residual add and RMSNorm in front, as [`add_rmsnorm_gemv`]
/// does for [`gemv`]: `res_out = bf16(x + res)`, `xn = bf16(res_out · rstd · norm_w)`,
/// `h = silu(xn · w_gateᵀ) · (xn · w_upᵀ)`.
///
/// Layouts: `x`, `res`, `res_out` `[m, k]`; `norm_w` `[k]`; `w_gate_up` `[2·inter, k]`;
/// `h` `[m, inter]`; scratch `xn` `[inter.div_ceil(BN), m, k]`. Configs: as
/// [`gate_up_silu`].
///
/// # Safety
/// Pointers valid for the shapes above; `k > 0`.
#[megaops::kernel(
    block = 2 * BN * WK,
    smem = engine::smem_bytes(BN, WK, 2),
    tiles(pid_n = inter.div_ceil(BN)),
    input(x[m, k] = [_, _]),
    input(res[m, k] = [_, _]),
    output(h[m, inter] = [_, pid_n: BN]),
    output(res_out[m, k] = [_, _], split = pid_n),
    tensor(norm_w[k]),
    tensor(w_gate_up[2 * inter, k]),
    scratch(xn[inter.div_ceil(BN) * m * k]),
    check(k > 0, "the hidden size k must be positive"),
    configs = gate_up_configs!,
)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn add_rmsnorm_gate_up_silu(
    x: *const bf16,
    res: *const bf16,
    norm_w: *const bf16,
    w_gate_up: *const bf16,
    h: *mut bf16,
    res_out: *mut bf16,
    xn: *mut bf16,
    m: u32,
    inter: u32,
    k: u32,
    eps: f32,
) {
    let cta = CtaJob {
        n0: pid_n * BN,
        split: 0,
        splits: 1,
    };
    let up = w_gate_up.wrapping_add(inter as usize * k as usize);
    let job = WarpJob::<2>::new::<BN, WK, U>([w_gate_up, up], inter, k, cta);
    #[prefetch]
    // SAFETY: `w_gate_up` is `[2·inter, k]` (kernel contract).
    let ring = unsafe { job.prefetch::<U, PF>() };
    // SAFETY: as in `add_rmsnorm_gemv`.
    let slot = unsafe { norm_prologue::<{ 2 * BN * WK }>(x, res, norm_w, xn, res_out, pid_n, m, k, eps) };
    let ep = Epilogue {
        out: h,
        ws: core::ptr::null_mut(),
        counters: core::ptr::null_mut(),
        m,
        n: inter,
        tile: pid_n,
    };
    // SAFETY: CTA shape and shared memory from the annotation; `slot` as above; no split.
    unsafe { engine::run::<BN, WK, 2, U, PF, true, bf16>(slot, &job, cta, ring, &ep) };
}

/// The prologue of the `add_rmsnorm_*` kernels: normalises the `m` rows into the CTA's
/// slot `tile` of `xn` (CTA 0 also writes `res_out`) and returns the slot, readable by
/// every thread after the barrier the norm ends with.
///
/// # Safety
/// Every thread of a CTA of `THREADS` threads calls it; `x`, `res`, `res_out` `[m, k]`,
/// `norm_w` `[k]`, `xn` at least `(tile + 1) · m · k` elements, and no other CTA uses slot
/// `tile`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn norm_prologue<const THREADS: u32>(
    x: *const bf16,
    res: *const bf16,
    norm_w: *const bf16,
    xn: *mut bf16,
    res_out: *mut bf16,
    tile: u32,
    m: u32,
    k: u32,
    eps: f32,
) -> *const bf16 {
    let slot = xn.wrapping_add(tile as usize * m as usize * k as usize);
    let copy = if tile == 0 { res_out } else { core::ptr::null_mut() };
    // SAFETY: forwarded from the caller.
    unsafe { crate::norm::add_rmsnorm_by_warps::<THREADS>(x, res, norm_w, slot, copy, m, k, eps) };
    slot
}

/// The LM head: `logits[i, v] = Σ_k x[i, k] · w[v, k]` in **f32** (no bf16 rounding, so
/// greedy sampling does not see ties that rounding would create; the extra bytes,
/// `4·m·vocab`, are under 3% of the weight bytes at `m = 16`).
///
/// Layouts: `x` `[m, k]` (final-norm output), `w` `[vocab, k]` (the output embedding, or the
/// input embedding when tied), `logits` `[m, vocab]` f32.
///
/// Kernel tile `pid_n`: columns `pid_n·BN .. +BN` of `logits`, all rows; reads `x` whole.
/// Configs (`PF = 2`): 0: `BN = 128, WK = 1, U = 4` (256 threads); 1: `BN = 64, WK = 2,
/// U = 4` (256); 2: `BN = 64, WK = 1, U = 4` (128); 3 and 4: configs 0 and 1 with `U = 2`
/// (shorter batches, for 9–16 tokens: see [`plan`]'s short-batch rule).
///
/// # Safety
/// Pointers valid for the shapes above.
#[megaops::kernel(
    block = 2 * BN * WK,
    smem = engine::smem_bytes(BN, WK, 1),
    input(x[m, k] = [_, _]),
    output(logits[m, vocab] = [_, pid_n: BN]),
    tensor(w[vocab, k]),
)]
#[config(BN = 128, WK = 1, U: usize = 4, PF: usize = 2)]
#[config(BN = 64, WK = 2, U: usize = 4, PF: usize = 2)]
#[config(BN = 64, WK = 1, U: usize = 4, PF: usize = 2)]
#[config(BN = 128, WK = 1, U: usize = 2, PF: usize = 2)]
#[config(BN = 64, WK = 2, U: usize = 2, PF: usize = 2)]
pub unsafe fn lm_head(x: *const bf16, w: *const bf16, logits: *mut f32, m: u32, vocab: u32, k: u32) {
    let cta = CtaJob {
        n0: pid_n * BN,
        split: 0,
        splits: 1,
    };
    let job = WarpJob::<1>::new::<BN, WK, U>([w], vocab, k, cta);
    #[prefetch]
    // SAFETY: `w` is `[vocab, k]` (kernel contract).
    let ring = unsafe { job.prefetch::<U, PF>() };
    let ep = Epilogue {
        out: logits,
        ws: core::ptr::null_mut(),
        counters: core::ptr::null_mut(),
        m,
        n: vocab,
        tile: pid_n,
    };
    // SAFETY: CTA shape and shared memory from the annotation; pointers valid (kernel
    // contract); no split.
    unsafe { engine::run::<BN, WK, 1, U, PF, false, f32>(x, &job, cta, ring, &ep) };
}
