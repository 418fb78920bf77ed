//! Tensor-core fragments: `ldmatrix` (shared memory → registers) and `mma.sync`
//! m16n8k16 with bf16/f16 inputs and f32 accumulators.
//!
//! Fragment layouts ([`layout`], from the PTX ISA "Matrix Fragments for mma.m16n8k16 with
//! floating point type" and "ldmatrix"), with `g = lane / 4` and `t = lane % 4`:
//!
//! - **A** (16×16, row-major), `[u32; 4]`, each word two 16-bit elements (`lo` = even
//!   column): `a[0]` = row g, cols 2t..2t+2; `a[1]` = row g+8, cols 2t..; `a[2]` = row g,
//!   cols 2t+8..; `a[3]` = row g+8, cols 2t+8...
//! - **B** (16×8, "col": stored as its transpose N×K), `[u32; 2]`: `b[0]` = rows (k) 2t,
//!   2t+1 of column g; `b[1]` = rows 2t+8, 2t+9 of column g.
//! - **C/D** (16×8 f32), `[f32; 4]`: rows g, g, g+8, g+8; columns 2t, 2t+1, 2t, 2t+1.
//! - **ldmatrix** (8×8 of 16-bit elements per matrix): lanes 8m..8m+8 give the addresses of
//!   the 8 rows (16 bytes each, 16-byte aligned) of matrix m; register m of lane l holds
//!   row g, columns 2t, 2t+1 of matrix m (with `.trans`: column g, rows 2t, 2t+1).
//!
//! So `ldmatrix_x4` on the four 8×8 quadrants of a row-major 16×16 A tile (rows 0-7/cols
//! 0-7, rows 8-15/cols 0-7, rows 0-7/cols 8-15, rows 8-15/cols 8-15) yields exactly the A
//! fragment, and `ldmatrix_x2` on the two 8×8 halves of an N-major (K contiguous) 8×16 B
//! tile yields the B fragment; for a K-major B tile use `ldmatrix_x2_trans`.
//!
//! On the host every function gathers the 32 lanes' operands with one
//! `hooks::warp_exchange(FULL_MASK, ..)` and evaluates the pure [`layout`] functions: the
//! results are bit-exact for `ldmatrix`; for `mma` each output is the exact
//! `C + Σ A·B` rounded once to f32, which the tensor cores match whenever the sum is
//! exactly representable (e.g. small integers), and otherwise agree to about 1 ulp.
//!
//! All of these are warp-wide (`.sync.aligned`): every lane of the warp must execute the
//! same call, converged. They are inline PTX, which this rustc does not mark `convergent`;
//! they are not `pure`, so LLVM does not move or merge them, but do not put them under
//! control flow that differs between the lanes of a warp.

#[cfg(not(target_arch = "nvptx64"))]
use crate::cpu::hooks;
use crate::shared::SharedPtr;
#[cfg(not(target_arch = "nvptx64"))]
use crate::thread::lane_id;
#[cfg(not(target_arch = "nvptx64"))]
use crate::warp::FULL_MASK;

/// Pure fragment-layout functions (no hooks): used by the host implementation and by
/// host-side references of test kernels.
pub mod layout {
    /// (row, column) in the 16×16 A matrix of element `i` (0..8) of lane `lane`'s A
    /// fragment; element `i` is the `i % 2` half (0 = low) of word `i / 2`.
    pub const fn a_coord(lane: u32, i: u32) -> (usize, usize) {
        let (g, t) = ((lane / 4) as usize, (lane % 4) as usize);
        let i = i as usize;
        let row = if i < 2 || (4 <= i && i < 6) { g } else { g + 8 };
        let col = t * 2 + (i & 1) + if i >= 4 { 8 } else { 0 };
        (row, col)
    }

    /// (row k, column n) in the 16×8 B matrix of element `i` (0..4) of lane `lane`'s B
    /// fragment (word `i / 2`, half `i % 2`).
    pub const fn b_coord(lane: u32, i: u32) -> (usize, usize) {
        let (g, t) = ((lane / 4) as usize, (lane % 4) as usize);
        let i = i as usize;
        let row = t * 2 + (i & 1) + if i >= 2 { 8 } else { 0 };
        (row, g)
    }

    /// (row, column) in the 16×8 C/D matrix of element `i` (0..4) of lane `lane`'s
    /// accumulator fragment.
    pub const fn c_coord(lane: u32, i: u32) -> (usize, usize) {
        let (g, t) = ((lane / 4) as usize, (lane % 4) as usize);
        let i = i as usize;
        let row = if i < 2 { g } else { g + 8 };
        (row, t * 2 + (i & 1))
    }

    /// (row, column) in an 8×8 matrix *as stored* (row r = the 16 bytes at address r) of
    /// the low and high halves of the word `ldmatrix` gives lane `lane` for that matrix.
    pub const fn ldmatrix_coord(lane: u32, trans: bool) -> [(usize, usize); 2] {
        let (g, t) = ((lane / 4) as usize, (lane % 4) as usize);
        if trans {
            [(2 * t, g), (2 * t + 1, g)]
        } else {
            [(g, 2 * t), (g, 2 * t + 1)]
        }
    }

    /// The word `ldmatrix` gives lane `lane` for one 8×8 matrix whose row `r` is
    /// `row(r)` (eight 16-bit elements).
    pub fn ldmatrix_lane(row: impl Fn(usize) -> [u16; 8], lane: u32, trans: bool) -> u32 {
        let [(r0, c0), (r1, c1)] = ldmatrix_coord(lane, trans);
        row(r0)[c0] as u32 | (row(r1)[c1] as u32) << 16
    }

    fn half(word: u32, i: u32) -> u16 {
        (word >> (16 * (i % 2))) as u16
    }

    /// Lane `lane`'s A fragment of the 16×16 matrix `a` (16-bit patterns, row-major).
    pub fn a_fragment(a: &[[u16; 16]; 16], lane: u32) -> [u32; 4] {
        core::array::from_fn(|w| {
            let (lo, hi) = (a_coord(lane, 2 * w as u32), a_coord(lane, 2 * w as u32 + 1));
            a[lo.0][lo.1] as u32 | (a[hi.0][hi.1] as u32) << 16
        })
    }

    /// Lane `lane`'s B fragment of the 16×8 matrix `b` (16-bit patterns, `b[k][n]`).
    pub fn b_fragment(b: &[[u16; 8]; 16], lane: u32) -> [u32; 2] {
        core::array::from_fn(|w| {
            let (lo, hi) = (b_coord(lane, 2 * w as u32), b_coord(lane, 2 * w as u32 + 1));
            b[lo.0][lo.1] as u32 | (b[hi.0][hi.1] as u32) << 16
        })
    }

    /// Lane `lane`'s C/D fragment of the 16×8 matrix `c`.
    pub fn c_fragment(c: &[[f32; 8]; 16], lane: u32) -> [f32; 4] {
        core::array::from_fn(|i| {
            let (r, col) = c_coord(lane, i as u32);
            c[r][col]
        })
    }

    /// Rebuilds the A matrix (as f32, via `elem`) from all 32 lanes' A fragments.
    pub fn a_matrix(frags: &[[u32; 4]; 32], elem: fn(u16) -> f32) -> [[f32; 16]; 16] {
        let mut a = [[0.0; 16]; 16];
        for lane in 0..32u32 {
            for i in 0..8 {
                let (r, c) = a_coord(lane, i);
                a[r][c] = elem(half(frags[lane as usize][i as usize / 2], i));
            }
        }
        a
    }

    /// Rebuilds the B matrix (`b[k][n]`, as f32) from all 32 lanes' B fragments.
    pub fn b_matrix(frags: &[[u32; 2]; 32], elem: fn(u16) -> f32) -> [[f32; 8]; 16] {
        let mut b = [[0.0; 8]; 16];
        for lane in 0..32u32 {
            for i in 0..4 {
                let (r, c) = b_coord(lane, i);
                b[r][c] = elem(half(frags[lane as usize][i as usize / 2], i));
            }
        }
        b
    }

    /// `D = A·B + C` for one lane's outputs: each element is the exact sum rounded once
    /// to f32 (products of 16-bit floats are exact in f64, and so is the sum of 16 of
    /// them unless their magnitudes differ by more than about 2^29).
    pub fn mma_lane(a: &[[f32; 16]; 16], b: &[[f32; 8]; 16], c: [f32; 4], lane: u32) -> [f32; 4] {
        core::array::from_fn(|i| {
            let (r, col) = c_coord(lane, i as u32);
            let mut acc = c[i] as f64;
            for (k, b_row) in b.iter().enumerate() {
                acc += a[r][k] as f64 * b_row[col] as f64;
            }
            acc as f32
        })
    }

    /// `bf16` bit pattern → f32 (exact).
    pub fn bf16_bits_to_f32(bits: u16) -> f32 {
        f32::from_bits((bits as u32) << 16)
    }

    /// `f16` bit pattern → f32 (exact).
    pub fn f16_bits_to_f32(bits: u16) -> f32 {
        half::f16::from_bits(bits).to_f32()
    }
}

#[cfg(not(target_arch = "nvptx64"))]
fn ldmatrix_host<const N: usize>(addr: SharedPtr<u8>, trans: bool) -> [u32; N] {
    let addrs = hooks::warp_exchange(FULL_MASK, addr.as_ptr() as usize);
    let lane = lane_id();
    core::array::from_fn(|m| {
        let row = |r: usize| {
            let p = addrs[8 * m + r];
            if !p.is_multiple_of(16) {
                hooks::trap("ldmatrix: row address not 16-byte aligned");
            }
            // SAFETY: the kernel passed this lane's row address of a matrix in shared
            // memory (16 readable, aligned bytes), as `ldmatrix` requires.
            unsafe { (p as *const [u16; 8]).read() }
        };
        layout::ldmatrix_lane(row, lane, trans)
    })
}

macro_rules! ldmatrix {
    ($(#[$doc:meta])* $name:ident, $n:literal, $trans:literal, $sfx:literal, $regs:literal, $($r:ident),*) => {
        $(#[$doc])*
        #[doc = concat!("\n\nEmits `ldmatrix.sync.aligned.m8n8.x", $n, $sfx,
            ".shared.b16`. Host: `hooks::warp_exchange` of the addresses + [`layout::ldmatrix_lane`].")]
        ///
        /// # Safety
        #[doc = concat!("Called by all 32 lanes of the warp, converged. Lanes 0..8×", stringify!($n),
            " pass the address of one 16-byte aligned row of 16 readable bytes of shared memory ",
            "(lane 8m+r: row r of matrix m); the other lanes' addresses are ignored.")]
        #[inline(always)]
        pub unsafe fn $name(addr: SharedPtr<u8>) -> [u32; $n] {
            #[cfg(target_arch = "nvptx64")]
            {
                $(let $r: u32;)*
                // SAFETY: the caller guarantees valid, aligned row addresses and a converged
                // warp.
                unsafe {
                    core::arch::asm!(
                        concat!("ldmatrix.sync.aligned.m8n8.x", $n, $sfx, ".shared.b16 {{", $regs, "}}, [{a}];"),
                        $($r = out(reg32) $r,)* a = in(reg32) addr.addr(), options(readonly, nostack),
                    );
                }
                [$($r),*]
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                ldmatrix_host(addr, $trans)
            }
        }
    };
}

ldmatrix!(
    /// Loads two 8×8 matrices of 16-bit elements from shared memory, one fragment word
    /// per matrix and lane (e.g. a B fragment; layout in the module docs).
    ldmatrix_x2, 2, false, "", "{r0}, {r1}", r0, r1
);
ldmatrix!(
    /// Loads four 8×8 matrices of 16-bit elements (e.g. an A fragment).
    ldmatrix_x4, 4, false, "", "{r0}, {r1}, {r2}, {r3}", r0, r1, r2, r3
);
ldmatrix!(
    /// Loads two 8×8 matrices transposed: each lane gets a column pair instead of a row
    /// pair (e.g. a B fragment from a K-major tile).
    ldmatrix_x2_trans, 2, true, ".trans", "{r0}, {r1}", r0, r1
);
ldmatrix!(
    /// Loads four 8×8 matrices transposed.
    ldmatrix_x4_trans, 4, true, ".trans", "{r0}, {r1}, {r2}, {r3}", r0, r1, r2, r3
);
ldmatrix!(
    /// [`ldmatrix_x1`] as an array (one matrix).
    ldmatrix_x1_array, 1, false, "", "{r0}", r0
);
ldmatrix!(
    /// [`ldmatrix_x1_trans`] as an array (one matrix).
    ldmatrix_x1_trans_array, 1, true, ".trans", "{r0}", r0
);

/// Loads one 8×8 matrix of 16-bit elements from shared memory: one fragment word per lane
/// (lanes 0..8 give the row addresses; layout in the module docs).
///
/// Emits `ldmatrix.sync.aligned.m8n8.x1.shared.b16`.
///
/// # Safety
/// As for [`ldmatrix_x1_array`].
#[inline(always)]
pub unsafe fn ldmatrix_x1(addr: SharedPtr<u8>) -> u32 {
    // SAFETY: forwarded from the caller.
    unsafe { ldmatrix_x1_array(addr)[0] }
}

/// Loads one 8×8 matrix transposed: one fragment word per lane.
///
/// Emits `ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16`.
///
/// # Safety
/// As for [`ldmatrix_x1_trans_array`].
#[inline(always)]
pub unsafe fn ldmatrix_x1_trans(addr: SharedPtr<u8>) -> u32 {
    // SAFETY: forwarded from the caller.
    unsafe { ldmatrix_x1_trans_array(addr)[0] }
}

#[cfg(not(target_arch = "nvptx64"))]
fn mma_host(a: [u32; 4], b: [u32; 2], c: [f32; 4], elem: fn(u16) -> f32) -> [f32; 4] {
    let all = hooks::warp_exchange(FULL_MASK, (a, b));
    let a_frags: [[u32; 4]; 32] = core::array::from_fn(|l| all[l].0);
    let b_frags: [[u32; 2]; 32] = core::array::from_fn(|l| all[l].1);
    let (am, bm) = (layout::a_matrix(&a_frags, elem), layout::b_matrix(&b_frags, elem));
    layout::mma_lane(&am, &bm, c, lane_id())
}

macro_rules! mma {
    ($(#[$doc:meta])* $name:ident, $ty:literal, $elem:path) => {
        $(#[$doc])*
        #[doc = concat!("\n\nEmits `mma.sync.aligned.m16n8k16.row.col.f32.", $ty, ".", $ty,
            ".f32 {d0..d3}, {a0..a3}, {b0, b1}, {c0..c3};` (sm_80+). Host: `hooks::warp_exchange` of the ",
            "fragments + [`layout::mma_lane`].")]
        ///
        /// # Safety
        /// Called by all 32 lanes of the warp, converged (`.sync.aligned`).
        #[inline(always)]
        pub unsafe fn $name(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
            #[cfg(target_arch = "nvptx64")]
            {
                let (d0, d1, d2, d3): (f32, f32, f32, f32);
                // SAFETY: register-only warp collective; the caller guarantees a converged
                // warp.
                unsafe {
                    core::arch::asm!(
                        concat!("mma.sync.aligned.m16n8k16.row.col.f32.", $ty, ".", $ty, ".f32 ",
                            "{{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, ",
                            "{{{c0}, {c1}, {c2}, {c3}}};"),
                        d0 = out(reg32) d0, d1 = out(reg32) d1, d2 = out(reg32) d2, d3 = out(reg32) d3,
                        a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                        b0 = in(reg32) b[0], b1 = in(reg32) b[1],
                        c0 = in(reg32) c[0], c1 = in(reg32) c[1], c2 = in(reg32) c[2], c3 = in(reg32) c[3],
                        options(nomem, nostack),
                    );
                }
                [d0, d1, d2, d3]
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                mma_host(a, b, c, $elem)
            }
        }
    };
}

mma!(
    /// `D = A·B + C` for a 16×8×16 tile with bf16 A and B and f32 C/D, one fragment per
    /// lane (layouts in the module docs).
    mma_m16n8k16_bf16_f32, "bf16", layout::bf16_bits_to_f32
);
mma!(
    /// `D = A·B + C` for a 16×8×16 tile with f16 A and B and f32 C/D, one fragment per
    /// lane (layouts in the module docs).
    mma_m16n8k16_f16_f32, "f16", layout::f16_bits_to_f32
);

#[cfg(test)]
mod tests {
    use super::layout::*;

    fn bf16(x: f32) -> u16 {
        half::bf16::from_f32(x).to_bits()
    }

    /// Small integers: products and sums are exact, so any summation order agrees.
    type Mats = ([[f32; 16]; 16], [[f32; 8]; 16], [[f32; 8]; 16]);

    fn test_matrices() -> Mats {
        let a = core::array::from_fn(|r| core::array::from_fn(|k| ((r * 7 + k * 3) % 11) as f32 - 5.0));
        let b = core::array::from_fn(|k| core::array::from_fn(|n| ((k * 5 + n * 13) % 9) as f32 - 4.0));
        let c = core::array::from_fn(|r| core::array::from_fn(|n| (r * 8 + n) as f32 * 0.5));
        (a, b, c)
    }

    fn matmul(a: &[[f32; 16]; 16], b: &[[f32; 8]; 16], c: &[[f32; 8]; 16]) -> [[f32; 8]; 16] {
        core::array::from_fn(|r| core::array::from_fn(|n| c[r][n] + (0..16).map(|k| a[r][k] * b[k][n]).sum::<f32>()))
    }

    #[test]
    fn every_element_belongs_to_exactly_one_lane() {
        let mut a_seen = [[0; 16]; 16];
        let mut b_seen = [[0; 8]; 16];
        let mut c_seen = [[0; 8]; 16];
        for lane in 0..32 {
            (0..8).for_each(|i| a_seen[a_coord(lane, i).0][a_coord(lane, i).1] += 1);
            (0..4).for_each(|i| b_seen[b_coord(lane, i).0][b_coord(lane, i).1] += 1);
            (0..4).for_each(|i| c_seen[c_coord(lane, i).0][c_coord(lane, i).1] += 1);
        }
        assert!(a_seen.iter().flatten().all(|&n| n == 1));
        assert!(b_seen.iter().flatten().all(|&n| n == 1));
        assert!(c_seen.iter().flatten().all(|&n| n == 1));
    }

    #[test]
    fn fragment_layout_matches_the_ptx_isa_figures() {
        // Lane 5: g = 1, t = 1.
        assert_eq!(a_coord(5, 0), (1, 2));
        assert_eq!(a_coord(5, 3), (9, 3));
        assert_eq!(a_coord(5, 4), (1, 10));
        assert_eq!(a_coord(5, 7), (9, 11));
        assert_eq!(b_coord(5, 0), (2, 1));
        assert_eq!(b_coord(5, 3), (11, 1));
        assert_eq!(c_coord(5, 1), (1, 3));
        assert_eq!(c_coord(5, 2), (9, 2));
        assert_eq!(ldmatrix_coord(5, false), [(1, 2), (1, 3)]);
        assert_eq!(ldmatrix_coord(5, true), [(2, 1), (3, 1)]);
    }

    #[test]
    fn mma_of_all_lanes_fragments_is_the_matmul() {
        let (a, b, c) = test_matrices();
        let a_bits: [[u16; 16]; 16] = a.map(|row| row.map(bf16));
        let b_bits: [[u16; 8]; 16] = b.map(|row| row.map(bf16));
        let a_frags: [[u32; 4]; 32] = core::array::from_fn(|l| a_fragment(&a_bits, l as u32));
        let b_frags: [[u32; 2]; 32] = core::array::from_fn(|l| b_fragment(&b_bits, l as u32));
        let am = a_matrix(&a_frags, bf16_bits_to_f32);
        let bm = b_matrix(&b_frags, bf16_bits_to_f32);
        assert_eq!(am, a);
        assert_eq!(bm, b);
        let want = matmul(&a, &b, &c);
        for lane in 0..32 {
            let d = mma_lane(&am, &bm, c_fragment(&c, lane), lane);
            assert_eq!(d, c_fragment(&want, lane), "lane {lane}");
        }
    }

    #[test]
    fn ldmatrix_x4_on_quadrants_gives_the_a_fragment() {
        let (a, ..) = test_matrices();
        let a_bits: [[u16; 16]; 16] = a.map(|row| row.map(bf16));
        // Matrix m of x4 = quadrant (rows 8*(m%2).., cols 8*(m/2)..).
        let quadrant_row =
            |m: usize, r: usize| -> [u16; 8] { core::array::from_fn(|c| a_bits[8 * (m % 2) + r][8 * (m / 2) + c]) };
        for lane in 0..32 {
            let regs: [u32; 4] = core::array::from_fn(|m| ldmatrix_lane(|r| quadrant_row(m, r), lane, false));
            assert_eq!(regs, a_fragment(&a_bits, lane), "lane {lane}");
        }
    }

    #[test]
    fn ldmatrix_gives_the_b_fragment_from_either_storage_order() {
        let (_, b, _) = test_matrices();
        let b_bits: [[u16; 8]; 16] = b.map(|row| row.map(bf16));
        // N-major (B^T stored row by row, K contiguous): matrix m = k in 8m..8m+8.
        let n_major_row = |m: usize, r: usize| -> [u16; 8] { core::array::from_fn(|c| b_bits[8 * m + c][r]) };
        // K-major (B stored row by row, N contiguous): matrix m = rows 8m..8m+8, transposed.
        let k_major_row = |m: usize, r: usize| -> [u16; 8] { core::array::from_fn(|c| b_bits[8 * m + r][c]) };
        for lane in 0..32 {
            let plain: [u32; 2] = core::array::from_fn(|m| ldmatrix_lane(|r| n_major_row(m, r), lane, false));
            let trans: [u32; 2] = core::array::from_fn(|m| ldmatrix_lane(|r| k_major_row(m, r), lane, true));
            assert_eq!(plain, b_fragment(&b_bits, lane), "lane {lane}");
            assert_eq!(trans, b_fragment(&b_bits, lane), "lane {lane}");
        }
    }

    #[test]
    fn f16_fragments_round_trip() {
        let (a, ..) = test_matrices();
        let a_bits: [[u16; 16]; 16] = a.map(|row| row.map(|x| half::f16::from_f32(x).to_bits()));
        let frags: [[u32; 4]; 32] = core::array::from_fn(|l| a_fragment(&a_bits, l as u32));
        assert_eq!(a_matrix(&frags, f16_bits_to_f32), a);
    }
}
