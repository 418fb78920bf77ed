//! Tensor-core GEMM for prefill: `C[m, n] = A[m, k] · Wᵀ` ([`matmul`], weights as PyTorch
//! `Linear` stores them, `W[n, k]`) and `C = A · B` ([`matmul_nn`], `B[k, n]`), bf16 in and
//! out, f32 accumulation.
//!
//! # Kernel tiling (what a CTA reads and writes)
//!
//! Kernel tile `(pid_m, pid_n)` computes rows `pid_m·BM..+BM` × columns `pid_n·BN..+BN` of
//! `C`; it reads rows `pid_m·BM..+BM` of `A` (all of `k`, the synchronised input: it waits
//! for the data tiles of `A` covering those rows) and the matching `BN` rows of `W` (all of
//! `k`; plain weights, loaded before the wait). Grid: `m.div_ceil(BM) × n.div_ceil(BN)`,
//! `pid_n` fastest.
//!
//! # How (per CTA)
//!
//! - `STAGES`-deep `cp.async.cg` pipeline (16-byte copies, zero-filled at the edges,
//!   `commit_group`/`wait_group STAGES-2`) into XOR-swizzled shared memory
//!   ([`tile`], no bank conflicts on writes or reads);
//! - `WARPS_M × WARPS_N` warps, each a `(BM/WARPS_M) × (BN/WARPS_N)` block of `C` as
//!   `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` tiles, fragments loaded with
//!   `ldmatrix.x4` (`.trans` for `B[k, n]`) and double-buffered in registers;
//! - the first `STAGES-1` k-tiles of `W` are requested before the wait for `A`
//!   (`#[prefetch]`, paper §3.2);
//! - epilogue: `cvt.rn.bf16x2.f32`, a swizzled C tile in shared memory, 16-byte
//!   `st.global.v4` stores with bounds checks ([`epilogue`]).
//!
//! Details in [`pipeline`]; the sm_90a `wgmma` mainloops of configs 8–12 in [`wgmma`].
//!
//! # Requirements (checked by the generated launchers before anything runs)
//!
//! - `A` is `[m, k]`, `C` is `[m, n]`, `W` is `[n, k]` (`B` is `[k, n]`), all row-major
//!   and contiguous (`input`/`output`/`tensor(..)` in the annotation);
//! - **`k % 8 == 0`** (rows of `A` and `W` start 16-byte aligned, as `cp.async` of 16
//!   bytes needs); for [`matmul_nn`] also **`n % 8 == 0`** (`check(..)`);
//! - every pointer 16-byte aligned — *not* checked by the launcher: tensors from
//!   `Tensor::*` are 256-byte aligned; a `narrow`ed view is aligned when its row offset
//!   times the row bytes is a multiple of 16 ([`check_matmul`] / [`check_matmul_nn`]
//!   check the weight's alignment too);
//! - `m`, `n` (NT) and `k` are otherwise arbitrary: any size ≥ 0, edge tiles are masked.
//!   `n % 8 != 0` is supported by [`matmul`] but stores `C` with 2-byte instead of
//!   16-byte stores.
//!
//! # Configs (`LaunchOptions::config(i)`)
//!
//! | i | BM×BN×BK | stages | warps (M×N) | warp tile | smem | CTAs/SM (regs) | for |
//! |---|---|---|---|---|---|---|---|
//! | 0 | 128×128×32 | 4 | 2×2 | 64×64 | 64 KiB | 2 | default |
//! | 1 | 128×256×32 | 4 | 2×4 | 64×64 | 96 KiB | 1 | large n |
//! | 2 | 256×128×32 | 4 | 4×2 | 64×64 | 96 KiB | 1 | large m |
//! | 3 | 128×128×32 | 5 | 2×2 | 64×64 | 80 KiB | 2 | deeper pipeline |
//! | 4 | 64×128×64 | 3 | 2×2 | 32×64 | 72 KiB | 2 | small m |
//! | 5 | 64×64×64 | 4 | 2×2 | 32×32 | 64 KiB | 3 | small m and n (many CTAs) |
//! | 6 | 128×128×32 | 4 | 2×4 | 64×32 | 64 KiB | 1 | more warps per CTA |
//! | 7 | 128×64×64 | 4 | 2×2 | 64×32 | 96 KiB | 2 | small n |
//! | 8 | 128×128×64 | 5 | 2 warpgroups | 64×128 `wgmma` | 161 KiB | 1 | sm_90a |
//! | 9 | 128×256×64 | 4 | 2 warpgroups | 64×256 `wgmma` | 193 KiB | 1 | sm_90a, large shapes |
//! | 10 | 64×128×64 | 4 | 1 warpgroup | 64×128 `wgmma` | 97 KiB | 2 | sm_90a, small m and n |
//! | 11 | 128×256×64 | 4 | 2 + 1 producer warpgroups | 64×256 `wgmma` | 193 KiB | 1 | sm_90a, warp-specialised |
//! | 12 | 128×128×64 | 6 | 2 + 1 producer warpgroups | 64×128 `wgmma` | 193 KiB | 1 | sm_90a, warp-specialised, fewer tiles |
//!
//! 64×64 warp tiles read 32 FLOP per byte of shared memory (`ldmatrix`), 64×32 ones 21:
//! on Hopper the latter are bound by shared-memory bandwidth near mma.sync's peak.
//!
//! Configs 8, 9 and 10 (`WG = 1`) run [`wgmma`]'s mainloop where `wgmma` exists: in the
//! sm_90a module (which the host loads on compute capability 9.0) and on the CPU backend
//! (emulated). In the portable sm_90 module, and in [`matmul_nn`] (whose `B[k, n]` would
//! need N-major operands), they run the `mma.sync` pipeline with the same CTA tile and
//! same threads (`BK = 32`, 6 stages, warps as in the `WARPS_M × WARPS_N` of the config
//! line). Configs 11 and 12 (`WG = 2`) add warp specialisation to 128×256 and 128×128
//! tiles: a third warpgroup copies through `mbarrier`-guarded stages while the two others
//! only compute ([`wgmma`], "Warp specialisation"); their `mma.sync` fallback computes the
//! block in column parts with its 256 compute threads: in [`matmul`] parts of 64 columns
//! by 4 × 2 warps, under the launch bounds `MIN_CTAS = 1` (`.maxntid 384`,
//! `.minnctapersm 1`: at most 168 registers per thread, so that 384 threads fit an SM's
//! register file); [`matmul_nn`] launches them with 256 threads (no producer warpgroup)
//! and computes two column halves by the config's warps.
//!
//! [`matmul_nn`] has the same configs (one list for both: `matmul_configs!`).

pub mod epilogue;
pub mod pipeline;
pub mod tile;
pub mod wgmma;

use megaops::bf16;
use pipeline::Tile;
use wgmma::WgTile;

/// The tile configs of [`matmul`] and [`matmul_nn`] (`configs = matmul_configs!`): one
/// list, so that the two kernels' config `i` is the same tile. Table in the
/// [module docs](self).
#[rustfmt::skip] // one line per tile config
macro_rules! matmul_configs {
    (#[$($kernel:tt)*] $($item:tt)*) => {
        #[$($kernel)*]
        #[config(BM = 128, BN = 128, BK = 32, STAGES = 4, WARPS_M = 2, WARPS_N = 2, THREADS = 128, WG = 0, MIN_CTAS = 0)]
        #[config(BM = 128, BN = 256, BK = 32, STAGES = 4, WARPS_M = 2, WARPS_N = 4, THREADS = 256, WG = 0, MIN_CTAS = 0)]
        #[config(BM = 256, BN = 128, BK = 32, STAGES = 4, WARPS_M = 4, WARPS_N = 2, THREADS = 256, WG = 0, MIN_CTAS = 0)]
        #[config(BM = 128, BN = 128, BK = 32, STAGES = 5, WARPS_M = 2, WARPS_N = 2, THREADS = 128, WG = 0, MIN_CTAS = 0)]
        #[config(BM = 64, BN = 128, BK = 64, STAGES = 3, WARPS_M = 2, WARPS_N = 2, THREADS = 128, WG = 0, MIN_CTAS = 0)]
        #[config(BM = 64, BN = 64, BK = 64, STAGES = 4, WARPS_M = 2, WARPS_N = 2, THREADS = 128, WG = 0, MIN_CTAS = 0)]
        #[config(BM = 128, BN = 128, BK = 32, STAGES = 4, WARPS_M = 2, WARPS_N = 4, THREADS = 256, WG = 0, MIN_CTAS = 0)]
        #[config(BM = 128, BN = 64, BK = 64, STAGES = 4, WARPS_M = 2, WARPS_N = 2, THREADS = 128, WG = 0, MIN_CTAS = 0)]
        #[config(BM = 128, BN = 128, BK = 64, STAGES = 5, WARPS_M = 4, WARPS_N = 2, THREADS = 256, WG = 1, MIN_CTAS = 0)]
        #[config(BM = 128, BN = 256, BK = 64, STAGES = 4, WARPS_M = 2, WARPS_N = 4, THREADS = 256, WG = 1, MIN_CTAS = 0)]
        #[config(BM = 64, BN = 128, BK = 64, STAGES = 4, WARPS_M = 2, WARPS_N = 2, THREADS = 128, WG = 1, MIN_CTAS = 0)]
        #[config(BM = 128, BN = 256, BK = 64, STAGES = 4, WARPS_M = 2, WARPS_N = 4, THREADS = 384, WG = 2, MIN_CTAS = 1)]
        #[config(BM = 128, BN = 128, BK = 64, STAGES = 6, WARPS_M = 4, WARPS_N = 2, THREADS = 384, WG = 2, MIN_CTAS = 1)]
        $($item)*
    };
}

/// The [`Tile`] type of the config in scope (its constants `BM`, `BN`, `BK`, `STAGES`,
/// `WARPS_M`, `WARPS_N`), with B layout `$nn`. A `wgmma` config (`WG = 1`) run by the
/// `mma.sync` pipeline uses `BK = 32` and 6 stages (less shared memory than the launch
/// gives): with `BK = 64` its 64×64 warp tiles spill registers.
///
/// A warp-specialised config (`WG = 2`) run by the `mma.sync` pipeline computes its block
/// in `COL_PARTS = BN / 64` column parts of 64, one after the other, with its 8 compute
/// warps as 4 × 2 (32×32 warp tiles, as config 12's): the whole block with the config's
/// `WARPS_M × WARPS_N` warps needs about 242 registers per thread, and 64×32 or 64×16 warp
/// tiles 168–192 in `matmul_nn`, more than the 168 that a CTA of `THREADS = 384` (which
/// counts the producer warpgroup; launch bounds `MIN_CTAS = 1`) can have without spilling.
macro_rules! config_tile {
    ($nn:literal, $warps_m:expr, $warps_n:expr) => {
        Tile<
            { BM as usize },
            { (BN / COL_PARTS) as usize },
            { if WG != 0 { 32 } else { BK as usize } },
            { if WG != 0 { 6 } else { STAGES as usize } },
            { (if WG == 2 { 4 } else { WARPS_M }) as usize },
            { (if WG == 2 { 2 } else { WARPS_N }) as usize },
            { (BM / (if WG == 2 { 4 } else { WARPS_M }) / 16) as usize },
            { (BN / COL_PARTS / (if WG == 2 { 2 } else { WARPS_N }) / 8) as usize },
            $nn,
        >
    };
}

/// Runs the `mma.sync` pipeline `G` over the config's block `(pid_m, pid_n)`: in one piece
/// (`parts == 1`, what the compiler sees after inlining), or in `parts` column parts of
/// a warp-specialised config (whose producer warpgroup, the threads past
/// `WARPS_M × WARPS_N` warps, has nothing to do here and leaves).
///
/// # Safety
/// As for [`Tile::mainloop`] and [`Tile::store`]; the first tile (`tile`, column block
/// `pid_n · parts`) had its [`Tile::prefetch_b`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn mma_sync_block<
    const BM: usize,
    const BN: usize,
    const BK: usize,
    const STAGES: usize,
    const WARPS_M: usize,
    const WARPS_N: usize,
    const MI: usize,
    const NI: usize,
    const NN: bool,
>(
    tile: &Tile<BM, BN, BK, STAGES, WARPS_M, WARPS_N, MI, NI, NN>,
    parts: u32,
    (pid_m, pid_n): (u32, u32),
    (m, n, k): (u32, u32, u32),
    (a, b, c): (*const bf16, *const bf16, *mut bf16),
) {
    if parts == 1 {
        // SAFETY: forwarded.
        unsafe {
            let acc = tile.mainloop(a, b);
            tile.store(&acc, c);
        }
        return;
    }
    if megaops::device::thread::linear_thread_idx() >= (WARPS_M * WARPS_N * 32) as u32 {
        return;
    }
    // SAFETY (whole body): forwarded; each half is a whole `Tile` block with its own
    // prefetch, and `store` ends with a barrier before the next half reuses the memory.
    unsafe {
        let acc = tile.mainloop(a, b);
        tile.store(&acc, c);
        for h in 1..parts {
            let next = Tile::<BM, BN, BK, STAGES, WARPS_M, WARPS_N, MI, NI, NN>::new(pid_m, pid_n * parts + h, m, n, k);
            next.prefetch_b(b);
            let acc = next.mainloop(a, b);
            next.store(&acc, c);
        }
    }
}

/// `C = A · Wᵀ` in bf16 with f32 accumulation: `C[i, j] = Σ_k A[i, k] · W[j, k]`, the
/// product of activations `A[m, k]` and the weight of a PyTorch `Linear(k, n)`,
/// `W[n, k]`. Rounds once, to nearest even, when storing `C`.
///
/// Kernel tile `(pid_m, pid_n)`: rows `pid_m·BM..` × columns `pid_n·BN..` of `C`, reading
/// rows `pid_m·BM..+BM` of `A` (waits for them when `A` is a produced `Tiled` tensor) and
/// rows `pid_n·BN..+BN` of `W` (prefetched before that wait). See the [module docs](self)
/// for the configs and the requirements: **`k % 8 == 0`**, 16-byte aligned pointers,
/// `W` of shape `[n, k]` (the launcher checks the shapes and `k`).
///
/// PTX: `cp.async.cg.shared.global` (16 B, zero-fill), `cp.async.commit_group` /
/// `wait_group`, `ldmatrix.sync.aligned.m8n8.x4.shared.b16`,
/// `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`, `cvt.rn.bf16x2.f32`,
/// `st.global.v4.u32` (sm_80+); configs 8–12 on sm_90a: `fence.proxy.async.shared::cta`,
/// `wgmma.fence` / `wgmma.mma_async.sync.aligned.m64n{128,256}k16.f32.bf16.bf16` /
/// `wgmma.commit_group` / `wgmma.wait_group` instead of `ldmatrix` and `mma.sync`;
/// configs 11–12 also `mbarrier.init` / `mbarrier.arrive` / `mbarrier.try_wait.parity` and
/// `cp.async.mbarrier.arrive.noinc` instead of `cp.async.wait_group` and `bar.sync`.
///
/// # Safety
/// The pointers are valid for the shapes above and 16-byte aligned; `k % 8 == 0`.
#[rustfmt::skip] // one line per annotation item
#[megaops::kernel(
    block = THREADS,
    min_ctas = MIN_CTAS,
    smem = (BM + BN) * BK * 2 * STAGES + if WG != 0 { 1024 } else { 0 },
    input(a[m, k] = [pid_m: BM, _]),
    output(c[m, n] = [pid_m: BM, pid_n: BN]),
    tensor(b[n, k]),
    check(k.is_multiple_of(8), "k must be a multiple of 8: rows of A and W are copied 16 bytes at a time"),
    configs = matmul_configs!,
)]
pub unsafe fn matmul(a: *const bf16, b: *const bf16, c: *mut bf16, m: u32, n: u32, k: u32) {
    const _: () = assert!(
        THREADS == WARPS_M * WARPS_N * 32 + if WG == 2 { 128 } else { 0 },
        "THREADS must be WARPS_M * WARPS_N * 32, plus a producer warpgroup of 128 when WG = 2"
    );
    // The `mma.sync` fallback of a `WG = 2` config (launch bounds cap it at 168 registers
    // for 384 threads): parts of 64 columns, 4 × 2 warps of 32×32.
    const COL_PARTS: u32 = if WG == 2 { BN / 64 } else { 1 };
    // `wgmma` configs use it where it exists: sm_90a, and the CPU backend (which
    // emulates it); elsewhere they run the `mma.sync` pipeline with the same tile.
    const USE_WG: bool = WG != 0 && cfg!(any(not(target_arch = "nvptx64"), target_feature = "sm_90a"));
    type G = config_tile!(false, if WG == 2 { 4 } else { WARPS_M }, if WG == 2 { 2 } else { WARPS_N });
    type W = WgTile<{ BM as usize }, { BN as usize }, { STAGES as usize }, { (BN / 8) as usize }, { WG == 2 }, USE_WG>;
    const _: () = assert!(
        !USE_WG || (W::THREADS == THREADS as usize && W::SMEM_BYTES <= ((BM + BN) * BK * 2 * STAGES + 1024) as usize && BK == 64),
        "a wgmma config needs THREADS = BM / 64 * 128, BK = 64 and its shared memory"
    );
    #[prefetch]
    let tile = G::new(pid_m, pid_n * COL_PARTS, m, n, k);
    #[prefetch]
    let wtile = W::new(pid_m, pid_n, m, n, k);
    // SAFETY: every thread of the CTA runs these in order (no divergence before them);
    // `b` is the `[n, k]` weight with `k % 8 == 0` (the caller's contract).
    #[prefetch]
    unsafe {
        if USE_WG { wtile.prefetch_b(b) } else { tile.prefetch_b(b) }
    };
    if USE_WG {
        // SAFETY: as above; `a` is `[m, k]` (the launcher checks it); the launch gives the
        // CTA `W::THREADS` threads and `W::SMEM_BYTES` of dynamic shared memory (asserted).
        let acc = unsafe { wtile.mainloop(a, b) };
        // SAFETY: `c` is `[m, n]` (checked by the launcher) and 16-byte aligned.
        unsafe { wtile.store(&acc, c) };
    } else {
        // SAFETY: as above; the launch gives the CTA at least `G::SMEM_BYTES` of dynamic
        // shared memory; `c` is `[m, n]` (checked by the launcher) and 16-byte aligned.
        unsafe { mma_sync_block(&tile, COL_PARTS, (pid_m, pid_n), (m, n, k), (a, b, c)) };
    }
}

/// `C = A · B` in bf16 with f32 accumulation: `C[i, j] = Σ_k A[i, k] · B[k, j]`, with `B`
/// row-major `[k, n]` (the "NN" layout). Same kernel tiling, configs and PTX as
/// [`matmul`], except that B fragments come from `ldmatrix.sync.aligned.m8n8.x4.trans`.
///
/// Requirements: **`k % 8 == 0` and `n % 8 == 0`**, 16-byte aligned pointers, `B` of
/// shape `[k, n]` (the launcher checks the shapes, `k` and `n`).
///
/// # Safety
/// The pointers are valid for the shapes above and 16-byte aligned; `k % 8 == 0` and
/// `n % 8 == 0`.
#[rustfmt::skip] // one line per annotation item
#[megaops::kernel(
    block = if WG == 2 { THREADS - 128 } else { THREADS },
    smem = (BM + BN) * BK * 2 * STAGES + if WG != 0 { 1024 } else { 0 },
    input(a[m, k] = [pid_m: BM, _]),
    output(c[m, n] = [pid_m: BM, pid_n: BN]),
    tensor(b[k, n]),
    check(k.is_multiple_of(8) && n.is_multiple_of(8), "k and n must be multiples of 8: rows of A and B are copied 16 bytes at a time"),
    configs = matmul_configs!,
)]
pub unsafe fn matmul_nn(a: *const bf16, b: *const bf16, c: *mut bf16, m: u32, n: u32, k: u32) {
    const _: () = assert!(
        THREADS == WARPS_M * WARPS_N * 32 + if WG == 2 { 128 } else { 0 },
        "THREADS must be WARPS_M * WARPS_N * 32, plus a producer warpgroup of 128 when WG = 2"
    );
    // A `WG = 2` config runs the `mma.sync` pipeline on its 256 compute threads only (the
    // launch gives no producer warpgroup, so no launch bounds): two column halves with the
    // config's warps, 192 registers per thread.
    const COL_PARTS: u32 = if WG == 2 { 2 } else { 1 };
    // `matmul_nn` has no `wgmma` path (B would be N-major): its `WG != 0` configs run the
    // `mma.sync` pipeline with the same block.
    type G = config_tile!(true, WARPS_M, WARPS_N);
    #[prefetch]
    let tile = G::new(pid_m, pid_n * COL_PARTS, m, n, k);
    // SAFETY: as in `matmul`, with `b` the `[k, n]` matrix and `n % 8 == 0`.
    #[prefetch]
    unsafe {
        tile.prefetch_b(b)
    };
    // SAFETY: as in `matmul`.
    unsafe { mma_sync_block(&tile, COL_PARTS, (pid_m, pid_n), (m, n, k), (a, b, c)) };
}

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;
