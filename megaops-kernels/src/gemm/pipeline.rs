//! The CTA-level GEMM mainloop: a `STAGES`-deep `cp.async` pipeline from global to
//! swizzled shared memory, `ldmatrix` fragment loads double-buffered in registers, and
//! `mma.sync.m16n8k16` bf16 → f32 on a `WARPS_M × WARPS_N` grid of warps.
//!
//! # Tiling
//!
//! A CTA computes the `BM × BN` block of `C` at (`row0`, `col0`) = (`pid_m·BM`,
//! `pid_n·BN`), walking `k` in steps of `BK` ("k-tiles"). Warp `w` owns the
//! `WM × WN = (BM / WARPS_M) × (BN / WARPS_N)` sub-block at (`(w / WARPS_N)·WM`,
//! `(w % WARPS_N)·WN`), i.e. `MI × NI` mma tiles of 16×8 (`MI = WM / 16`,
//! `NI = WN / 8`), accumulated in `MI·NI·4` f32 registers per thread.
//!
//! # Shared memory
//!
//! `STAGES` A tiles (`BM × BK`, row-major, `BK / 8` chunks of 16 bytes per row) followed by
//! `STAGES` B tiles: for `NT` (`W[n, k]`) `BN × BK` row-major like A; for `NN`
//! (`B[k, n]`) `BK × BN` row-major. All use the swizzles of [`super::tile`], so the
//! `cp.async` writes and the `ldmatrix` reads are free of bank conflicts.
//!
//! # Schedule (per k-tile, `KS = BK / 16` k-steps)
//!
//! ```text
//! prologue: B of k-tiles 0..STAGES-1 (may run before the input wait: weights),
//!           then A of k-tiles 0..STAGES-1, one commit group per k-tile
//! wait_group(STAGES-2); bar.sync; fragments of k-step 0
//! for each k-tile kt:
//!   for ks in 0..KS:
//!     if ks == KS-1: next read stage; wait_group(STAGES-2); bar.sync
//!     ldmatrix fragments of k-step ks+1 (mod KS) into the other register buffer
//!     if ks == 0: cp.async k-tile kt+STAGES-1 into the stage read during kt-1; commit
//!     MI×NI mma.sync on the current register buffer
//! ```
//!
//! The stage written at k-tile `kt` was last read before the barrier at the end of
//! k-tile `kt-1`, so no warp still reads it; the barrier after `wait_group(STAGES-2)`
//! makes every thread's copies of k-tile `kt+1` visible before any warp reads them (each
//! k-tile is one commit group, empty past the end of `k`, so the count is exact).
//!
//! # Edges
//!
//! Every 16-byte copy is a `cp.async.cg ... 16, src_size` with `src_size` the number of
//! in-bounds bytes (0 for rows past `m`/`n`/`k`, which then read nothing and store zeros):
//! edge tiles compute on zeros and the epilogue stores only in-bounds elements. The rows
//! of A and `W` must start 16-byte aligned: `k % 8 == 0` (and `n % 8 == 0` for `NN`).

use super::tile::{copy_threads, swizzle_bytes, unroll};
use megaops::bf16;
use megaops::device::memory::{cp_async_cg_16, cp_async_cg_16_zfill, cp_async_commit_group, cp_async_wait_group};
use megaops::device::mma::{ldmatrix_x4, ldmatrix_x4_trans, mma_m16n8k16_bf16_f32};
use megaops::device::shared::{self, SharedPtr};
use megaops::device::thread::{lane_id, linear_thread_idx, sync_threads};

/// The accumulators of one thread: `MI × NI` mma tiles, each the 4 f32 of a C/D fragment
/// (`megaops_device::mma` module docs: rows `g, g, g+8, g+8`, columns `2t, 2t+1, 2t, 2t+1`).
pub type Acc<const MI: usize, const NI: usize> = [[[f32; 4]; NI]; MI];

/// One CTA's view of a GEMM tile: its position, the problem size and its shared memory.
///
/// Const parameters: the CTA tile `BM × BN × BK`, pipeline depth `STAGES` (2..=6), warp
/// grid `WARPS_M × WARPS_N`, mma tiles per warp `MI × NI` (must equal
/// `BM / WARPS_M / 16` and `BN / WARPS_N / 8`; Rust cannot compute array lengths from
/// const parameters, so the caller spells them), and the B layout (`NN = false`: `W[n,
/// k]`, C = A·Wᵀ; `NN = true`: `B[k, n]`, C = A·B). Invalid combinations fail to compile
/// ([`Tile::CHECK`]).
pub struct Tile<
    const BM: usize,
    const BN: usize,
    const BK: usize,
    const STAGES: usize,
    const WARPS_M: usize,
    const WARPS_N: usize,
    const MI: usize,
    const NI: usize,
    const NN: bool,
> {
    smem: SharedPtr<u8>,
    m: u32,
    n: u32,
    k: u32,
    /// First row of the CTA's block of C.
    pub(crate) row0: u32,
    /// First column of the CTA's block of C.
    pub(crate) col0: u32,
    ktiles: u32,
    tid: u32,
    lane: u32,
    warp_m: u32,
    warp_n: u32,
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
    /// Threads per CTA.
    pub const THREADS: usize = WARPS_M * WARPS_N * 32;
    /// Rows of C per warp.
    pub const WM: usize = BM / WARPS_M;
    /// Columns of C per warp.
    pub const WN: usize = BN / WARPS_N;
    /// k-steps of 16 per k-tile.
    pub const KS: usize = BK / 16;
    /// 16-byte chunks per row of an A (and NT B) tile.
    const CPR_K: usize = BK / 8;
    /// 16-byte chunks per row of an NN B tile and of the epilogue's C tile.
    pub(crate) const CPR_N: usize = BN / 8;
    /// Bytes of one A stage.
    const A_STAGE: usize = BM * BK * 2;
    /// Bytes of one B stage.
    const B_STAGE: usize = BN * BK * 2;
    /// Dynamic shared memory the kernel must be launched with, in bytes.
    pub const SMEM_BYTES: usize = (Self::A_STAGE + Self::B_STAGE) * STAGES;
    /// Threads that copy tiles and store `C` ([`copy_threads`]): all of them unless the
    /// CTA has 384.
    pub(crate) const COPY: usize = copy_threads(Self::THREADS);
    /// Rows of a K-contiguous tile one copy iteration of the copying threads covers.
    const RPI_K: usize = Self::COPY / Self::CPR_K;
    /// Rows of an N-contiguous tile one copy iteration of the copying threads covers.
    pub(crate) const RPI_N: usize = Self::COPY / Self::CPR_N;

    /// Compile-time checks of the configuration (evaluated when the tile is created).
    pub const CHECK: () = {
        assert!(
            BK.is_multiple_of(32) && BK <= 64,
            "BK must be 32 or 64 (an even number of k-steps of 16)"
        );
        assert!(STAGES >= 2 && STAGES <= 6, "STAGES must be 2..=6");
        assert!(MI * 16 * WARPS_M == BM, "MI must be BM / WARPS_M / 16");
        assert!(NI * 8 * WARPS_N == BN, "NI must be BN / WARPS_N / 8");
        assert!(
            NI.is_multiple_of(2),
            "NI must be even (B fragments are loaded two n8 tiles at a time)"
        );
        assert!(MI <= 8 && NI <= 16, "warp tile too large");
        assert!(
            Self::COPY.is_multiple_of(Self::CPR_K) && BM.is_multiple_of(Self::RPI_K),
            "A tile not covered by whole copy iterations"
        );
        assert!(BM / Self::RPI_K <= 16, "too many A copy iterations");
        assert!(
            BN >= 64 && Self::COPY.is_multiple_of(Self::CPR_N),
            "BN must be >= 64 and divide into the threads' chunks"
        );
        assert!(
            Self::RPI_N.is_multiple_of(8),
            "an N-contiguous copy iteration must cover a multiple of 8 rows (swizzle period)"
        );
        assert!(
            BM.is_multiple_of(Self::RPI_N),
            "C tile not covered by whole store iterations"
        );
        assert!(
            BM * BN * 2 <= Self::SMEM_BYTES,
            "the epilogue's C tile must fit in the pipeline's shared memory"
        );
        if NN {
            assert!(
                BK.is_multiple_of(Self::RPI_N) && BK / Self::RPI_N <= 16,
                "NN B tile not covered by whole copy iterations"
            );
        } else {
            assert!(
                BN.is_multiple_of(Self::RPI_K) && BN / Self::RPI_K <= 16,
                "NT B tile not covered by whole copy iterations"
            );
        }
    };

    /// The tile `(pid_m, pid_n)` of an `m × n × k` GEMM, in the CTA's dynamic shared memory
    /// (which must hold [`Self::SMEM_BYTES`]).
    #[inline(always)]
    pub fn new(pid_m: u32, pid_n: u32, m: u32, n: u32, k: u32) -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::CHECK;
        let tid = linear_thread_idx();
        let warp = tid / 32;
        Tile {
            smem: shared::dynamic::<u8>(),
            m,
            n,
            k,
            row0: pid_m * BM as u32,
            col0: pid_n * BN as u32,
            ktiles: k.div_ceil(BK as u32),
            tid,
            lane: lane_id(),
            warp_m: warp / WARPS_N as u32,
            warp_n: warp % WARPS_N as u32,
        }
    }

    /// The CTA's shared memory.
    #[inline(always)]
    pub(crate) fn smem(&self) -> SharedPtr<u8> {
        self.smem
    }

    /// This thread's index in the CTA, lane, and warp coordinates `(warp_m, warp_n)`.
    #[inline(always)]
    pub(crate) fn thread(&self) -> (u32, u32, u32, u32) {
        (self.tid, self.lane, self.warp_m, self.warp_n)
    }

    /// Problem size `(m, n, k)`.
    #[inline(always)]
    pub(crate) fn dims(&self) -> (u32, u32, u32) {
        (self.m, self.n, self.k)
    }

    /// Copies rows `first..first + ROWS` (clipped to `limit`) × k-tile `kt` of a row-major
    /// `[_, k]` matrix into a K-contiguous tile at byte `tile` of shared memory
    /// ([`copy_k_rows`]).
    ///
    /// # Safety
    /// As for [`copy_k_rows`].
    #[inline(always)]
    unsafe fn copy_k_rows<const ROWS: usize>(&self, src: *const bf16, tile: u32, first: u32, limit: u32, kt: u32) {
        let to = self.smem.byte_add(tile as usize);
        // SAFETY: forwarded.
        unsafe { copy_k_rows::<ROWS, BK>(to, self.tid, Self::COPY, src, first, limit, self.k, kt) }
    }

    /// Copies k-rows `kt·BK..+BK` × columns `col0..col0+BN` of a row-major `[k, n]` matrix
    /// into an N-contiguous tile at byte `tile` of shared memory (NN's B).
    ///
    /// # Safety
    /// `src` is a 16-byte aligned `[k, n]` row-major bf16 matrix with `n % 8 == 0`; nobody
    /// reads the destination stage until a `cp.async` wait and a barrier.
    #[inline(always)]
    unsafe fn copy_n_rows(&self, src: *const bf16, tile: u32, kt: u32) {
        if Self::COPY < Self::THREADS && self.tid >= Self::COPY as u32 {
            return;
        }
        let cpr = Self::CPR_N as u32;
        let (r0, ch) = (self.tid / cpr, self.tid % cpr);
        let col = self.col0 + ch * 8;
        let bytes = if col < self.n { (2 * (self.n - col)).min(16) } else { 0 };
        let dst = self.smem.byte_add((tile + swizzle_bytes(r0, ch, cpr)) as usize);
        let row = kt * BK as u32 + r0;
        let base = src.wrapping_add(row as usize * self.n as usize + col as usize);
        unroll!(i in 0..BK / Self::RPI_N => {
            let ok = row + ((i * Self::RPI_N) as u32) < self.k && bytes > 0;
            // SAFETY: as in `copy_k_rows`, with rows of `n` elements.
            unsafe {
                let from = if ok { base.wrapping_add(i * Self::RPI_N * self.n as usize) } else { src };
                cp_async_cg_16_zfill(dst.byte_add(i * Self::COPY * 16), from.cast(), if ok { bytes } else { 0 });
            }
        });
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
    /// As for [`Tile::mainloop`].
    #[inline(always)]
    unsafe fn load_a(&self, a: *const bf16, stage: u32, kt: u32) {
        // SAFETY: forwarded.
        unsafe { self.copy_k_rows::<BM>(a, Self::a_stage(stage), self.row0, self.m, kt) }
    }

    /// Starts the copies of B's k-tile `kt` into stage `stage` (no commit).
    ///
    /// # Safety
    /// As for [`Tile::mainloop`].
    #[inline(always)]
    unsafe fn load_b(&self, b: *const bf16, stage: u32, kt: u32) {
        // SAFETY: forwarded.
        unsafe {
            if NN {
                self.copy_n_rows(b, Self::b_stage(stage), kt)
            } else {
                self.copy_k_rows::<BN>(b, Self::b_stage(stage), self.col0, self.n, kt)
            }
        }
    }

    /// Starts the copies of B's first `STAGES - 1` k-tiles (uncommitted: they join the
    /// first commit group of [`Tile::mainloop`]). Call it before the wait for A, so the
    /// weights stream in while the producer of A finishes (paper §3.2); then call
    /// [`Tile::mainloop`].
    ///
    /// # Safety
    /// All threads of the CTA call it, with the same `b`; `b` is as for
    /// [`Tile::mainloop`].
    #[inline(always)]
    pub unsafe fn prefetch_b(&self, b: *const bf16) {
        unroll!(s in 0..STAGES - 1 => {
            if (s as u32) < self.ktiles {
                // SAFETY: forwarded; stage `s` is untouched until the mainloop's first wait.
                unsafe { self.load_b(b, s as u32, s as u32) };
            }
        });
    }

    /// Loads the A and B fragments of k-step `ks` of stage `stage`.
    ///
    /// Addresses: the swizzle period is 8 lines, i.e. 16 rows of a K-contiguous tile
    /// with `BK = 32` and 8 rows otherwise, so moving 16 rows adds a constant; and moving
    /// two chunks along k (`ks → ks + 1`) XORs the address with 32 (the chunk pair
    /// `2ks, 2ks + 1` never carries into bit 3). So each thread needs one base per
    /// operand ([`Tile::frag_bases`]) and every other offset is an immediate or an XOR —
    /// the identities are checked in `tile::tests`.
    ///
    /// # Safety
    /// All 32 lanes of the warp call it, converged; the stage's copies are complete and
    /// visible (wait + barrier).
    #[inline(always)]
    unsafe fn fragments(
        &self,
        bases: (u32, u32),
        stage: u32,
        ks: usize,
        fa: &mut [[u32; 4]; MI],
        fb: &mut [[u32; 2]; NI],
    ) {
        let a_tile = self
            .smem
            .byte_add((Self::a_stage(stage) + (bases.0 ^ (32 * ks as u32))) as usize);
        // 16 rows of a K-contiguous tile.
        let k_rows16 = 16 * Self::CPR_K * 16;
        unroll!(i in 0..MI => {
            // SAFETY: a 16-byte aligned row inside the A stage; converged warp (caller).
            fa[i] = unsafe { ldmatrix_x4(a_tile.byte_add(i * k_rows16)) };
        });
        let words = |jj: usize| {
            if NN {
                // B[k, n] tile: 16 k-rows per k-step (a whole swizzle period); the
                // per-lane chunk offset of each pair of n8 tiles is its own base.
                let at = Self::b_stage(stage) + self.nn_base(bases.1, jj) + (ks * 16 * Self::CPR_N * 16) as u32;
                // SAFETY: as for A.
                unsafe { ldmatrix_x4_trans(self.smem.byte_add(at as usize)) }
            } else {
                let at = Self::b_stage(stage) + (bases.1 ^ (32 * ks as u32)) + (jj * k_rows16) as u32;
                // SAFETY: as for A.
                unsafe { ldmatrix_x4(self.smem.byte_add(at as usize)) }
            }
        };
        unroll!(jj in 0..NI / 2 => {
            let w = words(jj);
            fb[2 * jj] = [w[0], w[1]];
            fb[2 * jj + 1] = [w[2], w[3]];
        });
    }

    /// The per-thread fragment base offsets (within a stage) of k-step 0: A's, and B's
    /// (NT: of n-tile pair 0; NN: the k-row part, see [`Tile::nn_base`]).
    ///
    /// `ldmatrix.x4` lane roles: for A, lanes `8q..8q+8` give the rows of matrix
    /// `q` = (rows `+8·(q%2)`, k `+8·(q/2)`) of a 16×16 block; for `W[n, k]`, matrix
    /// `q` = (n `+8·(q/2)`, k `+8·(q%2)`); for `B[k, n]` (transposed on load), matrix `q`
    /// = (k `+8·(q%2)`, n `+8·(q/2)`).
    #[inline(always)]
    fn frag_bases(&self) -> (u32, u32) {
        let lane = self.lane;
        let cpr_k = Self::CPR_K as u32;
        let a_row = self.warp_m * Self::WM as u32 + (lane % 8) + 8 * ((lane / 8) % 2);
        let a = swizzle_bytes(a_row, lane / 16, cpr_k);
        let b = if NN {
            (lane % 8) + 8 * ((lane / 8) % 2)
        } else {
            let row = self.warp_n * Self::WN as u32 + (lane % 8) + 8 * (lane / 16);
            swizzle_bytes(row, (lane / 8) % 2, cpr_k)
        };
        (a, b)
    }

    /// NN: byte offset (k-step 0) of this lane's row for n-tile pair `jj`, from the lane's
    /// k-row `row` ([`Tile::frag_bases`]).
    #[inline(always)]
    fn nn_base(&self, row: u32, jj: usize) -> u32 {
        let chunk = (self.warp_n * Self::WN as u32) / 8 + 2 * jj as u32 + self.lane / 16;
        swizzle_bytes(row, chunk, Self::CPR_N as u32)
    }

    /// Runs the pipeline over all of `k` and returns this thread's accumulators.
    /// Completes every `cp.async` it started; the shared memory is free again only after
    /// a barrier (the epilogue's).
    ///
    /// # Safety
    /// All threads of the CTA call it, converged, after [`Tile::prefetch_b`] with the same
    /// `b`. `a` is a 16-byte aligned row-major `[m, k]` bf16 matrix, `b` a 16-byte aligned
    /// `[n, k]` (NT) or `[k, n]` (NN) one, with `k % 8 == 0` (NN: also `n % 8 == 0`); the
    /// CTA was launched with at least [`Self::SMEM_BYTES`] of dynamic shared memory.
    #[inline(always)]
    pub unsafe fn mainloop(&self, a: *const bf16, b: *const bf16) -> Acc<MI, NI> {
        let mut acc: Acc<MI, NI> = [[[0.0; 4]; NI]; MI];
        let mut fa = [[[0u32; 4]; MI]; 2];
        let mut fb = [[[0u32; 2]; NI]; 2];
        // SAFETY (whole body): the caller's contract covers every copy and fragment load;
        // the schedule in the module docs orders copies, waits, barriers and reads.
        unsafe {
            unroll!(s in 0..STAGES - 1 => {
                if (s as u32) < self.ktiles {
                    self.load_a(a, s as u32, s as u32);
                }
                cp_async_commit_group();
            });
            wait_stages::<STAGES>();
            sync_threads();
            let bases = self.frag_bases();
            self.fragments(bases, 0, 0, &mut fa[0], &mut fb[0]);
            let (mut read, mut write) = (0u32, STAGES as u32 - 1);
            let mut kt = 0;
            while kt < self.ktiles {
                unroll!(ks in 0..Self::KS => {
                    if ks == Self::KS - 1 {
                        read = next_stage::<STAGES>(read);
                        wait_stages::<STAGES>();
                        sync_threads();
                    }
                    self.fragments(bases, read, (ks + 1) % Self::KS, &mut fa[(ks + 1) % 2], &mut fb[(ks + 1) % 2]);
                    if ks == 0 {
                        let next = kt + STAGES as u32 - 1;
                        if next < self.ktiles {
                            self.load_a(a, write, next);
                            self.load_b(b, write, next);
                        }
                        cp_async_commit_group();
                        write = next_stage::<STAGES>(write);
                    }
                    let (ca, cb) = (&fa[ks % 2], &fb[ks % 2]);
                    unroll!(i in 0..MI => {
                        unroll!(jr in 0..NI => {
                            // Serpentine order: consecutive mmas share a B fragment.
                            let j = if i.is_multiple_of(2) { jr } else { NI - 1 - jr };
                            acc[i][j] = mma_m16n8k16_bf16_f32(ca[i], cb[j], acc[i][j]);
                        });
                    });
                });
                kt += 1;
            }
        }
        acc
    }
}

/// Copies rows `first..first + ROWS` (clipped to `limit`) × k-tile `kt` (columns
/// `kt·BK..+BK`, clipped to `k`) of a row-major `[_, k]` bf16 matrix into the
/// K-contiguous `ROWS × BK` tile at `to` (swizzled, [`super::tile`]) with 16-byte
/// `cp.async.cg` (zero-filled past the edges). Thread `tid` of `threads` copies chunk
/// `tid % (BK/8)` of rows `tid / (BK/8) + i·threads/(BK/8)`; threads with `tid >= threads`
/// copy nothing.
///
/// # Safety
/// `src` is a 16-byte aligned `[limit, k]` row-major bf16 matrix with `k % 8 == 0`; `to`
/// is a 16-byte aligned tile of `ROWS·BK·2` bytes of shared memory that nobody reads until
/// a `cp.async` wait and a barrier; `threads / (BK/8)` divides `ROWS` and is a multiple of
/// 8 lines' worth of rows (`threads` a multiple of 64), so that shifting by whole
/// iterations keeps the swizzle.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn copy_k_rows<const ROWS: usize, const BK: usize>(
    to: SharedPtr<u8>,
    tid: u32,
    threads: usize,
    src: *const bf16,
    first: u32,
    limit: u32,
    k: u32,
    kt: u32,
) {
    if tid >= threads as u32 {
        return;
    }
    let cpr = (BK / 8) as u32;
    let rows_per_iter = threads / (BK / 8);
    let (r0, ch) = (tid / cpr, tid % cpr);
    let col = kt * BK as u32 + ch * 8;
    let bytes = if col < k { (2 * (k - col)).min(16) } else { 0 };
    let dst = to.byte_add(swizzle_bytes(r0, ch, cpr) as usize);
    let row = first + r0;
    // This thread's first element; iteration i is `i·rows_per_iter` rows further.
    let base = src.wrapping_add(row as usize * k as usize + col as usize);
    for i in 0..ROWS / rows_per_iter {
        let ok = row + ((i * rows_per_iter) as u32) < limit && bytes > 0;
        // SAFETY: when `ok`, the 16 bytes (`bytes` of them in bounds) start inside the
        // matrix at an aligned address; otherwise nothing is read (`src_size` 0) and the
        // base pointer only supplies an aligned address. The destination is this thread's
        // chunk of the tile.
        unsafe {
            let from = if ok {
                base.wrapping_add(i * rows_per_iter * k as usize)
            } else {
                src
            };
            cp_async_cg_16_zfill(dst.byte_add(i * threads * 16), from.cast(), if ok { bytes } else { 0 });
        }
    }
}

/// [`copy_k_rows`] for a tile that lies wholly inside the matrix (`first + ROWS <= limit`
/// and `(kt + 1)·BK <= k`): the same copies, without the per-row bounds checks and the
/// zero fill, so a thread issues each 16-byte `cp.async.cg` after one address add
/// (a warp-specialised producer issues every copy of the CTA, so its instruction count
/// is what delays the stage).
///
/// # Safety
/// As for [`copy_k_rows`], and the tile is interior as above.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn copy_k_rows_interior<const ROWS: usize, const BK: usize>(
    to: SharedPtr<u8>,
    tid: u32,
    threads: usize,
    src: *const bf16,
    first: u32,
    k: u32,
    kt: u32,
) {
    if tid >= threads as u32 {
        return;
    }
    let cpr = (BK / 8) as u32;
    let rows_per_iter = threads / (BK / 8);
    let (r0, ch) = (tid / cpr, tid % cpr);
    let dst = to.byte_add(swizzle_bytes(r0, ch, cpr) as usize);
    let base = src.wrapping_add((first + r0) as usize * k as usize + (kt * BK as u32 + ch * 8) as usize);
    let stride = rows_per_iter * k as usize;
    for i in 0..ROWS / rows_per_iter {
        // SAFETY: the tile is interior (caller), so the 16 bytes at row `first + r0 +
        // i·rows_per_iter`, column `kt·BK + 8·ch` are inside the matrix and 16-byte
        // aligned (`k % 8 == 0`); the destination is this thread's chunk of the tile.
        unsafe { cp_async_cg_16(dst.byte_add(i * threads * 16), base.wrapping_add(i * stride).cast()) }
    }
}

/// `(s + 1) % STAGES` without a division.
#[inline(always)]
pub(crate) fn next_stage<const STAGES: usize>(s: u32) -> u32 {
    if s + 1 == STAGES as u32 { 0 } else { s + 1 }
}

/// `cp.async.wait_group STAGES-2`: the oldest of the `STAGES - 1` k-tiles in flight has
/// landed (for this thread).
#[inline(always)]
fn wait_stages<const STAGES: usize>() {
    match STAGES {
        2 => cp_async_wait_group::<0>(),
        3 => cp_async_wait_group::<1>(),
        4 => cp_async_wait_group::<2>(),
        5 => cp_async_wait_group::<3>(),
        _ => cp_async_wait_group::<4>(),
    }
}
