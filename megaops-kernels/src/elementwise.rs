//! Row gathers and element-wise kernels of the forward pass: the token embedding
//! ([`embedding`]) and the SiLU-gated product of the MLP ([`silu_mul`]).
//!
//! Both move 16-byte vectors when the row length is a multiple of 8 and every pointer is
//! 16-byte aligned, and fall back to one element per thread otherwise.

use crate::attention::math::{bf16_bits_to_f32, pack8, silu, unpack8};
use megaops::bf16;
use megaops::device::atomic::{self, Gpu, Relaxed};
use megaops::device::memory::{ld_global_cg_v4_u32, ld_global_nc_v4_u32, st_global_v4_u32};
use megaops::device::thread::thread_idx_x;

/// Embedding gather: `y[r, :] = table[ids[r], :]` for `r < m`; an id `>= vocab` gives a
/// row of zeros (never a read out of bounds).
///
/// Layouts: `ids`: `[m]` u32 token ids (a synchronised input, so the sampler of the
/// previous decode step can produce it as a `Tiled<u32, Chunks<N>>`); `table`: `[vocab,
/// h]` bf16 row-major (a weight); `y`: `[m, h]` bf16.
///
/// Kernel tile `pid_m`: ids and rows `pid_m·BM ..`. Configs: `BM = 1` (decode) and
/// `BM = 8` (prefill).
///
/// # Safety
/// Pointers valid for the shapes above.
#[megaops::kernel(
    block = THREADS,
    input(ids[m] = [pid_m: BM]),
    output(y[m, h] = [pid_m: BM, _]),
    tensor(table[vocab, h]),
)]
#[config(BM = 1, THREADS = 128)]
#[config(BM = 8, THREADS = 256)]
pub unsafe fn embedding(ids: *const u32, table: *const bf16, y: *mut bf16, m: u32, vocab: u32, h: u32) {
    let row0 = pid_m * BM;
    let rows = BM.min(m - row0);
    let mut r = 0;
    while r < rows {
        // SAFETY: `row0 + r < m`; a relaxed gpu-scope load reads the producer's id after
        // the wait (coherent at L2).
        let id = unsafe { atomic::load(ids.add((row0 + r) as usize), Relaxed, Gpu) };
        let dst = ((row0 + r) as usize) * h as usize;
        // SAFETY: row `row0 + r` of `y`; row `id < vocab` of `table`.
        unsafe { copy_row::<THREADS>(table, id, vocab, y.add(dst), h) };
        r += 1;
    }
}

/// Copies row `id` of `table` (or zeros when `id >= vocab`) to `dst`, `h` elements, with
/// the whole CTA.
///
/// # Safety
/// `dst` valid for `h` elements; `table` for `vocab · h`.
#[inline(always)]
unsafe fn copy_row<const THREADS: u32>(table: *const bf16, id: u32, vocab: u32, dst: *mut bf16, h: u32) {
    let tid = thread_idx_x() as usize;
    let step = THREADS as usize;
    let valid = id < vocab;
    let src = if valid {
        table.wrapping_add(id as usize * h as usize)
    } else {
        table
    };
    if h.is_multiple_of(8) && (src as usize | dst as usize).is_multiple_of(16) {
        let nvec = (h / 8) as usize;
        let mut k = tid;
        // Two vectors per thread and iteration: two loads in flight before the stores.
        while k + step < nvec {
            // SAFETY: k + step < nvec vectors of the row.
            unsafe {
                let (a, b) = if valid {
                    (
                        ld_global_nc_v4_u32(src.add(8 * k).cast()),
                        ld_global_nc_v4_u32(src.add(8 * (k + step)).cast()),
                    )
                } else {
                    ([0; 4], [0; 4])
                };
                st_global_v4_u32(dst.add(8 * k).cast(), a);
                st_global_v4_u32(dst.add(8 * (k + step)).cast(), b);
            }
            k += 2 * step;
        }
        if k < nvec {
            // SAFETY: k < nvec.
            unsafe {
                let a = if valid {
                    ld_global_nc_v4_u32(src.add(8 * k).cast())
                } else {
                    [0; 4]
                };
                st_global_v4_u32(dst.add(8 * k).cast(), a);
            }
        }
    } else {
        let mut i = tid;
        while i < h as usize {
            // SAFETY: i < h.
            unsafe { dst.add(i).write(if valid { *src.add(i) } else { bf16::ZERO }) };
            i += step;
        }
    }
}

/// The gated activation of a SwiGLU MLP: `y[r, j] = silu(gu[r, j]) · gu[r, inter + j]`,
/// `silu(g) = g / (1 + e^-g)`, f32 arithmetic, one bf16 rounding.
///
/// Layouts: `gu`: `[m, 2·inter]` bf16, the output of a fused gate+up projection with the
/// gate in columns `0..inter` and up in `inter..2·inter`; `y`: `[m, inter]` bf16.
///
/// Kernel tile `(pid_m, pid_n)`: rows `pid_m·BM ..`, columns `pid_n·BN ..` of `y` (2-D
/// output tiles, so a consumer with 2-D data tiles, e.g. the down projection of the
/// paper's AR scheme, can start on partial columns); it reads whole rows of `gu` (the gate
/// and up halves are two column ranges, which one kernel-tile box cannot name). Configs:
/// `BM = 1, BN = 1024` (decode: 128 threads, one vector each) and `BM = 16, BN = 2048`
/// (prefill: 16 vectors per thread).
///
/// # Safety
/// Pointers valid for the shapes above.
#[megaops::kernel(
    block = THREADS,
    input(gu[m, 2 * inter] = [pid_m: BM, _]),
    output(y[m, inter] = [pid_m: BM, pid_n: BN]),
)]
#[config(BM = 1, BN = 1024, THREADS = 128)]
#[config(BM = 16, BN = 2048, THREADS = 256)]
pub unsafe fn silu_mul(gu: *const bf16, y: *mut bf16, m: u32, inter: u32) {
    let (row0, col0) = (pid_m * BM, pid_n * BN);
    let (rows, cols) = (BM.min(m - row0), BN.min(inter - col0));
    let aligned = inter.is_multiple_of(8) && (gu as usize | y as usize).is_multiple_of(16);
    let tid = thread_idx_x();
    if aligned {
        // `cols` is a multiple of 8 too (BN is).
        let per_row = cols / 8;
        let mut r = row0;
        while r < row0 + rows {
            let mut v = tid;
            while v < per_row {
                let c = col0 + 8 * v;
                let (src, dst) = (
                    r as usize * 2 * inter as usize + c as usize,
                    r as usize * inter as usize + c as usize,
                );
                // SAFETY: row r < m, columns c..c+8 <= inter, 16-byte aligned; `gu` was
                // waited for (`.cg`: read at L2).
                unsafe {
                    let g = unpack8(ld_global_cg_v4_u32(gu.add(src).cast()));
                    let u = unpack8(ld_global_cg_v4_u32(gu.add(src + inter as usize).cast()));
                    st_global_v4_u32(y.add(dst).cast(), pack8(core::array::from_fn(|i| silu(g[i]) * u[i])));
                }
                v += THREADS;
            }
            r += 1;
        }
    } else {
        let total = rows * cols;
        let mut e = tid;
        while e < total {
            let (r, c) = (row0 + e / cols, col0 + e % cols);
            let src = r as usize * 2 * inter as usize + c as usize;
            // SAFETY: in bounds as above; volatile loads are not served from a stale L1 line.
            unsafe {
                let g = bf16_bits_to_f32(core::ptr::read_volatile(gu.add(src)).to_bits());
                let u = bf16_bits_to_f32(core::ptr::read_volatile(gu.add(src + inter as usize)).to_bits());
                y.add(r as usize * inter as usize + c as usize)
                    .write(bf16::from_f32(silu(g) * u));
            }
            e += THREADS;
        }
    }
}
