//! `ldmatrix` and `mma.sync` m16n8k16: fragment loads and a 16×16×32 matmul tile.

use megaops_device::memory::{cp_async_cg_16, cp_async_commit_group, cp_async_wait_all};
use megaops_device::mma::*;
use megaops_device::shared::SharedPtr;
use megaops_device::static_shared;
use megaops_device::thread::*;

/// Words [`ldmatrix_probe`] writes per lane.
pub const PROBE_WORDS: usize = 14;

/// The 16-bit value [`ldmatrix_probe`] stores at row `r`, column `c` of matrix `m`.
pub const fn probe_value(m: usize, r: usize, c: usize) -> u16 {
    ((m << 12) | (r << 8) | (c << 4) | 0x5) as u16
}

/// 512 bytes of shared memory, 128-byte aligned.
#[repr(C, align(128))]
struct Tile512([u16; 256]);

/// One warp stores four 8×8 matrices of distinct 16-bit values ([`probe_value`]) in
/// shared memory (row `r` of matrix `m` at byte `128m + 16r`), then every lane `l` (which
/// gives the address of row `l % 8` of matrix `l / 8`) writes to `out[14l..]` what it
/// receives from `ldmatrix` `.x1` (1 word), `.x2` (2), `.x4` (4), `.x1.trans` (1),
/// `.x2.trans` (2) and `.x4.trans` (4).
///
/// Launch: grid `(1, 1, 1)`, block `(32, 1, 1)`. `out`: 448 words.
///
/// # Safety
/// `out` is valid for 448 words; the launch is as described.
pub unsafe fn ldmatrix_probe(out: *mut u32) {
    let tile: SharedPtr<Tile512> = static_shared!(PROBE: Tile512);
    let elems = tile.cast::<u16>();
    let lane = lane_id() as usize;
    for e in (lane..256).step_by(32) {
        let (m, r, c) = (e / 64, e / 8 % 8, e % 8);
        // SAFETY: e < 256 elements of the tile.
        unsafe { elems.add(e).write(probe_value(m, r, c)) };
    }
    sync_threads();
    let row = tile.cast::<u8>().byte_add(128 * (lane / 8) + 16 * (lane % 8));
    let mut words = [0u32; PROBE_WORDS];
    // SAFETY: every lane passes a 16-byte aligned row of the tile; the warp is converged.
    unsafe {
        words[0] = ldmatrix_x1(row);
        words[1..3].copy_from_slice(&ldmatrix_x2(row));
        words[3..7].copy_from_slice(&ldmatrix_x4(row));
        words[7] = ldmatrix_x1_trans(row);
        words[8..10].copy_from_slice(&ldmatrix_x2_trans(row));
        words[10..14].copy_from_slice(&ldmatrix_x4_trans(row));
    }
    for (i, w) in words.into_iter().enumerate() {
        // SAFETY: in bounds by the launch contract.
        unsafe { out.add(lane * PROBE_WORDS + i).write(w) };
    }
}
entry!(ldmatrix_probe(out: *mut u32));

/// Rows of the matmul tile.
pub const MMA_M: usize = 16;
/// Columns of the matmul tile.
pub const MMA_N: usize = 16;
/// Depth of the matmul tile.
pub const MMA_K: usize = 32;

/// 1024 bytes of shared memory, 128-byte aligned.
#[repr(C, align(128))]
struct Tile1k([u16; 512]);

/// `d = A·B + C` for a 16×16 tile with K = 32, by one warp: A, B and Bᵀ are copied to
/// shared memory with `cp.async.cg`, then for each 8-column half and each 16-deep step, A
/// comes from `ldmatrix.x4`, B once from `ldmatrix.x2.trans` of `b` (K×N) and once from
/// `ldmatrix.x2` of `bt` (N×K), each fed to its own chain of `mma` (`mma` is the
/// instruction under test).
#[inline(always)]
unsafe fn mma_tile(
    a: *const u16,
    b: *const u16,
    bt: *const u16,
    c: *const f32,
    d: *mut f32,
    mma: impl Fn([u32; 4], [u32; 2], [f32; 4]) -> [f32; 4],
) {
    let a_s: SharedPtr<Tile1k> = static_shared!(A_TILE: Tile1k);
    let b_s: SharedPtr<Tile1k> = static_shared!(B_TILE: Tile1k);
    let bt_s: SharedPtr<Tile1k> = static_shared!(BT_TILE: Tile1k);
    let lane = lane_id() as usize;
    for (dst, src) in [(a_s, a), (b_s, b), (bt_s, bt)] {
        for chunk in [lane, lane + 32] {
            // SAFETY: 64 chunks of 16 bytes in each 1024-byte, 16-byte aligned matrix.
            unsafe { cp_async_cg_16(dst.cast::<u8>().byte_add(16 * chunk), src.cast::<u8>().add(16 * chunk)) };
        }
    }
    cp_async_commit_group();
    cp_async_wait_all();
    sync_threads();

    let (m, r) = ((lane % 16) / 8, lane % 8);
    for nt in 0..2 {
        let mut acc_t = [0.0f32; 4];
        for (i, acc) in acc_t.iter_mut().enumerate() {
            let (row, col) = layout::c_coord(lane as u32, i as u32);
            // SAFETY: inside the 16×16 `c`.
            *acc = unsafe { c.add(row * MMA_N + 8 * nt + col).read() };
        }
        let mut acc_p = acc_t;
        for ks in 0..2 {
            let (qa, qr) = (lane / 8, lane % 8);
            let a_row = 8 * (qa % 2) + qr;
            let a_col = 16 * ks + 8 * (qa / 2);
            let a_addr = a_s.cast::<u8>().byte_add(2 * (a_row * MMA_K + a_col));
            let b_addr = b_s.cast::<u8>().byte_add(2 * ((16 * ks + 8 * m + r) * MMA_N + 8 * nt));
            let bt_addr = bt_s.cast::<u8>().byte_add(2 * ((8 * nt + r) * MMA_K + 16 * ks + 8 * m));
            // SAFETY: every address is a 16-byte aligned row inside its tile; the warp is
            // converged.
            let (fa, fb_t, fb_p) = unsafe { (ldmatrix_x4(a_addr), ldmatrix_x2_trans(b_addr), ldmatrix_x2(bt_addr)) };
            acc_t = mma(fa, fb_t, acc_t);
            acc_p = mma(fa, fb_p, acc_p);
        }
        for i in 0..4 {
            let (row, col) = layout::c_coord(lane as u32, i as u32);
            let at = row * MMA_N + 8 * nt + col;
            // SAFETY: inside the two 16×16 halves of `d`.
            unsafe {
                d.add(at).write(acc_t[i]);
                d.add(MMA_M * MMA_N + at).write(acc_p[i]);
            }
        }
    }
}

/// `d = A·B + C` for a 16×16 tile with K = 32, by one warp, with bf16 `a` (16×32
/// row-major), `b` (32×16 row-major) and `bt` (16×32, the transpose of `b`), f32 `c`
/// (16×16). A, B and Bᵀ are copied to shared memory with `cp.async.cg`; for each 8-column
/// half and 16-deep step A comes from `ldmatrix.x4`, and B once from `ldmatrix.x2.trans`
/// of `b` and once from `ldmatrix.x2` of `bt`, each feeding its own chain of `mma.sync`.
/// `d` gets both results (512 f32: the `.trans` chain, then the plain one).
///
/// Launch: grid `(1, 1, 1)`, block `(32, 1, 1)`. All pointers 16-byte aligned.
///
/// # Safety
/// The pointers are valid for the sizes above.
pub unsafe fn mma_bf16(a: *const u16, b: *const u16, bt: *const u16, c: *const f32, d: *mut f32) {
    // SAFETY: forwarded; the warp is converged at every `mma`.
    unsafe { mma_tile(a, b, bt, c, d, |a, b, c| mma_m16n8k16_bf16_f32(a, b, c)) }
}
entry!(mma_bf16(a: *const u16, b: *const u16, bt: *const u16, c: *const f32, d: *mut f32));

/// [`mma_bf16`] with f16 inputs.
///
/// # Safety
/// As for [`mma_bf16`].
pub unsafe fn mma_f16(a: *const u16, b: *const u16, bt: *const u16, c: *const f32, d: *mut f32) {
    // SAFETY: forwarded; the warp is converged at every `mma`.
    unsafe { mma_tile(a, b, bt, c, d, |a, b, c| mma_m16n8k16_f16_f32(a, b, c)) }
}
entry!(mma_f16(a: *const u16, b: *const u16, bt: *const u16, c: *const f32, d: *mut f32));

/// CPU references.
#[cfg(not(target_arch = "nvptx64"))]
pub mod reference {
    use super::*;

    /// What [`ldmatrix_probe`] writes.
    pub fn ldmatrix_probe() -> Vec<u32> {
        let mut out = Vec::new();
        for lane in 0..32 {
            let word = |m: usize, trans: bool| {
                layout::ldmatrix_lane(|r| core::array::from_fn(|c| probe_value(m, r, c)), lane, trans)
            };
            out.push(word(0, false));
            out.extend((0..2).map(|m| word(m, false)));
            out.extend((0..4).map(|m| word(m, false)));
            out.push(word(0, true));
            out.extend((0..2).map(|m| word(m, true)));
            out.extend((0..4).map(|m| word(m, true)));
        }
        out
    }

    /// Test inputs for [`mma_bf16`] / [`mma_f16`]: small integers (exact in bf16 and f16,
    /// and every partial sum exact in f32), so the GPU must match bit for bit. Returns
    /// `(a, b, c)` as f32: A 16×32, B 32×16, C 16×16, row-major.
    pub fn mma_inputs() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let a = (0..MMA_M * MMA_K)
            .map(|i| ((i * 7 + i / MMA_K * 3) % 9) as f32 - 4.0)
            .collect();
        let b = (0..MMA_K * MMA_N)
            .map(|i| ((i * 5 + i / MMA_N) % 7) as f32 - 3.0)
            .collect();
        let c = (0..MMA_M * MMA_N).map(|i| (i % 13) as f32 * 0.25).collect();
        (a, b, c)
    }

    /// `Bᵀ` (N×K) of a K×N row-major `b`.
    pub fn transpose(b: &[f32]) -> Vec<f32> {
        (0..MMA_N * MMA_K).map(|i| b[(i % MMA_K) * MMA_N + i / MMA_K]).collect()
    }

    /// `A·B + C` (16×16, row-major), twice (what `d` must hold).
    pub fn mma_tile(a: &[f32], b: &[f32], c: &[f32]) -> Vec<f32> {
        let one: Vec<f32> = (0..MMA_M * MMA_N)
            .map(|i| {
                let (row, col) = (i / MMA_N, i % MMA_N);
                let dot: f64 = (0..MMA_K)
                    .map(|k| a[row * MMA_K + k] as f64 * b[k * MMA_N + col] as f64)
                    .sum();
                (c[i] as f64 + dot) as f32
            })
            .collect();
        [one.clone(), one].concat()
    }
}
